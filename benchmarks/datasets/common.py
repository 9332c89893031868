"""What the dataset converters share: reading delimited text with checked fields, cutting
the rows into daily slices and writing them as ``dt=YYYY-MM-DD`` partitions in one rename.

Every converter writes ten partitions, ``OUT/dt=2026-01-01/part-00000.parquet`` to
``OUT/dt=2026-01-10/part-00000.parquet``: days 1 to 8 are for training, day 9 for
validation and day 10 for the test. The dates name slices of the data, not the days its
events happened on. The output is first written to a hidden directory next to ``OUT`` and
renamed into place once complete, so a failed run leaves no partial output.

Bad input ends the command with one line ``error: FILE: ...`` naming the file and what was
expected (a :class:`SystemExit`, so no traceback, exit status 1).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gzip
import pathlib
import re
import secrets
import shutil
import subprocess
from collections.abc import Callable
from typing import NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIRST_DAY = datetime.date(2026, 1, 1)
DAYS = 10
#: ``(split, first day, end day)``, days counted from 0 and the end excluded.
SPLITS = (("train", 0, 8), ("validation", 8, 9), ("test", 9, 10))
PART_FILE = "part-00000.parquet"
#: A ``click_time`` as TalkingData writes it, ``2017-11-07 11:49:53``.
DATETIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def fail(path: pathlib.Path | str, message: str) -> NoReturn:
    """Ends the command with ``error: PATH: MESSAGE`` on stderr and exit status 1."""
    raise SystemExit(f"error: {path}: {message}")


def day_name(day: int) -> str:
    """``dt=`` value of day ``day`` (0 is the first)."""
    return (FIRST_DAY + datetime.timedelta(days=day)).isoformat()


def existing_file(raw: pathlib.Path, names: list[str], what: str) -> pathlib.Path:
    """The first of ``raw/NAME`` that is a file, or an error naming them all."""
    for name in names:
        if (raw / name).is_file():
            return raw / name
    fail(
        raw / names[0],
        "no such file"
        + (f" (nor {', '.join(names[1:])})" if names[1:] else "")
        + f"; expected {what}",
    )


def read_lines(path: pathlib.Path, what: str) -> list[str]:
    """The lines of a UTF-8 text file (gzip-compressed when its name ends in ``.gz``)."""
    if not path.is_file():
        fail(path, f"no such file; expected {what}")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                text = handle.read()
        else:
            text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        fail(path, f"not UTF-8 text ({error.reason} at byte {error.start}); expected {what}")
    except (OSError, EOFError) as error:
        fail(path, f"cannot be read ({error}); expected {what}")
    return text.splitlines()


@dataclasses.dataclass
class Fields:
    """The text fields of a delimited file, by column, with the number of the file's line
    that holds the first row (for messages)."""

    path: pathlib.Path
    first_line: int
    columns: dict[str, list[str]]

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def _bad(self, name: str, row: int, expected: str) -> NoReturn:
        value = self.columns[name][row]
        fail(self.path, f"line {self.first_line + row}: {name}: expected {expected}, got {value!r}")

    def ints(self, name: str, low: int | None = None, high: int | None = None) -> np.ndarray:
        """Column ``name`` as int64, each value checked to be an integer in
        ``[low, high]`` (a bound left out is not checked)."""
        values = self.columns[name]
        try:
            array = np.array(values).astype(np.int64)
        except (ValueError, OverflowError):
            for row, value in enumerate(values):
                try:
                    np.int64(int(value))
                except (ValueError, OverflowError):
                    self._bad(name, row, "an integer")
            array = np.array([int(v) for v in values], np.int64)
        bad = np.zeros(len(array), bool)
        if low is not None:
            bad |= array < low
        if high is not None:
            bad |= array > high
        if bad.any():
            bounds = f"{'' if low is None else low}..{'' if high is None else high}"
            self._bad(name, int(np.flatnonzero(bad)[0]), f"an integer in {bounds}")
        return array

    def seconds(self, name: str) -> np.ndarray:
        """Column ``name``, each ``YYYY-MM-DD HH:MM:SS`` (read as UTC), as unix seconds."""
        values = self.columns[name]
        expected = "a time YYYY-MM-DD HH:MM:SS"
        for row, value in enumerate(values):
            if not DATETIME.fullmatch(value):
                self._bad(name, row, expected)
        try:
            return np.array(values, dtype="datetime64[s]").astype(np.int64)
        except ValueError:
            for row, value in enumerate(values):
                try:
                    datetime.datetime.fromisoformat(value)
                except ValueError:
                    self._bad(name, row, expected)
            raise


def read_fields(
    path: pathlib.Path, *, sep: str, names: tuple[str, ...], header: bool, what: str
) -> Fields:
    """Every line of ``path`` split at ``sep`` into exactly ``len(names)`` fields. With
    ``header`` the first line must be the names joined by ``sep``."""
    lines = read_lines(path, what)
    first = 0
    if header:
        expected = sep.join(names)
        if not lines or lines[0].strip() != expected:
            got = repr(lines[0][:200]) if lines else "an empty file"
            fail(path, f"line 1: expected the header {expected!r}, got {got}")
        first = 1
    rows = []
    for number, line in enumerate(lines[first:], first + 1):
        fields = line.split(sep)
        if len(fields) != len(names):
            fail(
                path,
                f"line {number}: expected {len(names)} fields separated by {sep!r} "
                f"({sep.join(names)}), got {len(fields)}: {line[:200]!r}",
            )
        rows.append(fields)
    if not rows:
        fail(path, f"no data lines; expected {what}")
    return Fields(path, first + 1, {n: list(c) for n, c in zip(names, zip(*rows))})


def ordered_slices(key: np.ndarray, slices: int = DAYS) -> list[np.ndarray]:
    """Row indices of ``slices`` consecutive slices of the rows sorted by ``key`` (ties in
    their order), as equal in size as the row count allows (the first ones one row more)."""
    return np.array_split(np.argsort(key, kind="stable"), slices)


def mixed(values: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer of int64 ``values``, as uint64: a fixed pseudo-random order
    that needs no seed and no random number generator."""
    x = values.astype(np.int64).view(np.uint64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def unignored_in_repository(path: pathlib.Path) -> bool:
    """Whether ``path`` (resolved) lies in this checkout and git does not ignore it: data
    written there would show up as files to commit."""
    return (path == ROOT or ROOT in path.parents) and not git_ignored(path)


def git_ignored(path: pathlib.Path) -> bool:
    """Whether git ignores ``path`` in this checkout (False when git cannot tell)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "check-ignore", "-q", str(path)],
            check=False,
            capture_output=True,
        )
    except OSError:
        return False
    return done.returncode == 0


def parse_args(
    doc: str,
    argv: list[str] | None,
    more: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.Namespace:
    """``--raw DIR --out DIR [--overwrite]`` (and what ``more`` adds to the parser),
    checked: the raw directory exists, the output is outside the repository (or ignored by
    git) and new unless ``--overwrite``."""
    parser = argparse.ArgumentParser(
        description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--raw", required=True, type=pathlib.Path, help="the raw files' folder")
    parser.add_argument("--out", required=True, type=pathlib.Path, help="the output folder")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace --out when it exists and holds files"
    )
    if more is not None:
        more(parser)
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    if unignored_in_repository(args.out):
        parser.error(f"--out {args.out} is inside the repository and not ignored by git")
    if not args.raw.is_dir():
        fail(args.raw, "no such directory; expected the folder of the raw files (--raw)")
    if not args.overwrite:
        refuse_existing(args.out)
    return args


def refuse_existing(out: pathlib.Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        fail(out, "exists and is not an empty folder; remove it or pass --overwrite")


def hidden_folder(out: pathlib.Path, role: str) -> pathlib.Path:
    """A new folder ``.NAME.ROLE.RANDOM`` beside ``out``, made with the umask's mode (the
    output keeps it when renamed)."""
    folder = out.with_name(f".{out.name}.{role}.{secrets.token_hex(4)}")
    folder.mkdir()
    return folder


def write_days(
    out: pathlib.Path, columns: dict[str, np.ndarray], days: list[np.ndarray], overwrite: bool
) -> None:
    """One Parquet file per day, each day's rows in the order of its indices, written to a
    hidden folder beside ``out`` and renamed to ``out`` when all are written."""
    if not overwrite:
        refuse_existing(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = hidden_folder(out, "new")
    try:
        table = pa.table(columns)
        for day, rows in enumerate(days):
            folder = staging / f"dt={day_name(day)}"
            folder.mkdir()
            pq.write_table(table.take(pa.array(rows)), folder / PART_FILE)
        if out.exists():
            old = hidden_folder(out, "old")
            out.rename(old / out.name)
            staging.rename(out)
            shutil.rmtree(old)
        else:
            staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def summary(columns: dict[str, np.ndarray], days: list[np.ndarray], label: str) -> list[str]:
    """One line per split: its partitions, rows, positives and positive rate."""
    lines = []
    for split, first, end in SPLITS:
        rows = np.concatenate(days[first:end])
        positives = int(columns[label][rows].sum())
        dates = day_name(first) + (f"..{day_name(end - 1)}" if end - first > 1 else "")
        lines.append(
            f"{split:<10} dt={dates:<22} {len(rows):>9,} rows {positives:>9,} positive "
            f"({label}=1), positive rate {positives / max(len(rows), 1):.4f}"
        )
    return lines


def finish(
    args: argparse.Namespace, columns: dict[str, np.ndarray], days: list[np.ndarray], label: str
) -> int:
    """Writes the days to ``args.out`` and prints the summary lines; returns 0."""
    write_days(args.out, columns, days, args.overwrite)
    for line in summary(columns, days, label):
        print(line)
    print(
        f"wrote    {args.out} ({len(days)} partitions dt={day_name(0)}..{day_name(len(days) - 1)})"
    )
    return 0


def main_in_time_order(
    doc: str, load: Callable[[pathlib.Path], dict[str, np.ndarray]], label: str, argv
) -> int:
    """The ``main`` of a converter whose rows have a ``timestamp``: its arguments, its
    columns from ``load(--raw)``, ten slices in time order, written."""
    args = parse_args(doc, argv)
    columns = load(args.raw)
    return finish(args, columns, ordered_slices(columns["timestamp"]), label)
