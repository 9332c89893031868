"""Writing generated rows as a partitioned Parquet data set: one ``dt=YYYY-MM-DD``
directory per day (or ``dt=YYYY-MM-DD/hour=HH`` per hour, marked ``_SUCCESS`` once
written), files of about equal rows, each written atomically
(``recsys-dist data synth``). What a row looks like is the generator's job
(``data/synth.py``, ``data/synth_behaviour.py``)."""

from __future__ import annotations

import dataclasses
import datetime
import math
import numbers
import os
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from recsys_dist.data.synth import USERS, RowGenerator
from recsys_dist.data.synth_behaviour import BehaviourGenerator
from recsys_dist.data.synth_drift import DriftingRowGenerator


@dataclasses.dataclass(frozen=True)
class SynthReport:
    """What :func:`synthesize` wrote.

    Attributes:
      out_dir: The output directory.
      days: The partitions written, e.g. ``"2026-01-01"`` or ``"2026-01-01/hour=05"``.
      files: Paths of all Parquet files written, in order.
      rows: Total number of rows.
      click_rate: Fraction of rows with ``click == 1``.
      conversion_rate: Fraction of rows with ``conversion == 1`` (None for data without
        a ``conversion`` column).
      seconds: Wall-clock time taken.
    """

    out_dir: str
    days: list[str]
    files: list[str]
    rows: int
    click_rate: float
    conversion_rate: float | None
    seconds: float


def _check_counts(**counts: int) -> None:
    """Each count is an integer >= 1 (``seed`` >= 0), else a ValueError naming it."""
    for name, value in counts.items():
        low = 0 if name == "seed" else 1
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def synthesize(
    out_dir: str | os.PathLike,
    days: int,
    rows_per_day: int,
    seed: int = 0,
    start_date: datetime.date = datetime.date(2026, 1, 1),
    rows_per_file: int = 100_000,
    row_groups_per_file: int = 4,
    progress: Callable[[str], None] | None = None,
    users: int = USERS,
    generator_class: type | None = None,
    hourly: bool = False,
    drift: float = 0.0,
    history_length: int | None = None,
) -> SynthReport:
    """Writes ``days`` daily partitions of synthetic CTR data under ``out_dir``.

    Each day gets ``max(2, ceil(rows_per_day / rows_per_file))`` (never more than
    ``rows_per_day``, so no file is empty) snappy-compressed Parquet files with rows split
    as evenly as possible, each with up to ``row_groups_per_file`` row groups. Files are
    written to a temporary name and renamed into place; ``part-*.parquet`` files left in a
    day's directory by an earlier run with more files per day are removed, so a day is
    always exactly what this call wrote. The same arguments always produce the same column
    data, and day ``d`` (counting from ``start_date``) depends only on ``seed`` and ``d``.

    Args:
      out_dir: Root directory; created if missing.
      days: Number of consecutive days, at least 1.
      rows_per_day: Rows per day, at least 1.
      seed: Non-negative integer seed.
      start_date: Date of the first partition.
      rows_per_file: Target maximum rows per file, at least 1.
      row_groups_per_file: Row groups per file, at least 1.
      progress: Called with a one-line message after each file is written.
      users: Size of the user pool ``user_id`` is drawn from (Zipf-Mandelbrot).
      generator_class: What a row looks like: :class:`RowGenerator` (the default,
        Criteo-like) or another class built as ``cls(seed, users=users)`` whose
        ``table(day, file_index, n)`` returns the file's Arrow table, e.g.
        :class:`recsys_dist.data.synth_behaviour.BehaviourGenerator`.
      hourly: Each of the ``days`` partitions is an hour instead: ``dt=YYYY-MM-DD/hour=HH``
        from midnight of ``start_date`` on, with ``rows_per_day`` rows and an empty
        ``_SUCCESS`` file written after them.
      drift: Radians per partition by which the click model of Criteo-like rows turns
        toward an independent one (``data/synth_drift.py``); 0: none.
      history_length: Behaviour rows only: histories of 0..N items, the label reading all
        of them (:class:`~recsys_dist.data.synth_behaviour.BehaviourGenerator`).

    Returns:
      A :class:`SynthReport` describing the written files.

    Raises:
      ValueError: An argument is out of range; the message names it.
    """
    _check_counts(
        days=days,
        rows_per_day=rows_per_day,
        rows_per_file=rows_per_file,
        row_groups_per_file=row_groups_per_file,
        seed=seed,
        users=users,
    )
    started = time.perf_counter()
    if drift and generator_class not in (None, RowGenerator):
        raise ValueError("drift applies to the criteo dataset only")
    if history_length is not None and generator_class is not BehaviourGenerator:
        raise ValueError("history length applies to the behaviour dataset only")
    if drift:
        generator = DriftingRowGenerator(int(seed), users=int(users), rate=drift)
    elif history_length is not None:
        generator = BehaviourGenerator(int(seed), users=int(users), history_length=history_length)
    else:
        generator = (generator_class or RowGenerator)(int(seed), users=int(users))
    file_rows = rows_per_file_of_day(rows_per_day, rows_per_file)
    dts, files = [], []
    clicks = conversions = 0
    for day in range(days):
        dt = (start_date + datetime.timedelta(days=day // 24 if hourly else day)).isoformat()
        if hourly:
            dt += f"/hour={day % 24:02d}"
        directory = os.path.join(os.fspath(out_dir), *f"dt={dt}".split("/"))
        tables = _write_day(
            generator, day, directory, file_rows, row_groups_per_file, files, progress
        )
        if hourly:
            with open(os.path.join(directory, "_SUCCESS"), "w", encoding="utf-8"):
                pass
        clicks += sum(int(np.sum(t["click"].to_numpy())) for t in tables)
        conversions += sum(
            int(np.sum(t["conversion"].to_numpy()))
            for t in tables
            if "conversion" in t.column_names
        )
        dts.append(dt)
    rows = days * rows_per_day
    return SynthReport(
        out_dir=os.fspath(out_dir),
        days=dts,
        files=files,
        rows=rows,
        click_rate=clicks / rows,
        conversion_rate=(conversions / rows if isinstance(generator, RowGenerator) else None),
        seconds=time.perf_counter() - started,
    )


def _write_day(
    generator,
    day: int,
    day_dir: str,
    file_rows: list[int],
    row_groups_per_file: int,
    files: list[str],
    progress: Callable[[str], None] | None,
) -> list[pa.Table]:
    """Writes one day's files (appending their paths to ``files``); returns their tables."""
    os.makedirs(day_dir, exist_ok=True)
    _remove_stale_parts(day_dir, keep=len(file_rows))
    tables = []
    for index, n in enumerate(file_rows):
        table = generator.table(day, index, n)
        name = f"part-{index:05d}.parquet"
        path = os.path.join(day_dir, name)
        _write_atomically(table, path, max(1, math.ceil(n / row_groups_per_file)))
        tables.append(table.select([c for c in ("click", "conversion") if c in table.column_names]))
        files.append(path)
        if progress is not None:
            progress(f"{os.path.basename(day_dir)} {name} {n} rows")
    return tables


def rows_per_file_of_day(rows_per_day: int, rows_per_file: int = 100_000) -> list[int]:
    """The row count of each file :func:`synthesize` writes for one day, in file order."""
    n_files = min(rows_per_day, max(2, math.ceil(rows_per_day / rows_per_file)))
    base, extra = divmod(rows_per_day, n_files)
    return [base + (index < extra) for index in range(n_files)]


def _remove_stale_parts(day_dir: str, keep: int) -> None:
    """Removes ``part-NNNNN.parquet`` files numbered ``keep`` or higher."""
    for name in os.listdir(day_dir):
        stem = name.removeprefix("part-").removesuffix(".parquet")
        if (
            name.startswith("part-")
            and name.endswith(".parquet")
            and stem.isdigit()
            and int(stem) >= keep
        ):
            os.remove(os.path.join(day_dir, name))


def _write_atomically(table: pa.Table, path: str, row_group_size: int) -> None:
    """Writes ``table`` to a hidden temporary file next to ``path`` and renames it."""
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    try:
        pq.write_table(table, tmp, row_group_size=row_group_size, compression="snappy")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
