"""The plan of a split (``recsys_dist/data/shard_plan.py``): files cut into units by row
group and ``max_unit_rows``, every row in exactly one unit, and the plan's rejections (a
null label under ``fail``, nothing left to read)."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recsys_dist.data.parquet_meta import Skipped, read_file_meta
from recsys_dist.data.shard_plan import Unit, plan_shards, plan_units, split_rows
from recsys_dist.errors import DataError


def meta(tmp_path, name: str, rows: int, row_group_size: int, null_clicks: tuple[int, ...] = ()):
    clicks = [None if i in null_clicks else i % 2 for i in range(rows)]
    path = tmp_path / name
    pq.write_table(
        pa.table({"x": list(range(rows)), "click": pa.array(clicks, pa.int64())}),
        path,
        row_group_size=row_group_size,
    )
    return read_file_meta(str(path))


@pytest.mark.parametrize(
    "start, stop, most", [(0, 10, 3), (5, 6, 1), (0, 7, 7), (3, 1003, 64), (0, 9, 100)]
)
def test_split_rows_cuts_the_fewest_near_equal_ranges(start, stop, most):
    pieces = split_rows(start, stop, most)
    assert pieces[0][0] == start and pieces[-1][1] == stop
    assert all(a == b for (_, a), (b, _) in zip(pieces, pieces[1:]))
    sizes = [b - a for a, b in pieces]
    assert max(sizes) <= most and max(sizes) - min(sizes) <= 1
    assert len(pieces) == -(-(stop - start) // most)
    assert split_rows(0, 10, 3) == [(0, 2), (2, 5), (5, 7), (7, 10)]


def test_units_follow_row_groups_and_cut_the_large_ones(tmp_path):
    files = [meta(tmp_path, "a.parquet", 25, 10), meta(tmp_path, "b.parquet", 4, 10)]
    assert plan_units(files, 6, "fail", ["click"]) == [
        Unit(0, 0, 5),
        Unit(0, 5, 10),
        Unit(0, 10, 15),
        Unit(0, 15, 20),
        Unit(0, 20, 25),
        Unit(1, 0, 4),
    ]
    assert [u.rows for u in plan_units(files, 100, "fail")] == [10, 10, 5, 4]


def test_a_null_label_in_the_statistics_fails_the_plan_naming_file_group_and_fix(tmp_path):
    files = [meta(tmp_path, "a.parquet", 20, 10), meta(tmp_path, "b.parquet", 20, 10, (13, 17))]
    with pytest.raises(
        DataError,
        match=re.escape(
            f"{files[1].path}: label column 'click' has 2 null(s) in row group 1; every row "
            "needs a label. Fix the file, or set data.on_bad_row: skip to skip such rows"
        ),
    ):
        plan_units(files, 100, "fail", ["click"])
    # Under skip the rows stay in the plan (the input function skips them); another
    # column's nulls are no label's.
    assert len(plan_units(files, 100, "skip", ["click"])) == 4
    assert len(plan_units(files, 100, "fail", ["x"])) == 4


def test_a_plan_holds_every_row_in_one_unit(tmp_path):
    files = [meta(tmp_path, f"{i}.parquet", rows, 16) for i, rows in enumerate((50, 7, 33))]
    skipped = [Skipped("bad.parquet", 0, "empty file (0 bytes)")]
    plan = plan_shards(files, 3, 8, "fail", skipped, ["click"])
    assert plan.files == tuple(f.path for f in files) and plan.file_rows == (50, 7, 33)
    assert plan.num_workers == 3 and plan.skipped == tuple(skipped)
    assert plan.file_bytes == tuple(f.bytes for f in files) and all(plan.file_bytes)
    assert plan.total_rows == 90 and max(u.rows for u in plan.units) <= 8
    for index, rows in enumerate(plan.file_rows):
        ranges = sorted((u.start, u.stop) for u in plan.units if u.file == index)
        assert ranges[0][0] == 0 and ranges[-1][1] == rows
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


def test_nothing_left_to_read_names_the_skipped_files():
    skipped = [Skipped(f"f{i}.parquet", 0, "empty file (0 bytes)") for i in range(7)]
    with pytest.raises(DataError) as raised:
        plan_shards([], 2, 100, "skip", skipped)
    assert (
        str(raised.value)
        == "no rows left to read after skipping bad data ("
        + "; ".join(f"f{i}.parquet: empty file (0 bytes)" for i in range(5))
        + ")"
    )
    with pytest.raises(DataError, match=r"^no rows left to read after skipping bad data$"):
        plan_shards([], 2, 100, "skip")
