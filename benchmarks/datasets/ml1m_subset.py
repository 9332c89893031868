"""Converts MovieLens-1M ratings into ten daily Parquet partitions with a click label.

The raw file is ``ratings.dat`` (or ``ratings.dat.gz``) in ``--raw``: one rating per line,
``UserID::MovieID::Rating::Timestamp``, no header, ratings 1 to 5, unix seconds. The copy
benchmarks/datasets/README.md names is the first part of the official file.

Columns written: ``user_id``, ``item_id`` (the MovieID), ``rating``, ``timestamp`` (unix
seconds) and the label ``click``, 1 when the rating is 4 or 5, else 0; all int64.
``rating`` and ``timestamp`` are kept for other labels and checks, never as features.

Split: every row sorted by timestamp (ties in file order) and cut into 10 slices of equal
row count, ``dt=2026-01-01`` to ``dt=2026-01-10``: days 1 to 8 train, day 9 validation,
day 10 test (benchmarks/datasets/common.py).

Usage::

    python -m benchmarks.datasets.ml1m_subset --raw RAW_DIR --out OUT_DIR [--overwrite]
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

from benchmarks.datasets import common

RAW_FILES = ["ratings.dat", "ratings.dat.gz"]
RAW_COLUMNS = ("UserID", "MovieID", "Rating", "Timestamp")
WHAT = "MovieLens ratings, one UserID::MovieID::Rating::Timestamp per line"
LABEL = "click"


def load(raw: pathlib.Path) -> dict[str, np.ndarray]:
    """The columns written, from ``raw/ratings.dat`` (or its ``.gz``)."""
    path = common.existing_file(raw, RAW_FILES, WHAT)
    fields = common.read_fields(path, sep="::", names=RAW_COLUMNS, header=False, what=WHAT)
    rating = fields.ints("Rating", 1, 5)
    return {
        "user_id": fields.ints("UserID", 1),
        "item_id": fields.ints("MovieID", 1),
        "rating": rating,
        "timestamp": fields.ints("Timestamp", 0),
        LABEL: (rating >= 4).astype(np.int64),
    }


def main(argv: list[str] | None = None) -> int:
    return common.main_in_time_order(__doc__, load, LABEL, argv)


if __name__ == "__main__":
    sys.exit(main())
