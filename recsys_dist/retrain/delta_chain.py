"""The publications of a run that follows the data: full bases and the deltas between them.

Layout (local or ``s3://``)::

    ROOT/published/000001/   model/ (a full SavedModel), manifest.json, then _SUCCESS
    ROOT/published/000002/   delta/ (rows changed since 000001), manifest.json, _SUCCESS
    ROOT/published/LATEST    the newest complete version (written after its _SUCCESS)

A version directory without ``_SUCCESS`` is a publication cut short: it is never read
and the next publication replaces it. A manifest names its ``base`` and ``parent``
versions, the partitions it adds, the checkpoint it was exported from and the SHA-256 of
every file. The SavedModel of a delta version is its base with every delta up to it
applied (``export/delta.py``), equal to a full export of the same checkpoint.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import posixpath
import shutil

from recsys_dist import storage_io
from recsys_dist.errors import RecsysError
from recsys_dist.export import delta
from recsys_dist.export.saved_model import EXPORT_INFO

PUBLISHED = "published"  # under the follow root
SUCCESS = "_SUCCESS"
MANIFEST = "manifest.json"
LATEST = "LATEST"
MODEL = "model"
DELTA = "delta"


class ChainError(RecsysError):
    """A publication of the chain is missing, cut short or does not match its files."""


def version_name(version: int) -> str:
    return f"{version:06d}"


def _checksums(local_dir: str) -> dict[str, str]:
    sums = {}
    for folder, _, names in os.walk(local_dir):
        for name in sorted(names):
            path = os.path.join(folder, name)
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            sums[os.path.relpath(path, local_dir)] = digest.hexdigest()
    return dict(sorted(sums.items()))


def directory_bytes(local_dir: str) -> int:
    return sum(
        os.path.getsize(os.path.join(folder, name))
        for folder, _, names in os.walk(local_dir)
        for name in names
    )


def checked_copy(version_dir: str, manifest: dict, scratch: str) -> str:
    """A local directory of the model or delta of the version at ``version_dir``, its
    files checked against ``manifest`` (downloaded into ``scratch`` when remote).

    Raises:
      ChainError: a file is missing or its checksum differs.
    """
    part = MODEL if manifest["kind"] == "base" else DELTA
    source = posixpath.join(version_dir.rstrip("/"), part)
    local = source
    if storage_io.is_remote(source):
        local = os.path.join(scratch, version_name(manifest["version"]))
        storage_io.download_dir(source, local)
    elif not os.path.isdir(local):
        raise ChainError(f"{source}: missing; {version_dir} is not a whole publication")
    found = _checksums(local)
    if found != manifest["files"]:
        wrong = {
            n
            for n in set(found) | set(manifest["files"])
            if found.get(n) != manifest["files"].get(n)
        }
        raise ChainError(
            f"{source}: its files do not match {MANIFEST} ({', '.join(sorted(wrong)[:5])}); "
            "the publication was changed after it was written"
        )
    return local


class Chain:
    """The publications under ``ROOT/published``.

    Args:
      root: The follow root (local or remote).
    """

    def __init__(self, published: str):
        self.directory = published.rstrip("/")

    def path(self, version: int) -> str:
        return posixpath.join(self.directory, version_name(version))

    def manifests(self) -> list[dict]:
        """The manifests of the complete versions, oldest first."""
        found = []
        for name in storage_io.listdir(self.directory):
            if not (name.isdigit() and len(name) == 6):
                continue
            if storage_io.exists(posixpath.join(self.directory, name, SUCCESS)):
                found.append(self._manifest(int(name)))
        return sorted(found, key=lambda m: m["version"])

    def _manifest(self, version: int) -> dict:
        path = posixpath.join(self.path(version), MANIFEST)
        try:
            manifest = json.loads(storage_io.read_text(path))
        except ValueError as exc:
            raise ChainError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(manifest, dict) or manifest.get("version") != version:
            raise ChainError(f"{path}: not the manifest of version {version_name(version)}")
        return manifest

    def covered(self) -> set[str]:
        """The partitions the complete publications hold."""
        return {name for m in self.manifests() for name in m["partitions"]}

    def links(self, manifests: list[dict]) -> tuple[dict, list[dict]]:
        """The newest base and the deltas after it, from ``manifests`` (oldest first).

        Raises:
          ChainError: there is no base, or a delta's parent is not the version before it.
        """
        bases = [m for m in manifests if m["kind"] == "base"]
        if not bases:
            raise ChainError(f"{self.directory}: holds no complete base publication")
        base = bases[-1]
        deltas = [m for m in manifests if m["version"] > base["version"]]
        previous = base["version"]
        for manifest in deltas:
            if manifest["parent"] != previous or manifest["base"] != base["version"]:
                raise ChainError(
                    f"{self.path(manifest['version'])}: its parent is "
                    f"{version_name(manifest['parent'])}, not {version_name(previous)}; "
                    "the chain is broken (publish a new base)"
                )
            previous = manifest["version"]
        return base, deltas

    def local_copy(self, manifest: dict, scratch: str) -> str:
        """:func:`checked_copy` of version ``manifest``."""
        return checked_copy(self.path(manifest["version"]), manifest, scratch)

    def publish(self, export_dir: str, previous: dict | None, manifest: dict) -> dict:
        """Publishes ``export_dir`` (a local full export) as the next version: a base when
        ``previous`` (the tensors of the version before) is None, else the delta from it.
        ``manifest`` gives the fields of the caller (partitions, checkpoint, step). Files,
        then the manifest, then ``_SUCCESS``, then ``LATEST``. Returns the manifest."""
        done = self.manifests()
        version = done[-1]["version"] + 1 if done else 1
        target = self.path(version)
        storage_io.rmtree(target)  # a publication of this number cut short
        scratch = storage_io.local_scratch("recsys_dist_publish_")
        try:
            part = os.path.join(scratch, MODEL if previous is None else DELTA)
            rows = None
            if previous is None:
                shutil.copytree(export_dir, part)
            else:
                rows = _rows_changed(delta.write_delta(previous, export_dir, part))
            base = version if previous is None else done[-1]["base"]
            manifest = dict(
                manifest,
                version=version,
                kind="base" if previous is None else "delta",
                base=base,
                parent=done[-1]["version"] if done else None,
                published_at=datetime.datetime.now(datetime.timezone.utc).isoformat(
                    timespec="seconds"
                ),
                bytes=directory_bytes(part),
                rows_changed=rows,
                full_bytes=directory_bytes(export_dir),
                files=_checksums(part),
            )
            with open(os.path.join(scratch, MANIFEST), "w", encoding="utf-8") as handle:
                json.dump(manifest, handle, indent=2)
            with open(os.path.join(scratch, SUCCESS), "w", encoding="utf-8") as handle:
                handle.write(version_name(version) + "\n")
            _copy_up(scratch, target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        storage_io.write_text(posixpath.join(self.directory, LATEST), version_name(version) + "\n")
        return manifest


def _rows_changed(summary: delta.DeltaSummary) -> dict:
    """The rows a delta holds of the tensors it compared row by row, and their total."""
    compared = [c for c in summary.tensors.values() if c.how in (delta.ROWS, delta.SAME)]
    return {
        "changed": sum(c.changed for c in compared if c.how == delta.ROWS),
        "total": sum(c.total for c in compared),
    }


def _copy_up(local_dir: str, target: str) -> None:
    """Copies ``local_dir`` to ``target`` with ``manifest.json`` and ``_SUCCESS`` last."""
    if storage_io.is_remote(target):
        storage_io.upload_dir(local_dir, target, last=[MANIFEST, SUCCESS])
        return
    os.makedirs(target, exist_ok=True)
    for name in sorted(os.listdir(local_dir), key=lambda n: n in (MANIFEST, SUCCESS)):
        if name == SUCCESS:
            continue
        source = os.path.join(local_dir, name)
        if os.path.isdir(source):
            shutil.copytree(source, os.path.join(target, name))
        else:
            shutil.copy2(source, os.path.join(target, name))
    staged = os.path.join(target, SUCCESS + ".tmp")
    shutil.copy2(os.path.join(local_dir, SUCCESS), staged)
    os.replace(staged, os.path.join(target, SUCCESS))


def _version_manifest(directory: str) -> dict:
    path = posixpath.join(directory.rstrip("/"), MANIFEST)
    if not storage_io.exists(posixpath.join(directory.rstrip("/"), SUCCESS)):
        raise ChainError(
            f"{directory}: not a complete publication (no {SUCCESS}); name a version "
            "directory under published/ that has one"
        )
    try:
        return json.loads(storage_io.read_text(path))
    except ValueError as exc:
        raise ChainError(f"{path}: not valid JSON ({exc})") from None


def newest_chain(published: str) -> tuple[str, list[str]]:
    """The version directories of the newest complete version under ``published``: its
    base and the deltas from it on, in order.

    Raises:
      ChainError: no complete base, or a broken chain.
    """
    chain = Chain(published)
    base, deltas = chain.links(chain.manifests())
    return chain.path(base["version"]), [chain.path(m["version"]) for m in deltas]


def export_chain(base: str, deltas: list[str], out_dir: str) -> str:
    """Writes the SavedModel of version ``base`` with the versions ``deltas`` applied in
    order to ``out_dir`` (local or remote; it must not exist or be empty). Returns the
    name of the version it stands for. ``base`` may also be the ``published`` directory
    itself (no ``deltas``): then its newest complete version is written.

    Raises:
      ChainError: a directory is not a complete publication, a delta does not follow
        the one before it (or ``base``), or a file does not match its manifest.
    """
    if not deltas and storage_io.exists(posixpath.join(base.rstrip("/"), LATEST)):
        base, deltas = newest_chain(base)
    manifests = [_version_manifest(d) for d in [base, *deltas]]
    if manifests[0]["kind"] != "base":
        raise ChainError(f"{base}: a {manifests[0]['kind']}, not a base; --base names a base")
    previous = manifests[0]
    for directory, manifest in zip(deltas, manifests[1:]):
        if manifest["kind"] != "delta" or manifest["parent"] != previous["version"]:
            raise ChainError(
                f"{directory}: version {version_name(manifest['version'])} does not follow "
                f"version {version_name(previous['version'])} (its parent is "
                f"{version_name(manifest['parent'] or 0)}); give the deltas after the base, "
                "in order, without gaps"
            )
        previous = manifest
    scratch = storage_io.local_scratch("recsys_dist_chain_")
    try:
        local = [checked_copy(d, m, scratch) for d, m in zip([base, *deltas], manifests)]
        if not storage_io.is_remote(out_dir):
            delta.write_chain(local[0], local[1:], out_dir)
        else:
            staged = os.path.join(scratch, "out")
            delta.write_chain(local[0], local[1:], staged)
            storage_io.upload_dir(staged, out_dir, last=[EXPORT_INFO])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return version_name(previous["version"])
