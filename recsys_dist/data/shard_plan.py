"""Plan the rows of a split: its files cut into units, every row in exactly one unit.

A *unit* is a row range of one file: a whole row group, or a slice of a row group
larger than ``max_unit_rows``, from the Parquet footers. No unit belongs to a worker:
training, scoring and ``data read`` cut the units into work items
(``InputPipeline.work_items``) and the coordinator hands each item to whichever worker
is free (``cluster/dispatch.py``).

Nulls are read under each feature's null policy. The one null that is bad data is a
null label: under ``on_bad_row: fail`` a label null that the footer statistics show
already fails the plan, naming the file, column and row group (one the statistics do
not show fails in-graph, naming the row); under ``skip`` its rows are skipped in-graph.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from recsys_dist.data.parquet_meta import FileMeta, Skipped
from recsys_dist.errors import DataError


@dataclasses.dataclass(frozen=True)
class Unit:
    """Rows ``start, start + stride, ...`` below ``stop`` of file number ``file`` of a
    plan: the range ``[start, stop)`` with the default stride 1. ``kept``: the rows of
    them a split with ``hash_share`` keeps (``data/hashed_rows.py``), when it has one."""

    file: int
    start: int
    stop: int
    stride: int = 1
    kept: int | None = None

    @property
    def rows(self) -> int:
        """Rows a reader returns for it."""
        if self.kept is not None:
            return self.kept
        return len(range(self.start, self.stop, self.stride))

    def describe(self) -> str:
        """``rows A..B``, with `` in steps of S`` when strided, for messages (the form
        a worker's bad-row message gives, ``InputPipeline.item_dataset``)."""
        steps = f" in steps of {self.stride}" if self.stride > 1 else ""
        return f"rows {self.start}..{self.stop}{steps}"


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """The units of one pass over a split.

    Attributes:
      files: File paths, indexed by ``Unit.file``.
      file_rows: Total rows of each file.
      units: Every unit of the pass.
      num_workers: Workers that will read the pass (for the plan's description).
      skipped: Files or units left out under a ``skip`` policy.
      file_bytes: Size of each file.
    """

    files: tuple[str, ...]
    file_rows: tuple[int, ...]
    units: tuple[Unit, ...]
    num_workers: int
    skipped: tuple[Skipped, ...] = ()
    file_bytes: tuple[int, ...] = ()

    @property
    def total_rows(self) -> int:
        return sum(u.rows for u in self.units)


def relative_paths(files: tuple[str, ...]) -> list[str]:
    """``files`` relative to the deepest directory that holds them all (``dt=.../x.parquet``
    under a data root), so the same data reads the same from another root or store."""
    parts = [f.split("://", 1)[-1].split("/") for f in files]
    depth = 0
    if parts:
        shortest = min(len(p) for p in parts) - 1  # directories only, never the file name
        while depth < shortest and len({p[depth] for p in parts}) == 1:
            depth += 1
    return ["/".join(p[depth:]) for p in parts]


def _null_label(meta: FileMeta, group: int, label_columns: list[str]) -> str | None:
    for column in label_columns:
        count = meta.null_counts.get(column, ())[group : group + 1]
        if count and count[0]:
            return f"label column {column!r} has {count[0]} null(s) in row group {group}"
    return None


def split_rows(start: int, stop: int, max_rows: int) -> list[tuple[int, int]]:
    """``[start, stop)`` cut into the fewest near-equal ranges of at most ``max_rows``."""
    pieces = -(-(stop - start) // max_rows)
    bounds = [start + (stop - start) * i // pieces for i in range(pieces + 1)]
    return list(zip(bounds, bounds[1:]))


def plan_units(
    metas: list[FileMeta],
    max_unit_rows: int,
    on_bad_row: Literal["fail", "skip"],
    label_columns: list[str] = (),
) -> list[Unit]:
    """Cuts files into units; fails on a null label the statistics show under ``fail``."""
    units: list[Unit] = []
    for index, meta in enumerate(metas):
        offset = 0
        for group, rows in enumerate(meta.row_groups):
            problem = _null_label(meta, group, list(label_columns))
            if problem is not None and on_bad_row == "fail":
                raise DataError(
                    f"{meta.path}: {problem}; every row needs a label. Fix the "
                    "file, or set data.on_bad_row: skip to skip such rows"
                )
            if rows > 0:
                units.extend(
                    Unit(index, a, b) for a, b in split_rows(offset, offset + rows, max_unit_rows)
                )
            offset += rows
    return units


def plan_shards(
    metas: list[FileMeta],
    num_workers: int,
    max_unit_rows: int,
    on_bad_row: Literal["fail", "skip"],
    skipped_files: list[Skipped] | None = None,
    label_columns: list[str] = (),
) -> ShardPlan:
    """Builds the plan for one pass over ``metas``, read by ``num_workers`` workers.

    Raises:
      DataError: no rows are left to read, or a label has nulls under ``fail``.
    """
    units = plan_units(metas, max_unit_rows, on_bad_row, label_columns)
    skipped = tuple(skipped_files or ())
    if not units:
        detail = "; ".join(f"{s.path}: {s.reason}" for s in skipped[:5])
        raise DataError(
            "no rows left to read after skipping bad data" + (f" ({detail})" if detail else "")
        )
    return ShardPlan(
        files=tuple(m.path for m in metas),
        file_rows=tuple(m.rows for m in metas),
        units=tuple(units),
        num_workers=num_workers,
        skipped=skipped,
        file_bytes=tuple(m.bytes for m in metas),
    )
