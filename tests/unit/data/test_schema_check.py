"""Parquet schemas checked against a feature config (``recsys_dist/data/schema_check.py``):
the columns the config reads and how, the dtype each column is read as, and each
rejection (missing, nested, wrong type, files that disagree), naming file, column and user."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recsys_dist.data.parquet_meta import read_file_meta
from recsys_dist.data.schema_check import (
    ColumnNeed,
    check_file_schema,
    check_schemas,
    required_columns,
    split_read_dtype,
)
from recsys_dist.errors import DataError
from recsys_dist.features.config import load_feature_config
from tests.support.configs import write_yaml

FEATURES = {
    "tables": {"ads": {"rows": 1000, "dim": 4}, "tag": {"rows": 100, "dim": 4}},
    "features": {
        "ad": {"kind": "categorical", "dtype": "int64", "table": "ads"},
        "ad_count": {"kind": "numeric", "column": "ad"},
        "site": {"kind": "categorical", "dtype": "string", "table": "ads"},
        "price": {"kind": "numeric"},
        "tags": {
            "kind": "multi_categorical",
            "table": "tag",
            "max_length": 3,
            "weights_column": "tag_weights",
        },
        "words": {"kind": "multi_categorical", "table": "tag", "max_length": 3},
    },
    "labels": {"click": {}, "buy": {"column": "conversion"}},
}


@pytest.fixture
def needs(tmp_path) -> dict[str, ColumnNeed]:
    return required_columns(load_feature_config(write_yaml(tmp_path / "f.yaml", FEATURES)))


def columns(**changes) -> dict[str, pa.Array]:
    out = {
        "ad": pa.array([1, 2], pa.int8()),
        "site": pa.array(["a", "b"]).dictionary_encode(),
        "price": pa.array([1.5, 2.5], pa.float32()),
        "tags": pa.array([[1, 2], []], pa.list_(pa.int32())),
        "tag_weights": pa.array([[0.5, 1.0], []], pa.list_(pa.float64())),
        "words": pa.array(["a|b", "c"]),
        "click": pa.array([True, False]),
        "conversion": pa.array([0.0, 1.0], pa.float64()),
        "extra": pa.array([{"x": 1}, {"x": 2}]),
    }
    out.update(changes)
    return {k: v for k, v in out.items() if v is not None}


def meta(tmp_path, name: str = "part.parquet", **changes):
    path = tmp_path / name
    pq.write_table(pa.table(columns(**changes)), path)
    return read_file_meta(str(path))


def test_every_column_read_with_its_needs_and_users_in_order(needs):
    assert list(needs) == [
        "ad",
        "site",
        "price",
        "tags",
        "tag_weights",
        "words",
        "click",
        "conversion",
    ]
    assert needs["ad"] == ColumnNeed(
        "ad", ("integer id", "number"), ("feature 'ad'", "feature 'ad_count'")
    )
    assert needs["tag_weights"] == ColumnNeed(
        "tag_weights", ("weights",), ("feature 'tags' (weights_column)",)
    )
    assert needs["conversion"] == ColumnNeed("conversion", ("binary label",), ("label 'buy'",))


def test_a_subset_of_labels_reads_only_their_columns(tmp_path):
    config = load_feature_config(write_yaml(tmp_path / "f.yaml", FEATURES))
    assert "click" not in required_columns(config, ["buy"])


def test_each_column_is_read_as_the_dtype_its_storage_and_needs_decide(tmp_path, needs):
    assert check_file_schema(meta(tmp_path), needs) == {
        "ad": "int32",
        "site": "string",
        "price": "float32",
        "tags": "list<int64>",
        "tag_weights": "list<float32>",
        "words": "string",
        "click": "bool",
        "conversion": "float64",
    }
    wide = meta(
        tmp_path,
        ad=pa.array([1, 2], pa.uint32()),
        price=pa.array([1, 2], pa.int64()),
        tags=pa.array([["a"], []], pa.list_(pa.string())),
        words=pa.array([[1], [2]], pa.large_list(pa.int64())),
    )
    assert {
        c: d
        for c, d in check_file_schema(wide, needs).items()
        if c in ("ad", "price", "tags", "words")
    } == {"ad": "int64", "price": "int64", "tags": "list<string>", "words": "list<int64>"}


def test_split_read_dtype():
    assert split_read_dtype("list<int64>") == ("int64", True)
    assert split_read_dtype("float32") == ("float32", False)


def test_a_missing_column_is_named_with_its_users_and_the_closest_column(tmp_path, needs):
    file = meta(tmp_path, price=None, prices=pa.array([1.0, 2.0]))
    with pytest.raises(DataError) as raised:
        check_file_schema(file, needs)
    assert str(raised.value) == (
        f"{file.path}: column 'price' (read by feature 'price') is missing. Did you mean "
        '"prices"? The file has columns: ad, site, tags, tag_weights, words, click, '
        "conversion, extra, prices"
    )


def test_a_file_with_many_columns_lists_the_first_twelve(tmp_path, needs):
    many = {f"c{i:02d}": pa.array([1, 2]) for i in range(14)}
    file = meta(tmp_path, **many, click=None)
    with pytest.raises(
        DataError,
        match=re.escape(
            "column 'click' (read by label 'click') is missing. The file has columns: ad, site, "
            "price, tags, tag_weights, words, conversion, extra, c00, c01, c02, c03, ..."
        ),
    ):
        check_file_schema(file, needs)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"ad": pa.array([[1], [2]])},
            "column 'ad' has type list<element: int64> (a list column), but feature 'ad', feature "
            "'ad_count' needs an integer column (int8..int64)",
        ),
        (
            {"ad": pa.array(["1", "2"])},
            "column 'ad' has type string, but feature 'ad', feature 'ad_count' needs an integer "
            "column (int8..int64)",
        ),
        (
            {"site": pa.array([1.0, 2.0])},
            "column 'site' has type double, but feature 'site' needs a string column",
        ),
        (
            {"price": pa.array(["1.5", "2"])},
            "column 'price' has type string, but feature 'price' needs an integer or "
            "floating-point "
            "column",
        ),
        (
            {"tags": pa.array([1.0, 2.0])},
            "column 'tags' has type double, but feature 'tags' needs a list<int64> or list<string> "
            "column, or a delimited string column",
        ),
        (
            {"tag_weights": pa.array([["a"], []], pa.list_(pa.string()))},
            "column 'tag_weights' has type list<element: string> (a list column), but feature "
            "'tags' "
            "(weights_column) needs a list<float> column with one weight per id",
        ),
        (
            {"click": pa.array(["yes", "no"])},
            "column 'click' has type string, but label 'click' needs an integer, boolean or "
            "floating-point column holding 0/1",
        ),
        (
            {"price": pa.array([{"x": 1.0}, {"x": 2.0}])},
            "column 'price' (read by feature 'price') is a nested struct<x: double> column; "
            "recsys_dist reads scalar int, float, string and bool columns and list<...> of them, "
            "so "
            "flatten it",
        ),
        (
            {"words": pa.array([[1.0], [2.0]], pa.list_(pa.float64()))},
            "column 'words' has type list<element: double> (a list column), but feature 'words' "
            "needs a "
            "list<int64> or list<string> column, or a delimited string column",
        ),
        (
            {"price": pa.array([b"\x00", b"\x01"], pa.binary(1))},
            "column 'price' has type fixed_size_binary[1], but feature 'price' needs an integer or "
            "floating-point column",
        ),
    ],
)
def test_a_column_of_the_wrong_kind_names_file_column_type_and_need(
    tmp_path, needs, change, message
):
    file = meta(tmp_path, **change)
    with pytest.raises(DataError, match=re.escape(f"{file.path}: {message}") + "$"):
        check_file_schema(file, needs)


def test_files_that_store_a_column_differently_are_named(tmp_path, needs):
    first = meta(tmp_path, "a.parquet")
    same = meta(tmp_path, "b.parquet", ad=pa.array([3, 4], pa.int16()))
    other = meta(tmp_path, "c.parquet", ad=pa.array([3, 4], pa.int64()))
    assert check_schemas([first, same], needs)["ad"] == "int32"
    with pytest.raises(
        DataError,
        match=re.escape(
            f"column 'ad' is stored as int32 in {first.path} but as int64 in {other.path}; "
            "every file of a job must store a column with the same type"
        ),
    ):
        check_schemas([first, same, other], needs)
