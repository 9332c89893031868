"""Finding a split's Parquet files (``recsys_dist/data/discovery.py``): date partitions, a
path, a glob; markers and temporary files are never data; each way of finding nothing
names what was asked for and what exists."""

from __future__ import annotations

import re
import uuid

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recsys_dist.config.sections import DataSplit, DateRange
from recsys_dist.data.discovery import discover_dates, discover_path, discover_split
from recsys_dist.errors import DataError
from tests.support.data import small_table, write_parquet


@pytest.fixture
def root(tmp_path):
    """dt=2026-01-01 (two files, a marker, a hidden temporary file), dt=2026-01-02 (a file
    in a sub-folder), dt=2026-01-03 (only a marker)."""
    data = tmp_path / "data"
    table = small_table(10)
    for name in ("part-00001.parquet", "part-00000.parquet"):
        write_parquet(data / "dt=2026-01-01" / name, table)
    (data / "dt=2026-01-01" / "_SUCCESS").write_text("")
    (data / "dt=2026-01-01" / ".part-00002.parquet.tmp").write_text("")
    (data / "dt=2026-01-01" / "_part-00003.parquet").write_text("")
    write_parquet(data / "dt=2026-01-02" / "hour=00" / "part-00000.parquet", table)
    (data / "dt=2026-01-03").mkdir()
    (data / "dt=2026-01-03" / "_SUCCESS").write_text("")
    return data


def test_a_date_range_lists_every_data_file_of_its_days_in_order(root):
    assert discover_dates(str(root), DateRange.parse("2026-01-01..2026-01-02")) == [
        f"{root}/dt=2026-01-01/part-00000.parquet",
        f"{root}/dt=2026-01-01/part-00001.parquet",
        f"{root}/dt=2026-01-02/hour=00/part-00000.parquet",
    ]


def test_days_without_data_are_named_with_the_partitions_that_exist(root):
    with pytest.raises(
        DataError,
        match=re.escape(
            "no Parquet files for dt=2026-01-03, 2026-01-04 (date range "
            f"2026-01-02..2026-01-04); partitions present under {root}: 2026-01-01, "
            "2026-01-02, 2026-01-03"
        ),
    ):
        discover_dates(str(root), DateRange.parse("2026-01-02..2026-01-04"))


def test_a_root_without_partitions_says_so(tmp_path):
    write_parquet(tmp_path / "flat" / "part-0.parquet", small_table(5))
    with pytest.raises(
        DataError,
        match=re.escape(
            f"(date range 2026-01-01); {tmp_path / 'flat'} holds no day=YYYY-MM-DD partitions"
        ),
    ):
        discover_dates(str(tmp_path / "flat"), DateRange.parse("2026-01-01"), "day")
    with pytest.raises(DataError, match="holds no dt=YYYY-MM-DD partitions"):
        discover_dates(str(tmp_path / "absent"), DateRange.parse("2026-01-01"))


def test_many_partitions_are_summarised_by_their_ends(tmp_path):
    for day in range(1, 9):
        write_parquet(tmp_path / f"dt=2026-02-0{day}" / "p.parquet", small_table(5))
    with pytest.raises(
        DataError,
        match=re.escape(
            "partitions present under "
            + str(tmp_path)
            + ": 2026-02-01 .. 2026-02-08 (8 partitions)"
        ),
    ):
        discover_dates(str(tmp_path), DateRange.parse("2026-03-01"))


def test_a_path_is_a_file_a_folder_or_a_glob(root):
    one = f"{root}/dt=2026-01-01/part-00001.parquet"
    assert discover_path(one) == [one]
    assert discover_path(f"{root}/dt=2026-01-02") == [
        f"{root}/dt=2026-01-02/hour=00/part-00000.parquet"
    ]
    assert discover_path(f"{root}/dt=2026-01-0[23]") == [
        f"{root}/dt=2026-01-02/hour=00/part-00000.parquet"
    ]
    assert discover_path(f"{root}/dt=*/*.parquet") == [
        f"{root}/dt=2026-01-01/part-00000.parquet",
        f"{root}/dt=2026-01-01/part-00001.parquet",
    ]


def test_a_path_that_matches_nothing_is_named(root):
    with pytest.raises(DataError, match=re.escape(f"{root}/nothing: no such file or directory")):
        discover_path(f"{root}/nothing")
    with pytest.raises(
        DataError,
        match=re.escape(
            f"no Parquet files matched {root}/dt=2026-01-03 (data files end in .parquet; names "
            "starting with '_' or '.' are ignored)"
        ),
    ):
        discover_path(f"{root}/dt=2026-01-03")
    with pytest.raises(DataError, match=re.escape(f"no Parquet files matched {root}/*.csv")):
        discover_path(f"{root}/*.csv")


def test_a_partition_whose_name_is_not_a_date_is_never_data(tmp_path):
    for day in ("2026-13-45", "2026-1-5", "2026-01-01x", "tomorrow", "2026-01-01"):
        write_parquet(tmp_path / f"dt={day}" / "p.parquet", small_table(5))
    with pytest.raises(DataError) as raised:
        discover_path(str(tmp_path))
    assert str(raised.value) == (
        f"{tmp_path}/dt=2026-01-01x, {tmp_path}/dt=2026-1-5, {tmp_path}/dt=2026-13-45 and 1 more:"
        f" not a valid date partition (expected dt=YYYY-MM-DD) under {tmp_path}; rename or "
        "move it, or point at the partitions to read"
    )
    assert discover_path(str(tmp_path), partition_key="day")  # another key: not partitions


def test_a_split_is_its_dates_or_its_glob_under_the_root(root):
    assert discover_split(str(root), DataSplit(dates="2026-01-02")) == [
        f"{root}/dt=2026-01-02/hour=00/part-00000.parquet"
    ]
    assert discover_split(str(root), DataSplit(glob="dt=2026-01-01/part-0000[1].parquet")) == [
        f"{root}/dt=2026-01-01/part-00001.parquet"
    ]


def test_files_on_a_filesystem_with_a_protocol_keep_it():
    root = f"memory://discovery-{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    for day in ("2026-01-01", "2026-01-02"):
        with fs.open(f"{root}/dt={day}/part-0.parquet", "wb") as handle:
            pq.write_table(pa.table({"x": [1, 2]}), handle)
    try:
        files = discover_dates(root, DateRange.parse("2026-01-01..2026-01-02"))
        assert [f.split("://")[0] for f in files] == ["memory", "memory"]
        assert [f.rsplit("/", 2)[1] for f in files] == ["dt=2026-01-01", "dt=2026-01-02"]
        assert discover_path(f"{root}/dt=2026-01-02") == files[1:]
    finally:
        fs.rm(root.removeprefix("memory://"), recursive=True)
