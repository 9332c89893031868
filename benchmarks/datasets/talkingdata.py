"""Converts two samples of the TalkingData ad-click log into ten daily Parquet partitions,
labelled by whether the click led to an app download.

The raw files in ``--raw`` are ``train_sample_a.csv`` and ``train_sample_b.csv``, each with
the header ``ip,app,device,os,channel,click_time,attributed_time,is_attributed``: one click
per line, ``click_time`` as ``YYYY-MM-DD HH:MM:SS`` (UTC), ``is_attributed`` 0 or 1.

Columns written: ``ip`` (the user), ``app`` (the advertised app), ``device``, ``os``,
``channel`` (the publisher's channel), ``click_hour`` (0 to 23), ``timestamp`` (unix
seconds of ``click_time``) and the label ``is_attributed``; all int64. ``attributed_time``
is left out: it is set only on the clicks with a download, so it gives the label away.
``timestamp`` is kept for checks, never as a feature.

Split: the rows of both files sorted by click time (ties: file a first, then file order)
and cut into 10 slices of equal row count, ``dt=2026-01-01`` to ``dt=2026-01-10``: days 1
to 8 train, day 9 validation, day 10 test (benchmarks/datasets/common.py). Usage::

    python -m benchmarks.datasets.talkingdata --raw RAW_DIR --out OUT_DIR [--overwrite]
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

from benchmarks.datasets import common

RAW_FILES = ("train_sample_a.csv", "train_sample_b.csv")
RAW_COLUMNS = (
    "ip", "app", "device", "os", "channel", "click_time", "attributed_time", "is_attributed"
)  # fmt: skip
WHAT = "TalkingData clicks: " + ",".join(RAW_COLUMNS)
LABEL = "is_attributed"
IDS = ("ip", "app", "device", "os", "channel")


def read_file(path: pathlib.Path) -> dict[str, np.ndarray]:
    """The columns written, from one raw file."""
    fields = common.read_fields(path, sep=",", names=RAW_COLUMNS, header=True, what=WHAT)
    columns = {name: fields.ints(name, 0) for name in IDS}
    seconds = fields.seconds("click_time")
    columns["click_hour"] = seconds // 3600 % 24
    columns["timestamp"] = seconds
    columns[LABEL] = fields.ints(LABEL, 0, 1)
    return columns


def load(raw: pathlib.Path) -> dict[str, np.ndarray]:
    """Both files' rows, file a first."""
    parts = [read_file(raw / name) for name in RAW_FILES]
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def main(argv: list[str] | None = None) -> int:
    return common.main_in_time_order(__doc__, load, LABEL, argv)


if __name__ == "__main__":
    sys.exit(main())
