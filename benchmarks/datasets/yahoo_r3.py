"""Converts Yahoo! R3 music ratings into ten daily Parquet partitions with a click label:
ratings of songs the users chose for training and validation, ratings of songs shown at
random for the test.

The raw files in ``--raw`` are ``user.txt`` (ratings of songs the users picked themselves)
and ``random.txt`` (ratings of songs shown to users at random), one ``user,item,rating``
per line, no header, 0-based ids, ratings 1 to 5. The data has no time field.

Columns written: ``user_id``, ``item_id``, ``rating`` and the label ``click``, 1 when the
rating is 4 or 5, else 0; all int64. ``rating`` is kept for other labels, never as a
feature.

Split (not by time): the rows of ``user.txt`` ordered by ``mix(mix(user_id) ^ item_id)``,
``mix`` the splitmix64 finalizer (a fixed pseudo-random order: no seed, no generator; ties
in file order) and cut into 9 slices of equal row count, ``dt=2026-01-01`` to ``dt=2026-01-09``:
days 1 to 8 train, day 9 validation. ``random.txt``, in file order, is ``dt=2026-01-10``,
the test: a model trained on what users chose is scored on what they were shown at random,
which is how the set is meant to be used. Usage::

    python -m benchmarks.datasets.yahoo_r3 --raw RAW_DIR --out OUT_DIR [--overwrite]
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

from benchmarks.datasets import common

CHOSEN_FILE = "user.txt"
RANDOM_FILE = "random.txt"
RAW_COLUMNS = ("user", "item", "rating")
WHAT = "Yahoo! R3 ratings, one user,item,rating per line"
LABEL = "click"


def read_file(path: pathlib.Path) -> dict[str, np.ndarray]:
    """The columns written, from one raw file."""
    fields = common.read_fields(path, sep=",", names=RAW_COLUMNS, header=False, what=WHAT)
    rating = fields.ints("rating", 1, 5)
    return {
        "user_id": fields.ints("user", 0),
        "item_id": fields.ints("item", 0),
        "rating": rating,
        LABEL: (rating >= 4).astype(np.int64),
    }


def split_days(chosen: dict[str, np.ndarray], shown: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Row indices of the 10 days over the rows of ``chosen`` then ``shown``."""
    key = common.mixed(common.mixed(chosen["user_id"]).view(np.int64) ^ chosen["item_id"])
    days = common.ordered_slices(key, common.DAYS - 1)
    start = len(chosen["user_id"])
    return days + [np.arange(start, start + len(shown["user_id"]))]


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args(__doc__, argv)
    chosen = read_file(args.raw / CHOSEN_FILE)
    shown = read_file(args.raw / RANDOM_FILE)
    columns = {name: np.concatenate([chosen[name], shown[name]]) for name in chosen}
    return common.finish(args, columns, split_days(chosen, shown), LABEL)


if __name__ == "__main__":
    sys.exit(main())
