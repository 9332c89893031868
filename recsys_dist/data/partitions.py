"""The complete partitions under a data root, for a run that follows the data as it lands.

Layouts: ``<root>/<key>=YYYY-MM-DD/hour=HH/`` (hourly) or ``<root>/<key>=YYYY-MM-DD/``
(daily). A partition is complete once its marker file (``_SUCCESS`` by default) exists:
the writer puts it there after the partition's last data file. A partition without one is
still being written and is not listed. Listing goes through fsspec, so local disk,
``s3://`` and ``hdfs://`` behave the same.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import posixpath

from recsys_dist import filesystems, storage_io
from recsys_dist.errors import DataError
from recsys_dist.storage_io import errors_named

#: The directory key of an hourly partition, under its date.
HOUR_KEY = "hour"


@dataclasses.dataclass(frozen=True)
class Partition:
    """One complete partition.

    Attributes:
      name: Its path under the root, e.g. ``dt=2026-01-01/hour=05``.
      start: The hour (or day) it holds, as a naive UTC datetime.
      files: Its Parquet files (full paths), sorted.
      sizes: Each file's size in bytes.
      marked_at: When its marker was written (the storage's modification time, UTC).
    """

    name: str
    start: datetime.datetime
    files: tuple[str, ...]
    sizes: tuple[int, ...]
    marked_at: datetime.datetime

    @property
    def fingerprint(self) -> str:
        """Identifies its contents: the file names relative to the partition, and sizes."""
        names = [posixpath.basename(f) for f in self.files]
        digest = hashlib.sha256(json.dumps([names, list(self.sizes)]).encode())
        return digest.hexdigest()[:16]

    @property
    def run_name(self) -> str:
        """A directory name for its training run: ``2026-01-01T05`` (hourly) or the date."""
        hourly = f"/{HOUR_KEY}=" in self.name
        return self.start.strftime("%Y-%m-%dT%H" if hourly else "%Y-%m-%d")


def _parse(key: str, value: str) -> int | datetime.date | None:
    if key == HOUR_KEY:
        return int(value) if len(value) == 2 and value.isdigit() and int(value) < 24 else None
    try:
        day = datetime.date.fromisoformat(value)
    except ValueError:
        return None
    return day if len(value) == 10 else None


def _modified(fs, path: str) -> datetime.datetime:
    stamp = fs.modified(path)
    if stamp.tzinfo is not None:
        stamp = stamp.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return stamp


def complete_partitions(
    root: str, partition_key: str = "dt", hourly: bool = True, marker: str = "_SUCCESS"
) -> tuple[list[Partition], list[str]]:
    """The complete partitions under ``root`` (oldest first), and the names of those
    still without a marker.

    Raises:
      DataError: ``root`` does not exist, or a complete partition holds no Parquet file.
      StorageError: the storage cannot be reached or read (names ``root``).
    """
    with errors_named(root, "list the partitions"):
        fs, stripped = filesystems.filesystem(root)
        if not fs.isdir(stripped):
            raise DataError(f"{root}: no such directory (the root of the partitions)")
        complete, pending = [], []
        for name, start in _candidates(fs, stripped, partition_key, hourly):
            directory = filesystems.join(stripped, name)
            if not fs.exists(filesystems.join(directory, marker)):
                pending.append(name)
                continue
            complete.append(_partition(fs, root, directory, name, start, marker))
    return sorted(complete, key=lambda p: p.start), sorted(pending)


def _candidates(fs, stripped: str, key: str, hourly: bool):
    """``(name, start)`` of every partition directory, complete or not."""
    for day_dir in _children(fs, stripped):
        day = _named(day_dir, key)
        if day is None:
            continue
        if not hourly:
            yield f"{key}={day.isoformat()}", datetime.datetime.combine(day, datetime.time())
            continue
        for hour_dir in _children(fs, filesystems.join(stripped, day_dir)):
            hour = _named(hour_dir, HOUR_KEY)
            if hour is not None:
                start = datetime.datetime.combine(day, datetime.time(hour))
                yield f"{key}={day.isoformat()}/{HOUR_KEY}={hour:02d}", start


def _children(fs, directory: str) -> list[str]:
    return sorted(
        posixpath.basename(p["name"].rstrip("/"))
        for p in fs.ls(directory, detail=True)
        if p["type"] == "directory"
    )


def _named(directory: str, key: str):
    prefix = f"{key}="
    if not directory.startswith(prefix):
        return None
    return _parse(key, directory[len(prefix) :])


def _partition(fs, root, directory, name, start, marker) -> Partition:
    found = sorted(
        (p, info["size"])
        for p, info in fs.find(directory, detail=True).items()
        if p.endswith(".parquet") and not posixpath.basename(p).startswith(("_", "."))
    )
    if not found:
        raise DataError(
            f"{filesystems.full_path(root, directory)}: marked complete ({marker}) but holds "
            "no Parquet file; remove the marker or write the partition's files"
        )
    return Partition(
        name=name,
        start=start,
        files=tuple(filesystems.full_path(root, p) for p, _ in found),
        sizes=tuple(int(size) for _, size in found),
        marked_at=_modified(fs, filesystems.join(directory, marker)),
    )


def copy_partition(source_root: str, target_root: str, name: str, marker: str = "_SUCCESS") -> None:
    """Copies partition ``name`` (its Parquet files) from ``source_root`` to ``target_root``
    and writes its marker there last, as a writer of partitions does (local or remote)."""
    with errors_named(source_root, "copy a partition"):
        fs, stripped = filesystems.filesystem(filesystems.join(source_root, name))
        files = sorted(p for p in fs.find(stripped) if p.endswith(".parquet"))
        target = filesystems.join(target_root, name)
        for path in files:
            data = fs.cat_file(path)
            with storage_io.open_file(
                filesystems.join(target, posixpath.basename(path)), "wb"
            ) as out:
                out.write(data)
        storage_io.write_text(filesystems.join(target, marker), "")
