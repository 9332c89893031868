"""Published models of a daily retraining root, and the atomic way one is published.

Layout (local or ``s3://``)::

    ROOT/runs/<date>/          the day's training run (its model_dir)
    ROOT/published/<date>/     export/ (SavedModel), config.yaml, features.yaml,
                               manifest.json, then _SUCCESS (written last)
    ROOT/CURRENT               the date of the model to serve (written after _SUCCESS)

A published directory without ``_SUCCESS`` is a publication cut short: it is never
used as a parent or served, and publishing that date again replaces it.
"""

from __future__ import annotations

import datetime
import json
import os
import posixpath
import subprocess
import sys

from recsys_dist import storage_io
from recsys_dist.cluster.server_forks import die_with_parent
from recsys_dist.errors import RecsysError
from recsys_dist.export import ExportError

SUCCESS = "_SUCCESS"
MANIFEST = "manifest.json"
CURRENT = "CURRENT"
CONFIG = "config.yaml"
FEATURES = "features.yaml"


class PublishError(RecsysError):
    """A published model is missing or unreadable."""


def _join(*parts: str) -> str:
    return posixpath.join(*parts)


class Publications:
    """The published models under ``root``."""

    def __init__(self, root: str):
        self.root = root
        self.published = _join(root, "published")

    def run_dir(self, date: datetime.date) -> str:
        return _join(self.root, "runs", date.isoformat())

    def directory(self, date: datetime.date) -> str:
        return _join(self.published, date.isoformat())

    def is_published(self, date: datetime.date) -> bool:
        return storage_io.exists(_join(self.directory(date), SUCCESS))

    def scan(self) -> tuple[list[datetime.date], list[datetime.date]]:
        """Dates under ``published/``: complete ones (with ``_SUCCESS``) and cut-short ones,
        each oldest first. Entries whose name is not a date are ignored."""
        complete, incomplete = [], []
        for name in storage_io.listdir(self.published):
            try:
                date = datetime.date.fromisoformat(name)
            except ValueError:
                continue
            (complete if self.is_published(date) else incomplete).append(date)
        return sorted(complete), sorted(incomplete)

    def dates(self) -> list[datetime.date]:
        """Dates with a complete publication, oldest first."""
        return self.scan()[0]

    def latest_before(self, date: datetime.date) -> datetime.date | None:
        earlier = [d for d in self.dates() if d < date]
        return earlier[-1] if earlier else None

    def manifest(self, date: datetime.date) -> dict:
        """The publication's ``manifest.json``; it names the checkpoint it was exported from.

        Raises:
          PublishError: it is missing, not JSON, or names no checkpoint.
        """
        directory = self.directory(date)
        path = _join(directory, MANIFEST)
        if not storage_io.exists(path):
            raise PublishError(f"{path}: missing; {directory} is not a complete publication")
        try:
            manifest = json.loads(storage_io.read_text(path))
        except ValueError as exc:
            raise PublishError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(manifest, dict) or not manifest.get("checkpoint"):
            raise PublishError(
                f"{path}: has no 'checkpoint' (the training checkpoint the model was exported from)"
            )
        return manifest

    def checkpoint(self, date: datetime.date, manifest: dict) -> str:
        """The checkpoint ``manifest`` names or, if the root moved since (copied to S3, a
        renamed mount), the same ``runs/<d>/checkpoints/<ckpt>`` under this root.

        Raises:
          PublishError: neither exists.
        """
        path = str(manifest["checkpoint"]).rstrip("/")
        candidates = [path]
        if "://" not in path and not os.path.isabs(path):
            candidates.append(_join(self.root, path))
        parts = path.split("/")
        if len(parts) >= 4 and parts[-2] == "checkpoints" and parts[-4] == "runs":
            candidates.append(_join(self.root, "runs", parts[-3], "checkpoints", parts[-1]))
        for candidate in candidates:
            if storage_io.exists(candidate):
                return candidate
        raise PublishError(
            f"{_join(self.directory(date), MANIFEST)}: checkpoint {path} of "
            f"published model {date} does not exist (was its run directory "
            f"under {_join(self.root, 'runs')} removed?); the offline "
            "evaluation scores training checkpoints"
        )

    def current(self) -> str | None:
        path = _join(self.root, CURRENT)
        if not storage_io.exists(path):
            return None
        return storage_io.read_text(path).strip() or None

    def begin(self, date: datetime.date) -> str:
        """Clears a cut-short publication of ``date``; returns its directory."""
        directory = self.directory(date)
        storage_io.rmtree(directory)
        storage_io.makedirs(directory)
        return directory

    def finish(self, date: datetime.date, manifest: dict, files: dict[str, str]) -> None:
        """Writes ``files`` (name -> text), the manifest, ``_SUCCESS`` last, then CURRENT."""
        directory = self.directory(date)
        for name, text in files.items():
            storage_io.write_text(_join(directory, name), text)
        storage_io.write_text(_join(directory, MANIFEST), json.dumps(manifest, indent=2))
        storage_io.write_text(_join(directory, SUCCESS), date.isoformat() + "\n")
        newest = self.dates()[-1]
        if newest == date:  # a backfilled older day never takes CURRENT back
            storage_io.write_text(_join(self.root, CURRENT), date.isoformat() + "\n")


def local_config(directory: str, scratch: str) -> str:
    """The local path of a publication's ``config.yaml``, to load with ``load_config``.

    A local publication's own file; a remote one's ``config.yaml`` and ``features.yaml``
    are copied into ``scratch/<date>/`` first (the config names its feature config by a
    relative path).

    Raises:
      PublishError: one of the two files is missing.
    """
    for name in (CONFIG, FEATURES):
        if not storage_io.exists(_join(directory, name)):
            raise PublishError(
                f"{_join(directory, name)}: missing; {directory} is not a complete publication"
            )
    if not storage_io.is_remote(directory):
        return _join(directory, CONFIG)
    local = os.path.join(scratch, posixpath.basename(directory.rstrip("/")))
    os.makedirs(local, exist_ok=True)
    for name in (CONFIG, FEATURES):
        with open(os.path.join(local, name), "w", encoding="utf-8") as handle:
            handle.write(storage_io.read_text(_join(directory, name)))
    return os.path.join(local, CONFIG)


def export_apart(run_dir: str, out_dir: str, checkpoint: str | None = None) -> None:
    """Exports the newest checkpoint of ``run_dir`` (or ``checkpoint``) with
    ``recsys-dist export`` from a process of its own: this one's TensorFlow still holds
    the run's cluster, and with a task of it unreachable an
    op it runs while it builds the model (a variable's creation) waits on that task for
    ever. The export needs no cluster; its process dies with this one.

    Raises:
      ExportError: the export failed; its ``error:`` line, and its exit code.
    """
    done = subprocess.run(
        [sys.executable, "-m", "recsys_dist.cli", "export", "--model-dir", run_dir]
        + ["--out", out_dir, "--quiet"]
        + (["--checkpoint", checkpoint] if checkpoint else []),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_parent(os.getpid()),
    )
    if done.returncode == 0:
        return
    said = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    error = ExportError(
        said[-1][len("error: ") :]
        if said
        else f"the export of {run_dir} exited with {done.returncode}: {done.stderr[-2000:]}"
    )
    if done.returncode > 0:
        error.exit_code = done.returncode
    raise error
