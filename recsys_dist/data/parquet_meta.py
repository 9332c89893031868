"""Read Parquet footers on the coordinator: row counts, schema, null statistics.

Only footers are read (a few KB per file), never column data, so planning a day of
S3 data costs one small request per file. Files whose footer cannot be read (corrupt,
truncated, 0 bytes) and files with 0 rows are *bad files*: they either stop the job
with a message naming them (``on_bad_file: fail``) or are skipped and reported
(``on_bad_file: skip``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq

from recsys_dist import filesystems
from recsys_dist.errors import DataError
from recsys_dist.storage_io import errors_named, read_again_when_cut


@dataclasses.dataclass(frozen=True)
class FileMeta:
    """What the footer of one Parquet file says.

    Attributes:
      path: Full path (with protocol for object stores).
      rows: Total rows.
      row_groups: Rows per row group.
      schema: Arrow schema.
      null_counts: Per column, nulls per row group; ``None`` where the writer stored
        no statistics, so nulls cannot be ruled out.
      bytes: Size of the file.
    """

    path: str
    rows: int
    row_groups: tuple[int, ...]
    schema: pa.Schema
    null_counts: dict[str, tuple[int | None, ...]]
    bytes: int = 0


@dataclasses.dataclass(frozen=True)
class Skipped:
    """Data left out under a ``skip`` policy, reported to the user.

    Attributes:
      path: The file.
      rows: Rows left out (0 when the file could not be read at all).
      reason: Why.
    """

    path: str
    rows: int
    reason: str


class BadFileError(DataError):
    """A file is not readable Parquet or holds no rows."""


def read_file_meta(path: str) -> FileMeta:
    """Reads the footer of ``path``.

    Raises:
      BadFileError: the file is empty, corrupt or truncated.
      StorageError: the storage cannot be reached (names ``path``).
    """
    with errors_named(path, "read the footer"):
        return _read_file_meta(path)


def _read_file_meta(path: str) -> FileMeta:
    fs, stripped = filesystems.filesystem(path)
    try:
        size = fs.size(stripped)
    except FileNotFoundError:
        raise BadFileError(f"{path}: file vanished while planning") from None
    if size == 0:
        raise BadFileError(f"{path}: empty file (0 bytes)")
    meta, schema = read_again_when_cut(lambda: _read_footer(fs, stripped, path), path)
    if meta.num_rows == 0:
        raise BadFileError(f"{path}: empty file (0 rows)")
    leaf_index: dict[str, int] = {}
    for i in range(meta.num_columns):
        column = meta.schema.column(i)
        if "." not in column.path:  # top-level scalar column
            leaf_index[column.path] = i
    row_groups = tuple(meta.row_group(g).num_rows for g in range(meta.num_row_groups))
    null_counts: dict[str, tuple[int | None, ...]] = {}
    for name, index in leaf_index.items():
        counts = []
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(index).statistics
            counts.append(stats.null_count if stats is not None and stats.has_null_count else None)
        null_counts[name] = tuple(counts)
    return FileMeta(path, meta.num_rows, row_groups, schema, null_counts, size)


class _ReadsRecorded:
    """A file object that keeps the first error its reads raised, so a storage failure
    (a cut answer, a timeout) is told apart from a file that is not Parquet after pyarrow
    has wrapped it."""

    def __init__(self, handle):
        self._handle = handle
        self.failure: BaseException | None = None

    def read(self, *args):
        try:
            return self._handle.read(*args)
        except BaseException as exc:
            self.failure = self.failure or exc
            raise

    def __getattr__(self, name):
        return getattr(self._handle, name)


def _read_footer(fs, stripped: str, path: str) -> tuple[pq.FileMetaData, pa.Schema]:
    with fs.open(stripped, "rb") as handle:
        recorded = _ReadsRecorded(handle)
        try:
            meta = pq.ParquetFile(recorded).metadata
            return meta, meta.schema.to_arrow_schema()
        except (pa.ArrowException, OSError, ValueError) as exc:
            if recorded.failure is not None:  # storage failed the read: not the file's fault
                raise recorded.failure from None
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise BadFileError(
                f"{path}: not a readable Parquet file, it may be corrupt or truncated ({reason})"
            ) from None


def read_footers(
    paths: list[str], on_bad_file: Literal["fail", "skip"], threads: int = 16
) -> tuple[list[FileMeta], list[Skipped]]:
    """Reads every footer (in parallel threads) and applies the bad-file policy.

    Returns:
      The readable files in input order, and the files skipped under ``skip``.

    Raises:
      BadFileError: a file is bad and ``on_bad_file`` is ``fail``.
    """
    results: list[FileMeta | BadFileError] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(threads, len(paths) or 1)) as pool:
        for outcome in pool.map(_read_or_error, paths):
            results.append(outcome)
    metas: list[FileMeta] = []
    skipped: list[Skipped] = []
    for path, outcome in zip(paths, results):
        if isinstance(outcome, FileMeta):
            metas.append(outcome)
        elif on_bad_file == "fail":
            raise BadFileError(
                f"{outcome}. Remove or rewrite it, or set data.on_bad_file: skip to skip bad files"
            )
        else:
            skipped.append(Skipped(path, 0, str(outcome).removeprefix(f"{path}: ")))
    return metas, skipped


def _read_or_error(path: str) -> FileMeta | BadFileError:
    try:
        return read_file_meta(path)
    except BadFileError as exc:
        return exc
