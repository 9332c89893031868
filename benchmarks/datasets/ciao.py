"""Converts the Ciao product ratings (Tang et al.) into ten daily Parquet partitions with a
click label.

The raw file in ``--raw`` is ``rating_with_timestamp.mat`` as published (a MATLAB variable
``rating``, one row per rating: user, item, category, rating, helpfulness, time; read with
scipy), or, when that is absent, ``ratings.csv``: the same six columns with the header
``user_id,item_id,category_id,rating,helpfulness,timestamp``. Ratings are 0 to 5 and times
unix seconds at day resolution.

Columns written: ``user_id``, ``item_id``, ``category_id`` (the item's category),
``rating``, ``timestamp`` and the label ``click``, 1 when the rating is 4 or 5, else 0; all
int64. ``helpfulness`` is left out: other users judge a review's helpfulness after it is
written, so it is not known when the rating is made. ``rating`` and ``timestamp`` are kept
for other labels and checks, never as features.

Split: every row sorted by timestamp (ties in file order) and cut into 10 slices of equal
row count, ``dt=2026-01-01`` to ``dt=2026-01-10``: days 1 to 8 train, day 9 validation,
day 10 test (benchmarks/datasets/common.py). Usage::

    python -m benchmarks.datasets.ciao --raw RAW_DIR --out OUT_DIR [--overwrite]
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

from benchmarks.datasets import common

MAT_FILE = "rating_with_timestamp.mat"
CSV_FILE = "ratings.csv"
RAW_COLUMNS = ("user_id", "item_id", "category_id", "rating", "helpfulness", "timestamp")
WHAT = "Ciao ratings: user_id,item_id,category_id,rating,helpfulness,timestamp"
LABEL = "click"
#: The values a column may take (both ends included).
BOUNDS = {"user_id": (0, 2**62), "item_id": (0, 2**62), "rating": (0, 5)}


def read_mat(path: pathlib.Path) -> dict[str, np.ndarray]:
    """The six raw columns of the MATLAB file's ``rating`` variable."""
    try:
        # scipy is only needed for this file: the test and bench extras install it
        from scipy.io import loadmat
        from scipy.io.matlab import MatReadError
    except ImportError:
        common.fail(
            path, f"reading a .mat file needs scipy (pip install scipy), or give {CSV_FILE}"
        )
    try:
        matrix = loadmat(path, variable_names=["rating"]).get("rating")
    except (MatReadError, ValueError, TypeError, OSError, NotImplementedError) as error:
        common.fail(path, f"not a MATLAB file scipy can read ({error}); expected {WHAT}")
    if matrix is None:
        common.fail(path, "no variable 'rating'; expected an N x 6 integer matrix of " + WHAT)
    if matrix.ndim != 2 or matrix.shape[1] != len(RAW_COLUMNS) or matrix.shape[0] == 0:
        common.fail(path, f"variable 'rating' has shape {matrix.shape}; expected N x 6 ({WHAT})")
    if not np.issubdtype(matrix.dtype, np.integer):
        common.fail(path, f"variable 'rating' holds {matrix.dtype}; expected integers ({WHAT})")
    data = {name: matrix[:, i].astype(np.int64) for i, name in enumerate(RAW_COLUMNS)}
    for name, (low, high) in BOUNDS.items():
        bad = (data[name] < low) | (data[name] > high)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            common.fail(
                path,
                f"row {row + 1} of 'rating': {name} {data[name][row]} is outside {low}..{high}",
            )
    return data


def read_csv(path: pathlib.Path) -> dict[str, np.ndarray]:
    """The six raw columns of ``ratings.csv``, each value checked to be an integer."""
    fields = common.read_fields(path, sep=",", names=RAW_COLUMNS, header=True, what=WHAT)
    return {name: fields.ints(name, *BOUNDS.get(name, (None, None))) for name in RAW_COLUMNS}


def load(raw: pathlib.Path) -> dict[str, np.ndarray]:
    """The columns written, from the .mat file or else ``ratings.csv``."""
    path = common.existing_file(raw, [MAT_FILE, CSV_FILE], WHAT)
    data = read_mat(path) if path.name == MAT_FILE else read_csv(path)
    return {
        "user_id": data["user_id"],
        "item_id": data["item_id"],
        "category_id": data["category_id"],
        "rating": data["rating"],
        "timestamp": data["timestamp"],
        LABEL: (data["rating"] >= 4).astype(np.int64),
    }


def main(argv: list[str] | None = None) -> int:
    return common.main_in_time_order(__doc__, load, LABEL, argv)


if __name__ == "__main__":
    sys.exit(main())
