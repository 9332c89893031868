"""Worker input path in one process: planning, in-graph reading, every bad-data case.

Covers the workers' input function (``data/input_fn.py``) end to end over the planning
modules, whose own tests are test_discovery.py, test_parquet_meta.py, test_schema_check.py
and test_shard_plan.py.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recsys_dist.config import load_config
from recsys_dist.data.input_fn import prepare_input, row_id
from recsys_dist.data.read_pass import check_exactly_once, read_pass_local
from recsys_dist.errors import ConfigError, DataError
from tests.support.configs import SMALL_FEATURES, changed
from tests.support.data import small_table, write_parquet


def _splitmix_bucket(ids: np.ndarray, buckets: int) -> np.ndarray:
    x = ids.astype(np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x % np.uint64(buckets)).astype(np.int64)


def _day(tmp_path, day: str, tables: list[pa.Table], row_group_size: int = 40) -> list[str]:
    return [
        write_parquet(tmp_path / "data" / f"dt={day}" / f"part-{i:05d}.parquet", t, row_group_size)
        for i, t in enumerate(tables)
    ]


def test_every_row_is_read_exactly_once_with_correct_values(tmp_path, small_config):
    tables = [small_table(150, seed=s) for s in range(3)]
    _day(tmp_path, "2026-01-01", tables[:2])
    _day(tmp_path, "2026-01-02", tables[2:])
    config = small_config(train={"dates": "2026-01-01..2026-01-02"})
    pipeline = prepare_input(load_config(config), "train", 3)
    result = read_pass_local(pipeline, collect_rows=True)
    assert result.rows == pipeline.plan.total_rows == 450 and result.rows_per_worker == [450]
    ids = result.row_ids
    check_exactly_once(pipeline.plan, ids)
    assert sorted(ids.tolist()) == sorted(
        row_id(f, r) for f, t in enumerate(tables) for r in range(t.num_rows)
    )

    # Values: one batch checked against an independent numpy computation.
    dataset = pipeline.local_dataset(training=False)
    batch = next(iter(dataset))
    for k, rid in enumerate(batch["row"].numpy()):
        table = tables[rid >> 32]
        row = rid & 0xFFFFFFFF
        assert batch["labels"]["click"][k] == table["click"][row].as_py()
        ad = table["ad"][row].as_py()
        # 999 buckets: row 999 is the missing row
        assert batch["features"]["ad"][k] == _splitmix_bucket(np.array([ad]), 999)[0]
        price = table["price"][row].as_py()
        assert batch["features"]["price"][k].numpy() == pytest.approx(np.log1p(price), rel=1e-6)
        tags = [t for t in table["tags"][row].as_py().split("|") if t]
        assert int(np.sum(batch["features"]["tags"]["weights"][k])) == len(tags)


def test_units_larger_than_max_unit_rows_are_split(tmp_path, small_config):
    _day(tmp_path, "2026-01-01", [small_table(100)], row_group_size=100)
    config = small_config(train={"dates": "2026-01-01"})
    pipeline = prepare_input(load_config(config, ["input.max_unit_rows=30"]), "train", 2)
    assert [u.rows for u in pipeline.plan.units] == [25, 25, 25, 25]
    check_exactly_once(pipeline.plan, read_pass_local(pipeline, collect_rows=True).row_ids)


def test_exactly_once_check_rejects_duplicates_and_gaps(tmp_path, small_config):
    _day(tmp_path, "2026-01-01", [small_table(50)])
    pipeline = prepare_input(load_config(small_config(train={"dates": "2026-01-01"})), "train", 1)
    ids = np.array([row_id(0, r) for r in range(50)])
    check_exactly_once(pipeline.plan, ids)
    with pytest.raises(
        DataError,
        match=r"1 planned rows never read .*row 49\); 1 rows read more "
        r"than once .*row 0",
    ):
        check_exactly_once(pipeline.plan, np.concatenate([ids[:-1], ids[:1]]))


# ---- bad data: files ------------------------------------------------------------------


def _corrupt(path: str) -> None:
    with open(path, "wb") as handle:
        handle.write(b"this is not parquet at all" * 10)


def _truncate(path: str) -> None:
    with open(path, "rb") as handle:
        data = handle.read()
    with open(path, "wb") as handle:
        handle.write(data[: len(data) // 2])


def _empty_bytes(path: str) -> None:
    open(path, "wb").close()


def _zero_rows(path: str) -> None:
    pq.write_table(small_table(0), path)


@pytest.mark.parametrize(
    "damage,reason",
    [
        (_corrupt, r"not a readable Parquet file, it may be corrupt or truncated"),
        (_truncate, r"not a readable Parquet file, it may be corrupt or truncated"),
        (_empty_bytes, r"empty file \(0 bytes\)"),
        (_zero_rows, r"empty file \(0 rows\)"),
    ],
)
def test_bad_file_fails_naming_it_or_is_skipped_and_reported(
    tmp_path, small_config, damage, reason
):
    good, bad = _day(tmp_path, "2026-01-01", [small_table(60), small_table(60, seed=1)])
    damage(bad)
    with pytest.raises(DataError, match=f"{bad}: {reason}.*set data.on_bad_file: skip"):
        prepare_input(load_config(small_config(train={"dates": "2026-01-01"})), "train", 1)
    pipeline = prepare_input(
        load_config(small_config(train={"dates": "2026-01-01"}, on_bad_file="skip")), "train", 1
    )
    assert pipeline.plan.files == (good,)
    assert [(s.path, s.rows) for s in pipeline.plan.skipped] == [(bad, 0)]
    assert read_pass_local(pipeline).rows == 60


def test_all_files_bad_under_skip_still_fails(tmp_path, small_config):
    (bad,) = _day(tmp_path, "2026-01-01", [small_table(10)])
    _corrupt(bad)
    with pytest.raises(DataError, match=r"no readable Parquet file left after skipping bad files"):
        prepare_input(
            load_config(small_config(train={"dates": "2026-01-01"}, on_bad_file="skip")), "train", 1
        )


def test_zero_files_matched_names_dates_and_what_exists(tmp_path, small_config):
    _day(tmp_path, "2026-01-01", [small_table(10)])
    # (validation: null, so the window's end is not carved off for early stopping)
    config = load_config(small_config(train={"dates": "2026-01-01..2026-01-03"}, validation=None))
    with pytest.raises(
        DataError,
        match=r"no Parquet files for dt=2026-01-02, 2026-01-03 "
        r"\(date range 2026-01-01..2026-01-03\); partitions "
        r"present under .*data: 2026-01-01",
    ):
        prepare_input(config, "train", 1)
    with pytest.raises(DataError, match=r"no Parquet files matched .*nothing-\*\.parquet"):
        prepare_input(config.with_data_path(str(tmp_path / "data" / "nothing-*.parquet")), None, 1)
    with pytest.raises(DataError, match=r"missing-dir: no such file or directory"):
        prepare_input(config.with_data_path(str(tmp_path / "missing-dir")), None, 1)


def test_data_path_from_the_command_line_overrides_data_path_and_keeps_raw(tmp_path, small_config):
    day1 = _day(tmp_path, "2026-01-01", [small_table(10), small_table(20, seed=1)])
    day2 = _day(tmp_path, "2026-01-02", [small_table(30, seed=2)])
    other = tmp_path / "elsewhere"
    _day(other, "2026-01-02", [small_table(5, seed=3)])
    config = load_config(small_config(train={"dates": "2026-01-01"}))

    def rows(c, split):
        return prepare_input(c, split, 1).plan.total_rows

    assert rows(config, "train") == 30
    # A root: the split's dates still apply.
    with pytest.raises(DataError, match=r"no Parquet files for dt=2026-01-01"):
        prepare_input(config.with_data_path(str(other / "data")), "train", 1)
    assert rows(config.with_data_path(str(tmp_path / "data")), "train") == 30
    # One file or a glob: every file there, whatever the dates.
    assert rows(config.with_data_path(day2[0]), "train") == 30
    assert rows(config.with_data_path(str(tmp_path / "data" / "dt=*" / "*.parquet")), "train") == 60
    assert rows(config.with_data_path(day1[1]), None) == 20
    # A split the config does not define: an error from the file, all of --data from a command.
    with pytest.raises(ConfigError, match=r"data\.eval: missing; set data\.eval\.dates"):
        prepare_input(config, "eval", 1)
    assert rows(config.with_data_path(str(tmp_path / "data")), "eval") == 60
    # Only this command reads it: the config written next to a model keeps the file's path.
    assert config.with_data_path(day2[0]).raw == config.raw
    assert config.with_data_path(None) is config


def test_path_from_command_line_is_not_a_config_key(tmp_path, small_config):
    path = small_config(path_from_command_line=True)
    with pytest.raises(
        ConfigError,
        match=r"data\.path_from_command_line: unknown key; "
        r"allowed keys are .*path",
    ):
        load_config(path)


def test_a_partition_with_an_invalid_date_is_never_read_as_data(tmp_path, small_config):
    _day(tmp_path, "2026-01-01", [small_table(10)])
    _day(tmp_path, "2026-13-45", [small_table(10)])
    config = load_config(small_config(train={"dates": "2026-01-01"}))
    assert prepare_input(config, "train", 1).plan.total_rows == 10  # the range skips it
    root = str(tmp_path / "data")
    with pytest.raises(DataError) as raised:
        prepare_input(config.with_data_path(root), None, 1)
    assert str(raised.value) == (
        f"{root}/dt=2026-13-45: not a valid date partition (expected dt=YYYY-MM-DD) under "
        f"{root}; rename or move it, or point at the partitions to read"
    )


# ---- bad data: rows ---------------------------------------------------------------------


def _with_null_label(n=80):
    clicks = [None if i == 45 else i % 2 for i in range(n)]
    return small_table(n, click=pa.array(clicks, pa.int64()))


def test_null_label_fails_before_any_worker_reads(tmp_path, small_config):
    (path,) = _day(tmp_path, "2026-01-01", [_with_null_label()])
    with pytest.raises(
        DataError,
        match=rf"{path}: label column 'click' has 1 null\(s\) in row "
        r"group 1; every row needs a label",
    ):
        prepare_input(load_config(small_config(train={"dates": "2026-01-01"})), "train", 1)


def test_null_label_row_group_skipped_and_counted_under_skip(tmp_path, small_config):
    (path,) = _day(tmp_path, "2026-01-01", [_with_null_label()])
    pipeline = prepare_input(
        load_config(small_config(train={"dates": "2026-01-01"}, on_bad_row="skip")), "train", 1
    )
    result = read_pass_local(pipeline)
    assert (result.rows, result.skipped_rows) == (80, 1)  # only the null-label row


@pytest.mark.parametrize(
    "value,problem",
    [
        (
            float("nan"),
            r"a NaN or infinite value \(set nan_means_missing: true if NaN means missing\)",
        ),
        (float("inf"), r"a NaN or infinite value \(set nan_means_missing: true"),
    ],
)
def test_non_finite_numeric_fails_naming_file_column_and_row(
    tmp_path, small_config, value, problem
):
    prices = np.ones(50, np.float32)
    prices[17] = value
    (path,) = _day(tmp_path, "2026-01-01", [small_table(50, price=pa.array(prices))], 50)
    pipeline = prepare_input(load_config(small_config(train={"dates": "2026-01-01"})), "train", 1)
    with pytest.raises(
        DataError,
        match=rf"numeric column 'price' \(feature 'price'\) has "
        rf"{problem}.* in {path} \(rows 0..50\) at row 17",
    ):
        read_pass_local(pipeline)


def test_non_finite_numeric_rows_skipped_and_counted(tmp_path, small_config):
    prices = np.ones(50, np.float32)
    prices[[3, 9]] = [np.inf, np.nan]
    _day(tmp_path, "2026-01-01", [small_table(50, price=pa.array(prices))], 50)
    pipeline = prepare_input(
        load_config(small_config(train={"dates": "2026-01-01"}, on_bad_row="skip")), "train", 1
    )
    batches = list(pipeline.local_dataset(training=False))
    valid = np.concatenate([b["valid"].numpy() for b in batches])
    price = np.concatenate([b["features"]["price"].numpy() for b in batches])
    assert np.flatnonzero(valid == 0).tolist() == [3, 9]
    assert np.all(np.isfinite(price))
    assert read_pass_local(pipeline).skipped_rows == 2


def test_nan_means_missing_fills_but_inf_is_still_bad(tmp_path, small_config):
    features = changed(
        SMALL_FEATURES,
        {
            "features.price.transform": "none",
            "features.price.nan_means_missing": True,
            "features.price.fill_value": -1,
        },
    )
    prices = np.array([np.nan, 2.0, np.inf, 4.0], np.float32)
    _day(tmp_path, "2026-01-01", [small_table(4, price=pa.array(prices))], 4)
    pipeline = prepare_input(
        load_config(small_config(features, train={"dates": "2026-01-01"}, on_bad_row="skip")),
        "train",
        1,
    )
    (batch,) = list(pipeline.local_dataset(training=False))
    assert batch["features"]["price"].numpy().tolist() == [-1.0, 2.0, -1.0, 4.0]
    assert batch["valid"].numpy().tolist() == [1.0, 1.0, 0.0, 1.0]


def test_label_outside_zero_one_fails(tmp_path, small_config):
    (path,) = _day(
        tmp_path,
        "2026-01-01",
        [small_table(10, click=pa.array([0, 1, 2, 0, 1, 0, 0, 1, 1, 0]))],
        10,
    )
    pipeline = prepare_input(load_config(small_config(train={"dates": "2026-01-01"})), "train", 1)
    with pytest.raises(
        DataError,
        match=rf"label column 'click' has a null or a value other "
        rf"than 0 or 1 in "
        rf"{path} \(rows 0..10\) at row 2",
    ):
        read_pass_local(pipeline)


def test_bad_weight_in_weighted_multi_valued_column(tmp_path, small_config):
    features = changed(SMALL_FEATURES, {"features.tags.weighted": True})
    tags = pa.array(["1:0.5|2:0.5", "3:abc", "", "4"])
    (path,) = _day(tmp_path, "2026-01-01", [small_table(4, tags=tags)], 4)
    config = small_config(features, train={"dates": "2026-01-01"})
    with pytest.raises(
        DataError,
        match=r"column 'tags' \(feature 'tags'\) has an entry whose "
        r"weight after ':' is not a number in .* at row 1",
    ):
        read_pass_local(prepare_input(load_config(config), "train", 1))
    skip = prepare_input(
        load_config(small_config(features, train={"dates": "2026-01-01"}, on_bad_row="skip")),
        "train",
        1,
    )
    (batch,) = list(skip.local_dataset(training=False))
    assert batch["valid"].numpy().tolist() == [1.0, 0.0, 1.0, 0.0]
    assert batch["features"]["tags"]["weights"].numpy()[0].tolist() == [0.5, 0.5, 0.0]


# ---- schema -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "column,array,pattern",
    [
        ("ad", None, r"column 'ad' \(read by feature 'ad'\) is missing\..*The file has columns: "),
        (
            "ad",
            pa.array(["a"] * 5),
            r"column 'ad' has type string, but feature 'ad' needs an "
            r"integer column",
        ),
        (
            "click",
            pa.array(["yes"] * 5),
            r"column 'click' has type string, but label 'click' needs",
        ),
        (
            "price",
            pa.array([pa.scalar(1, pa.timestamp("s"))] * 5),
            r"column 'price' has type timestamp\[ms\], but feature 'price' needs an integer or "
            r"floating",
        ),
        (
            "ad",
            pa.array([[1, 2]] * 5),
            r"column 'ad' has type list<element: int64> \(a list column\), "
            r"but feature 'ad' needs an integer column",
        ),
        (
            "tags",
            pa.array([1] * 5),
            r"column 'tags' has type int64, but feature 'tags' needs a "
            r"list<int64> or list<string> column, or a delimited string",
        ),
        (
            "tags",
            pa.array([[1.5]] * 5),
            r"column 'tags' has type list<element: double> \(a list "
            r"column\), but feature 'tags' needs a list<int64>",
        ),
        ("site", pa.array([{"a": 1}] * 5), r"column 'site' \(read by feature 'site'\) is a nested"),
    ],
)
def test_schema_mismatch_rejected_with_clear_message(
    tmp_path, small_config, column, array, pattern
):
    table = small_table(5)
    if array is None:
        table = table.drop_columns([column])
    else:
        table = table.set_column(table.schema.get_field_index(column), column, array)
    (path,) = _day(tmp_path, "2026-01-01", [table])
    with pytest.raises(DataError, match=f"{path}: {pattern}"):
        prepare_input(load_config(small_config(train={"dates": "2026-01-01"})), "train", 1)


def test_files_disagreeing_on_a_column_type_are_rejected(tmp_path, small_config):
    first, second = _day(
        tmp_path,
        "2026-01-01",
        [small_table(5), small_table(5, price=pa.array(np.ones(5), pa.float64()))],
    )
    with pytest.raises(
        DataError,
        match=rf"column 'price' is stored as float32 in {first} but as "
        rf"float64 in {second}",
    ):
        prepare_input(load_config(small_config(train={"dates": "2026-01-01"})), "train", 1)


def test_narrow_and_wide_physical_types_are_read_and_cast(tmp_path, small_config):
    table = small_table(
        6,
        ad=pa.array([1, 2, 3, 4, 5, 6], pa.int32()),
        price=pa.array(np.arange(6), pa.float64()),
        click=pa.array([True, False] * 3),
    )
    _day(tmp_path, "2026-01-01", [table], 6)
    pipeline = prepare_input(load_config(small_config(train={"dates": "2026-01-01"})), "train", 1)
    assert pipeline.transform.column_dtypes["ad"] == "int32"
    (batch,) = list(pipeline.local_dataset(training=False))
    assert (
        batch["features"]["ad"].numpy().tolist() == _splitmix_bucket(np.arange(1, 7), 999).tolist()
    )
    assert batch["labels"]["click"].numpy().tolist() == [1.0, 0.0] * 3


def test_optional_extra_columns_are_passed_through_only_when_every_file_has_them(
    tmp_path, small_config
):
    oracle = pa.array(np.arange(6, dtype=np.float32))
    _day(tmp_path, "2026-01-01", [small_table(6, oracle_logit=oracle)], 6)
    config = load_config(small_config(train={"dates": "2026-01-01"}))
    pipeline = prepare_input(
        config, "train", 1, optional_extra_columns=("oracle_logit", "oracle_logit_click")
    )
    assert pipeline.extra_columns == ("oracle_logit",)
    (batch,) = list(pipeline.local_dataset(training=False))
    assert batch["extra"]["oracle_logit"].numpy().tolist() == list(range(6))
