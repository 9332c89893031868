"""The synthetic Criteo-like data: the rows of the generator (``data/synth.py``, with its
label model's curves in ``data/synth_effects.py`` and its Arrow columns built by
``data/synth_columns.py``), their columns (``data/synth_schema.py``) and the partitioned
data set written from them (``data/synth_files.py``: layout, files per day, stale parts
removed, reruns, start date, argument checks)."""

from __future__ import annotations

import dataclasses
import datetime
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recsys_dist.data import synth, synth_files, synth_schema

NUMERIC = [f"I{i}" for i in range(1, 14)]
INT_IDS = [f"C{i}" for i in range(1, 21)]
STRING_IDS = [f"C{i}" for i in range(21, 27)]
EXPECTED_COLUMNS = (
    NUMERIC
    + INT_IDS
    + STRING_IDS
    + [
        "user_id",
        "tags",
        "topics",
        "click",
        "conversion",
        "oracle_logit",
        "oracle_logit_conversion",
    ]
)
ROWS_PER_DAY = 50_000


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Two days of 50k rows in 3 files per day with 4 row groups each."""
    out = tmp_path_factory.mktemp("synth")
    messages: list[str] = []
    report = synth_files.synthesize(
        out,
        days=2,
        rows_per_day=ROWS_PER_DAY,
        seed=7,
        rows_per_file=20_000,
        row_groups_per_file=4,
        progress=messages.append,
    )
    return report, messages


@pytest.fixture(scope="module")
def day0(dataset):
    report, _ = dataset
    return _read_day(report, report.days[0])


@pytest.fixture(scope="module")
def day1(dataset):
    report, _ = dataset
    return _read_day(report, report.days[1])


def _read_day(report: synth_files.SynthReport, dt: str) -> pa.Table:
    files = [f for f in report.files if f"dt={dt}" in f]
    return pa.concat_tables([pq.read_table(f) for f in files])


def _comparable(table: pa.Table) -> pa.Table:
    """Replaces float columns by their bit patterns, so NaN compares equal to NaN."""
    columns = [
        pa.array(c.to_numpy().view(np.uint32)) if pa.types.is_float32(c.type) else c
        for c in table.columns
    ]
    return pa.table(columns, names=table.column_names)


def _auc(score: np.ndarray, label: np.ndarray) -> float:
    ranks = np.empty(score.size)
    ranks[np.argsort(score, kind="mergesort")] = np.arange(1, score.size + 1)
    positives = int(label.sum())
    negatives = label.size - positives
    return (ranks[label == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


def test_layout_report_and_progress(dataset):
    report, messages = dataset
    assert report.days == ["2026-01-01", "2026-01-02"]
    assert report.rows == 2 * ROWS_PER_DAY
    assert len(report.files) == 6
    assert len(messages) == 6
    assert messages[0] == "dt=2026-01-01 part-00000.parquet 16667 rows"
    for dt in report.days:
        day_dir = os.path.join(report.out_dir, f"dt={dt}")
        assert sorted(os.listdir(day_dir)) == [f"part-{i:05d}.parquet" for i in range(3)]
    sizes = []
    for path in report.files:
        metadata = pq.ParquetFile(path).metadata
        assert metadata.num_row_groups == 4
        sizes.append(metadata.num_rows)
    assert sizes == [16667, 16667, 16666] * 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.rows = 0  # type: ignore[misc]


def test_schema_is_exact_and_non_nullable(dataset, day0):
    report, _ = dataset
    schema = pq.read_schema(report.files[0])
    assert schema.names == EXPECTED_COLUMNS
    assert schema.equals(synth_schema.SCHEMA)
    assert not any(field.nullable for field in schema)
    types = {field.name: field.type for field in schema}
    assert all(
        types[c] == pa.float32() for c in NUMERIC + ["oracle_logit", "oracle_logit_conversion"]
    )
    assert all(types[c] == pa.int64() for c in INT_IDS + ["user_id", "click", "conversion"])
    assert all(types[c] == pa.string() for c in STRING_IDS + ["topics"])
    assert types["tags"] == pa.list_(pa.field("item", pa.int64(), nullable=False))
    assert all(column.null_count == 0 for column in day0.columns)


def test_tiny_days_never_write_empty_files(tmp_path):
    report = synth_files.synthesize(tmp_path, days=1, rows_per_day=1)
    assert [pq.ParquetFile(f).metadata.num_rows for f in report.files] == [1]
    assert pq.read_table(report.files[0]).schema.equals(synth_schema.SCHEMA)


def test_rerun_with_fewer_files_removes_stale_parts(tmp_path):
    synth_files.synthesize(tmp_path, days=1, rows_per_day=3_000, rows_per_file=1_000)
    report = synth_files.synthesize(tmp_path, days=1, rows_per_day=3_000, rows_per_file=2_000)
    on_disk = sorted(p.name for p in (tmp_path / f"dt={report.days[0]}").iterdir())
    assert on_disk == ["part-00000.parquet", "part-00001.parquet"]


def test_same_seed_reproduces_and_other_seed_differs(tmp_path):
    def generate(name: str, seed: int, days: int) -> list[pa.Table]:
        report = synth_files.synthesize(
            tmp_path / name, days=days, rows_per_day=3_000, seed=seed, rows_per_file=1_000
        )
        return [_comparable(_read_day(report, dt)) for dt in report.days]

    first = generate("a", seed=3, days=2)
    assert [t.equals(o) for t, o in zip(first, generate("b", seed=3, days=2))] == [True, True]
    assert generate("c", seed=3, days=1)[0].equals(first[0])
    other = generate("d", seed=4, days=1)[0]
    assert not other.equals(first[0])
    assert not np.array_equal(other["oracle_logit"].to_numpy(), first[0]["oracle_logit"].to_numpy())


def test_labels_and_oracle(day0):
    click = day0["click"].to_numpy()
    conversion = day0["conversion"].to_numpy()
    logit = day0["oracle_logit"].to_numpy()
    conversion_logit = day0["oracle_logit_conversion"].to_numpy()
    assert set(np.unique(click)) <= {0, 1} and set(np.unique(conversion)) <= {0, 1}
    assert np.all(conversion <= click)
    assert 0.2 <= click.mean() <= 0.3
    assert 0.02 <= conversion.mean() <= 0.05
    assert np.isfinite(logit).all() and np.isfinite(conversion_logit).all()
    assert abs(_sigmoid(logit).mean() - click.mean()) < 0.01
    assert abs(_sigmoid(conversion_logit).mean() - conversion.mean()) < 0.005
    assert np.all(conversion_logit <= logit + 1e-4)
    assert 0.72 <= _auc(logit, click) <= 0.88


def test_click_terms_sum_to_the_stored_oracle_logit():
    """The named terms benchmarks/studies/quality_terms.py regresses on are the whole logit."""
    generator = synth.RowGenerator(5)
    batch, logit, _, _ = generator.clicks(2, 0, 2_000)
    terms = generator.click_terms(batch)
    assert {"C5 x C8", "user", "tags", "topics", "num I1"} <= set(terms)
    total = sum(terms.values()) + generator._click_bias
    np.testing.assert_array_equal(total.astype(np.float32), logit)


def test_features_are_the_rows_clicks_labels():
    """``features`` (the rows without labels, for benchmarks/studies/learnable_ceiling.py)
    draws the same rows as ``clicks``."""
    generator = synth.RowGenerator(5)
    batch = generator.features(2, 1, 500)
    labelled, _, _, _ = generator.clicks(2, 1, 500)
    for field in synth_schema.CATEGORICAL_FIELDS:
        np.testing.assert_array_equal(batch.categorical[field], labelled.categorical[field])
    np.testing.assert_array_equal(batch.numeric["I1"], labelled.numeric["I1"])
    np.testing.assert_array_equal(batch.user_id, labelled.user_id)
    np.testing.assert_array_equal(batch.tag_ids, labelled.tag_ids)


def test_numeric_values(day0):
    for name in NUMERIC:
        values = day0[name].to_numpy()
        assert not np.isinf(values).any(), name
        missing = np.isnan(values)
        assert abs(missing.mean() - synth_schema.NUMERIC_MISSING_RATES[name]) < 0.01, name
        present = values[~missing]
        assert np.median(present) < present.max() / 10, name  # heavy right tail
    i1 = day0["I1"].to_numpy()
    assert np.array_equal(i1[~np.isnan(i1)], np.floor(i1[~np.isnan(i1)]))
    i2 = day0["I2"].to_numpy()
    assert 0 < (i2 < 0).mean() < 0.1 and i2.min() >= -3


def test_categorical_ids(day0):
    for name in INT_IDS:
        ids = day0[name].to_numpy()
        rate = synth_schema.CATEGORICAL_MISSING_RATES[name]
        assert ids.min() >= (0 if rate else 1), name
        assert abs((ids == 0).mean() - rate) < 0.01, name
        assert ids.max() <= synth_schema.CARDINALITIES[name], name  # no drift on the first day
    for name in STRING_IDS:
        values = np.array(day0[name].to_pylist())
        empty = values == ""
        assert abs(empty.mean() - synth_schema.CATEGORICAL_MISSING_RATES[name]) < 0.01, name
        assert all(re.fullmatch(r"[0-9a-f]{8}", v) for v in values[~empty]), name
    assert day0["user_id"].to_numpy().min() >= 1


def test_string_ids_are_stable_across_days(day0, day1):
    top0 = _top(np.array(day0["C21"].to_pylist()), 10)
    top1 = set(np.array(day1["C21"].to_pylist()))
    assert len(set(top0) & top1) >= 9


def test_tags_and_topics_parse(day0):
    counts = []
    for tags in day0["tags"].to_pylist():
        ids = list(tags)  # a list<int64> column
        assert len(ids) == len(set(ids)) and all(1 <= t <= 5_000 for t in ids)
        counts.append(len(ids))
    counts_array = np.array(counts)
    assert counts_array.max() <= 8 and (counts_array == 0).any()
    assert 0.6 < ((counts_array >= 1) & (counts_array <= 4)).mean()
    topic_re = re.compile(r"(\d+):(\d\.\d\d)")
    for topics in day0["topics"].to_pylist():
        entries = topics.split("|")
        assert 1 <= len(entries) <= 3
        for entry in entries:
            match = topic_re.fullmatch(entry)
            assert match, topics
            assert 1 <= int(match[1]) <= 200 and 0 < float(match[2]) <= 1


def test_ids_are_zipf_distributed(day0):
    _, counts = np.unique(day0["C3"].to_numpy(), return_counts=True)
    assert counts.max() > 100 * np.median(counts)
    _, user_counts = np.unique(day0["user_id"].to_numpy(), return_counts=True)
    assert user_counts.max() > 20 * np.median(user_counts)


def test_users_have_both_classes(day0):
    users, inverse, counts = np.unique(
        day0["user_id"].to_numpy(), return_inverse=True, return_counts=True
    )
    clicks = np.bincount(inverse, weights=day0["click"].to_numpy())
    mixed = (clicks > 0) & (clicks < counts)
    assert counts[mixed].sum() > 0.3 * day0.num_rows


def test_drift_brings_new_ids_but_keeps_the_head(day0, day1):
    for name in ["C3", "C12", "C16"]:
        ids0, ids1 = day0[name].to_numpy(), day1[name].to_numpy()
        assert not np.isin(ids1[ids1 > synth_schema.CARDINALITIES[name]], ids0).any()
        assert (ids1 > synth_schema.CARDINALITIES[name]).mean() > 0.002, name
        assert len(set(_top(ids0, 20)) & set(ids1)) >= 16, name


def _top(values: np.ndarray, k: int) -> list:
    unique, counts = np.unique(values, return_counts=True)
    return list(unique[np.argsort(-counts, kind="stable")[:k]])


def test_start_date_names_partitions(tmp_path):
    report = synth_files.synthesize(
        tmp_path, days=2, rows_per_day=10, start_date=datetime.date(2025, 12, 31)
    )
    assert report.days == ["2025-12-31", "2026-01-01"]
    assert len(report.files) == 4 and all(os.path.exists(f) for f in report.files)


@pytest.mark.parametrize(
    "name, value",
    [
        ("days", 0),
        ("rows_per_day", 0),
        ("rows_per_file", -1),
        ("row_groups_per_file", 0),
        ("seed", -1),
        ("days", 1.5),
    ],
)
def test_bad_arguments_are_rejected(tmp_path, name, value):
    kwargs = {"days": 1, "rows_per_day": 10, name: value}
    with pytest.raises(
        ValueError,
        match=rf"^{name} must be an integer >= \d, got "
        rf"{re.escape(repr(value))}$",
    ):
        synth_files.synthesize(tmp_path, **kwargs)
    assert not list(tmp_path.iterdir())


def test_the_user_pool_is_a_parameter(tmp_path):
    few = synth_files.synthesize(tmp_path / "few", days=1, rows_per_day=4000, seed=3, users=50)
    many = synth_files.synthesize(
        tmp_path / "many", days=1, rows_per_day=4000, seed=3, users=5_000_000
    )
    distinct = [len(set(pq.read_table(r.files).column("user_id").to_pylist())) for r in (few, many)]
    assert distinct[0] <= 50 < 2000 < distinct[1]
    with pytest.raises(ValueError, match="users must be an integer >= 1"):
        synth_files.synthesize(tmp_path / "none", days=1, rows_per_day=10, users=0)


def test_hourly_partitions_carry_their_marker_after_their_files(tmp_path):
    from recsys_dist.data.partitions import complete_partitions

    report = synth_files.synthesize(
        tmp_path,
        days=26,
        rows_per_day=30,
        seed=1,
        start_date=datetime.date(2026, 3, 1),
        hourly=True,
    )
    assert report.days[0] == "2026-03-01/hour=00" and report.days[-1] == "2026-03-02/hour=01"
    complete, pending = complete_partitions(str(tmp_path))
    assert len(complete) == 26 and pending == []
    assert complete[25].start == datetime.datetime(2026, 3, 2, 1)
    for partition in complete:
        marker = os.path.join(tmp_path, *partition.name.split("/"), "_SUCCESS")
        assert all(os.path.getmtime(f) <= os.path.getmtime(marker) for f in partition.files)
    assert sum(pq.read_metadata(f).num_rows for f in complete[3].files) == 30
