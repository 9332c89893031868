"""Find the Parquet files of a split: a date range of partitions, a glob, or a path.

Layout: ``<root>/<partition_key>=YYYY-MM-DD/<any>.parquet``. Names starting with ``_`` or
``.`` (``_SUCCESS`` markers, temp files) are never data. Listing runs on the
coordinator through fsspec, so it works the same on local disk, ``s3://`` and
``hdfs://``.
"""

from __future__ import annotations

import datetime
import posixpath

from recsys_dist import filesystems
from recsys_dist.config.sections import DataSplit, DateRange
from recsys_dist.errors import DataError
from recsys_dist.storage_io import check_bucket, errors_named

_GLOB_CHARS = set("*?[")


def _is_data_file(path: str) -> bool:
    name = posixpath.basename(path)
    return name.endswith(".parquet") and not name.startswith(("_", "."))


def _list_parquet(fs, stripped: str) -> list[str]:
    """All data files under directory ``stripped`` (recursively)."""
    return sorted(p for p in fs.find(stripped) if _is_data_file(p))


def discover_dates(root: str, dates: DateRange, partition_key: str = "dt") -> list[str]:
    """Returns the Parquet files of every daily partition in ``dates``.

    Raises:
      DataError: a partition in the range is missing or holds no Parquet file.
      StorageError: the storage cannot be reached or read (names ``root``).
    """
    with errors_named(root, "list the data"):
        return _discover_dates(root, dates, partition_key)


def _discover_dates(root: str, dates: DateRange, partition_key: str) -> list[str]:
    fs, stripped_root = filesystems.filesystem(root)
    files: list[str] = []
    missing: list[str] = []
    for day in dates.days():
        part = filesystems.join(stripped_root, f"{partition_key}={day.isoformat()}")
        found = _list_parquet(fs, part) if fs.isdir(part) else []
        if not found:
            missing.append(day.isoformat())
        files.extend(filesystems.full_path(root, p) for p in found)
    if missing:
        check_bucket(root)
        available = _available_partitions(fs, stripped_root, partition_key)
        hint = (
            f"; partitions present under {root}: {_summarise(available)}"
            if available
            else f"; {root} holds no {partition_key}=YYYY-MM-DD partitions"
        )
        raise DataError(
            f"no Parquet files for {partition_key}={', '.join(missing)} (date range {dates}){hint}"
        )
    return files


def _available_partitions(fs, stripped_root: str, partition_key: str) -> list[str]:
    if not fs.isdir(stripped_root):
        return []
    prefix = f"{partition_key}="
    names = [posixpath.basename(p.rstrip("/")) for p in fs.ls(stripped_root, detail=False)]
    return sorted(n[len(prefix) :] for n in names if n.startswith(prefix))


def _summarise(days: list[str]) -> str:
    if len(days) <= 6:
        return ", ".join(days)
    return f"{days[0]} .. {days[-1]} ({len(days)} partitions)"


def discover_path(path: str, partition_key: str = "dt") -> list[str]:
    """Returns the Parquet files at ``path``: a file, a directory (recursive) or a glob.

    Raises:
      DataError: nothing matched, or a file sits under a ``<partition_key>=`` directory
        whose name is not a valid date (``dt=2026-13-45`` is never read as data).
      StorageError: the storage cannot be reached or read (names ``path``).
    """
    with errors_named(path, "list the data"):
        files = _discover_path(path)
    _check_partition_names(files, path, partition_key)
    return files


def _check_partition_names(files: list[str], path: str, partition_key: str) -> None:
    prefix = f"{partition_key}="
    bad: dict[str, None] = {}
    for file in files:
        for part in file.split("/")[:-1]:
            if part.startswith(prefix) and not _is_iso_date(part[len(prefix) :]):
                bad[file[: file.index(part) + len(part)]] = None
    if bad:
        named = list(bad)
        more = f" and {len(named) - 3} more" if len(named) > 3 else ""
        raise DataError(
            f"{', '.join(named[:3])}{more}: not a valid date partition (expected "
            f"{prefix}YYYY-MM-DD) under {path}; rename or move it, or point at "
            "the partitions to read"
        )


def _is_iso_date(text: str) -> bool:
    try:
        return len(text) == 10 and datetime.date.fromisoformat(text).isoformat() == text
    except ValueError:
        return False


def _discover_path(path: str) -> list[str]:
    fs, stripped = filesystems.filesystem(path)
    if any(c in stripped for c in _GLOB_CHARS):
        matched = sorted(p for p in fs.glob(stripped) if _is_data_file(p) or fs.isdir(p))
        found: list[str] = []
        for p in matched:
            found.extend(_list_parquet(fs, p) if fs.isdir(p) else [p])
    elif fs.isdir(stripped):
        found = _list_parquet(fs, stripped)
    elif fs.exists(stripped):
        found = [stripped]
    else:
        check_bucket(path)
        raise DataError(f"{path}: no such file or directory")
    if not found:
        check_bucket(path)
        raise DataError(
            f"no Parquet files matched {path} (data files end in .parquet; "
            "names starting with '_' or '.' are ignored)"
        )
    return [filesystems.full_path(path, p) for p in found]


def discover_split(root: str, split: DataSplit, partition_key: str = "dt") -> list[str]:
    """Returns the files of a configured split (``dates`` or ``glob`` under ``root``)."""
    date_range = split.date_range()
    if date_range is not None:
        return discover_dates(root, date_range, partition_key)
    return discover_path(filesystems.join(root, split.glob), partition_key)
