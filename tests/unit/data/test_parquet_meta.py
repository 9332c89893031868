"""Parquet footers read on the coordinator (``recsys_dist/data/parquet_meta.py``): rows, row
groups, schema and null counts of real files, and every kind of bad file, failed or skipped
by the policy, named in the message."""

from __future__ import annotations

import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recsys_dist.data.parquet_meta import (
    BadFileError,
    FileMeta,
    Skipped,
    read_file_meta,
    read_footers,
)
from recsys_dist.errors import DataError


def write(path, table: pa.Table, **options) -> str:
    pq.write_table(table, path, **options)
    return str(path)


@pytest.fixture
def good(tmp_path) -> str:
    table = pa.table(
        {
            "id": pa.array([1, None, 3, 4, None, 6, 7], pa.int64()),
            "name": pa.array(["a", "b", None, "d", "e", "f", "g"]),
            "tags": pa.array([[1], [], None, [2, 3], [4], [5], [6]], pa.list_(pa.int64())),
        }
    )
    return write(tmp_path / "good.parquet", table, row_group_size=3)


def test_a_footer_gives_rows_row_groups_schema_and_nulls_per_row_group(good):
    meta = read_file_meta(good)
    assert (meta.path, meta.rows, meta.row_groups) == (good, 7, (3, 3, 1))
    assert meta.schema.names == ["id", "name", "tags"]
    assert meta.schema.field("tags").type == pa.list_(pa.int64())
    # Only top-level scalar columns: a list column's leaf is ``tags.list.element``.
    assert meta.null_counts == {"id": (1, 1, 0), "name": (1, 0, 0)}
    assert meta.bytes == os.path.getsize(good)


def test_without_statistics_nulls_cannot_be_ruled_out(tmp_path):
    path = write(tmp_path / "nostats.parquet", pa.table({"id": [1, 2, 3]}), write_statistics=False)
    assert read_file_meta(path).null_counts == {"id": (None,)}


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"", "empty file (0 bytes)"),
        (b"id,name\n1,a\n", "not a readable Parquet file, it may be corrupt or truncated ("),
        (None, "empty file (0 rows)"),
        ("truncated", "not a readable Parquet file, it may be corrupt or truncated ("),
    ],
)
def test_each_bad_file_is_named_with_its_reason(tmp_path, good, content, reason):
    path = tmp_path / "bad.parquet"
    if content is None:
        write(path, pa.table({"id": pa.array([], pa.int64())}))
    elif content == "truncated":
        path.write_bytes(open(good, "rb").read()[:-20])
    else:
        path.write_bytes(content)
    with pytest.raises(BadFileError, match=re.escape(f"{path}: {reason}")) as raised:
        read_file_meta(str(path))
    assert isinstance(raised.value, DataError)


def test_a_file_gone_before_its_footer_is_read(tmp_path):
    with pytest.raises(
        BadFileError, match=re.escape(f"{tmp_path / 'gone.parquet'}: file vanished while planning")
    ):
        read_file_meta(str(tmp_path / "gone.parquet"))


def test_footers_keep_their_order_and_a_bad_file_fails_with_the_fix(tmp_path, good):
    others = [
        write(tmp_path / f"f{i}.parquet", pa.table({"id": list(range(i + 1))})) for i in range(5)
    ]
    metas, skipped = read_footers([others[3], good, *others[:3], others[4]], "fail", threads=3)
    assert [m.rows for m in metas] == [4, 7, 1, 2, 3, 5] and skipped == []
    assert all(isinstance(m, FileMeta) for m in metas)
    empty = tmp_path / "empty.parquet"
    empty.write_bytes(b"")
    with pytest.raises(
        BadFileError,
        match=re.escape(
            f"{empty}: empty file (0 bytes). Remove or rewrite it, or set data.on_bad_file: "
            "skip to skip bad files"
        ),
    ):
        read_footers([good, str(empty)], "fail")


def test_bad_files_are_skipped_and_reported_under_skip(tmp_path, good):
    empty, junk = tmp_path / "empty.parquet", tmp_path / "junk.parquet"
    empty.write_bytes(b"")
    junk.write_bytes(b"PAR1 not really")
    metas, skipped = read_footers([str(empty), good, str(junk)], "skip")
    assert [m.path for m in metas] == [good]
    assert skipped[0] == Skipped(str(empty), 0, "empty file (0 bytes)")
    assert skipped[1].path == str(junk) and skipped[1].rows == 0
    assert skipped[1].reason.startswith("not a readable Parquet file")
    assert read_footers([], "skip") == ([], [])
