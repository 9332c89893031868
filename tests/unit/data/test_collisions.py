"""The id and collision report of ``validate --scan`` (recsys_dist.data.collisions).

Every expected figure is counted here by brute force: table rows come from the real
input pipeline (what training looks up), ids from the Parquet values in Python."""

from __future__ import annotations

import collections
import math

import numpy as np
import pyarrow as pa
import pytest

from recsys_dist.cli import main
from recsys_dist.config import load_config
from recsys_dist.data.collisions import table_ids
from recsys_dist.data.input_fn import prepare_input
from tests.support.configs import write_yaml
from tests.support.data import write_parquet

ROWS = 1200
COUNTRIES = ["fr", "de", "it"]

FEATURES = {
    "tables": {
        "tiny": {"rows": 8, "dim": 4},  # 200 distinct ads + topics: shared rows
        "wide": {"rows": 1000000, "dim": 4},  # 40 sites: no shared row
        "tag": {"rows": 64, "dim": 4},
        "geo": {"rows": 6, "dim": 4},  # 3 countries + 2 OOV rows + missing row
        "crossed": {"rows": 50000, "dim": 4},
        "user": {"kind": "dynamic", "dim": 4, "capacity_per_shard": 100},
        "price_bucket": {"rows": 4, "dim": 4},  # a bucketized numeric: no ids
    },
    "features": {
        "ad": {"kind": "categorical", "dtype": "int64", "table": "tiny"},
        "site": {"kind": "categorical", "dtype": "string", "table": "wide"},
        "tags": {"kind": "multi_categorical", "table": "tag", "max_length": 3},
        "topics": {"kind": "multi_categorical", "table": "tiny", "max_length": 2, "weighted": True},
        "country": {
            "kind": "categorical",
            "dtype": "string",
            "table": "geo",
            "vocabulary": "countries.txt",
            "oov_buckets": 2,
        },
        "ad_x_site": {"kind": "cross", "inputs": ["ad", "site"], "table": "crossed"},
        "user_id": {"kind": "categorical", "dtype": "int64", "table": "user"},
        "price": {
            "kind": "numeric",
            "transform": "bucketize",
            "boundaries": [1.0, 2.0, 3.0],
            "table": "price_bucket",
        },
    },
    "labels": {"click": {}},
}


def _table(seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    ads = [int(v) for v in 1000 + rng.zipf(1.3, ROWS) % 200]
    ads = [None if i % 50 == 0 else v for i, v in enumerate(ads)]  # nulls are no ids
    tags = [
        None
        if i % 37 == 0
        else [int(t) for t in rng.integers(0, 300, i % 6)] + ([None] if i % 11 == 0 else [])
        for i in range(ROWS)
    ]
    topics = [
        "|".join(f"{t}:{w:.1f}" for t, w in zip(rng.integers(0, 30, i % 4), rng.random(i % 4)))
        for i in range(ROWS)
    ]
    countries = COUNTRIES + ["es", "pt", "nl", "be", "at"]
    return pa.table(
        {
            "ad": pa.array(ads, pa.int64()),
            "site": pa.array([f"site{int(v)}" for v in rng.integers(0, 40, ROWS)], pa.string()),
            "tags": pa.array(tags, pa.list_(pa.int64())),
            "topics": pa.array(topics, pa.string()),
            "country": pa.array([countries[int(v)] for v in rng.integers(0, 8, ROWS)]),
            "user_id": pa.array(rng.integers(0, 300, ROWS), pa.int64()),
            "price": pa.array(rng.random(ROWS).astype(np.float32) * 4, pa.float32()),
            "click": pa.array(rng.integers(0, 2, ROWS), pa.int64()),
        }
    )


@pytest.fixture
def dataset(tmp_path):
    """``(model config path, data path, the table written)``, in 3 files."""
    table = _table()
    for i in range(3):
        write_parquet(
            tmp_path / "data" / f"part-{i}.parquet",
            table.slice(i * ROWS // 3, ROWS // 3),
            row_group_size=150,
        )
    (tmp_path / "countries.txt").write_text("\n".join(COUNTRIES) + "\n")
    write_yaml(tmp_path / "features.yaml", FEATURES)
    config = write_yaml(
        tmp_path / "model.yaml",
        {
            "features": "features.yaml",
            "model": {"name": "dcn_v2"},
            "input": {"batch_size": 64, "shuffle": False},
            "cluster": {"workers": 2, "ps": 2},
        },
    )
    return config, str(tmp_path / "data"), table


def _ids(table: pa.Table) -> dict[str, list[list]]:
    """Per feature, the ids of each row as training looks them up (nulls dropped, the
    first max_length of a list; a cross's id is its tuple of inputs)."""
    ads, sites = table["ad"].to_pylist(), table["site"].to_pylist()
    return {
        "ad": [[a] if a is not None else [] for a in ads],
        "site": [[s] for s in sites],
        "tags": [[t for t in (v or []) if t is not None][:3] for v in table["tags"].to_pylist()],
        "topics": [
            [e.split(":")[0] for e in v.split("|") if e][:2] for v in table["topics"].to_pylist()
        ],
        "country": [[c] for c in table["country"].to_pylist()],
        "ad_x_site": [[(a, s)] if a is not None else [] for a, s in zip(ads, sites)],
        "user_id": [[u] for u in table["user_id"].to_pylist()],
    }


def _looked_up_rows(config_path: str, data: str) -> dict[str, dict[int, list[int]]]:
    """Per feature, the table rows the input pipeline gives each file row."""
    pipeline = prepare_input(load_config(config_path).with_data_path(data), None, 1)
    files = pipeline.plan.files
    out: dict[str, dict[int, list[int]]] = collections.defaultdict(dict)
    for batch in pipeline.local_dataset(training=False):
        for k, row in enumerate(batch["row"].numpy()):
            global_row = int(files[row >> 32].split("part-")[1][0]) * (ROWS // 3) + int(
                row & 0xFFFFFFFF
            )
            for name, value in batch["features"].items():
                if isinstance(value, dict):
                    out[name][global_row] = [int(v) for v in value["ids"][k].numpy()]
                elif name != "price":
                    out[name][global_row] = [int(value[k].numpy())]
    return out


def _expected(config_path: str, data: str, table: pa.Table) -> dict[str, tuple[int, float]]:
    """Per table, (distinct ids, share of lookups whose row holds another id)."""
    rows = _looked_up_rows(config_path, data)
    per_table: dict[str, list[tuple[tuple, int]]] = collections.defaultdict(list)
    for name, ids_of_row in _ids(table).items():
        for r, ids in enumerate(ids_of_row):
            for slot, value in enumerate(ids):  # multi-valued: slot k holds the k-th id
                per_table[FEATURES["features"][name]["table"]].append(
                    ((name, value), rows[name][r][slot])
                )
    out = {}
    for name, lookups in per_table.items():
        keys_of_row = collections.defaultdict(set)
        for key, row in lookups:
            keys_of_row[row].add(key)
        shared = sum(1 for _, row in lookups if len(keys_of_row[row]) > 1)
        out[name] = (len({key for key, _ in lookups}), shared / len(lookups), len(lookups))
    return out


def test_distinct_ids_and_shared_rows_match_a_brute_force_count(dataset):
    config_path, data, table = dataset
    pipeline = prepare_input(load_config(config_path).with_data_path(data), None, 2)
    got = {t.table: t for t in table_ids(pipeline, shards=2, batch_rows=100)}
    expected = _expected(config_path, data, table)
    assert set(got) == set(expected) == {"tiny", "wide", "tag", "geo", "crossed", "user"}
    for name, (distinct, share, lookups) in expected.items():
        assert got[name].rows == ROWS
        assert got[name].distinct_ids == distinct, name
        assert got[name].lookups == lookups, name
        if name != "user":
            assert got[name].shared == pytest.approx(share, abs=1e-12), name
    assert got["tiny"].shared > 0.5 and got["wide"].shared == 0.0
    # 3 countries in the vocabulary, 5 more share the 2 OOV rows
    assert got["geo"].distinct_ids == 8 and got["geo"].rows_used == 5
    assert got["tag"].lookups < sum(len(v or []) for v in table["tags"].to_pylist())
    assert got["user"].dynamic and got["user"].capacity == 200


def test_validate_scan_prints_a_line_per_table(dataset, capsys):
    config_path, data, table = dataset
    assert main(["validate", "--config", config_path, "--data", data, "--scan"]) == 0
    lines = {
        line.split(":")[0]: line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith(("ids ", "warning "))
    }
    expected = _expected(config_path, data, table)
    distinct, share, lookups = expected["tiny"]
    # ~100 rows per distinct id keep the expected share of shared lookups under 1%
    suggested = math.ceil((distinct - 1) / -math.log(0.99))
    suggested = int(float(f"{suggested:.1e}")) + (
        10 ** (len(str(suggested)) - 2) if int(float(f"{suggested:.1e}")) < suggested else 0
    )
    assert lines["ids      table tiny"] == (
        f"ids      table tiny: {distinct} distinct ids in 1,200 rows ({lookups:,} lookups); "
        f"{share:.1%} of lookups share a row with another id: consider kind: dynamic or "
        f"rows >= {suggested:,}"
    )
    assert lines["ids      table wide"] == (
        "ids      table wide: 40 distinct ids in 1,200 rows; 0.0% share a row (fine)"
    )
    assert lines["ids      table geo"] == (
        f"ids      table geo: 8 distinct ids in 1,200 rows; {expected['geo'][1]:.1%} of lookups "
        "share a row with another id: extend the vocabulary or raise oov_buckets"
    )
    users = expected["user"][0]
    assert lines["ids      table user"] == (
        f"ids      table user: dynamic, {users} distinct ids (capacity 200)"
    )
    assert lines["warning  dynamic table user would be full"] == (
        f"warning  dynamic table user would be full: {users} distinct ids > capacity 200; "
        "raise its capacity_per_shard"
    )
    assert "ids      table price_bucket" not in lines


def test_the_suggestion_follows_the_printed_share():
    from recsys_dist.data.collisions import TableIds

    def line(shared: int) -> str:
        return TableIds("c3", False, 1000, 1000, 21829, 21000, shared).lines()[0]

    assert line(10) == (
        "ids      table c3: 21,829 distinct ids in 1,000 rows; 1.0% share a row (fine)"
    )
    # 21,828 / -ln(0.99) = 2,171,8.. rows, rounded up to two significant digits
    assert line(11) == (
        "ids      table c3: 21,829 distinct ids in 1,000 rows; 1.1% of lookups "
        "share a row with another id: consider kind: dynamic or rows >= 2,200,000"
    )


def test_the_sample_check_names_the_crowded_tables_on_one_line(dataset, capsys):
    """``validate`` (without ``--scan``) and a model dir's first ``train`` print
    ``collision_warnings``: one line naming the hashed tables at or above 5% shared
    lookups in the first rows, with the share a full scan of those rows gives, the most
    shared first; one line naming the dynamic tables those rows alone would fill."""
    from recsys_dist.data.collisions import collision_warnings

    config_path, data, table = dataset
    pipeline = prepare_input(load_config(config_path).with_data_path(data), None, 2)
    full = {t.table: t for t in table_ids(pipeline, shards=2)}
    sample = {t.table: t for t in table_ids(pipeline, shards=2, max_rows=500)}
    assert sample["tiny"].rows == 500 and sample["tiny"].distinct_ids <= full["tiny"].distinct_ids
    lines = collision_warnings(pipeline, shards=2, max_rows=500)
    crowded = sorted(
        (t for t in sample.values() if not t.dynamic and t.shared >= 0.05), key=lambda t: -t.shared
    )
    assert "tiny" in {t.table for t in crowded} and "wide" not in {t.table for t in crowded}
    assert "user" in sample and sample["user"].distinct_ids > 200  # capacity 2 x 100
    named = ", ".join(f"{t.table} {t.shared:.1%}" for t in crowded)
    count = f"{len(crowded)} hashed table" + (
        "s: 5% or more of their" if len(crowded) > 1 else ": 5% or more of its"
    )
    assert lines == [
        f"warning  {count} lookups in the first 500 rows share a row with another id "
        f"({named}), which costs quality; recsys-dist validate --scan gives each table's "
        "fix (docs/cli.md#recsys-dist-validate)",
        f"warning  1 dynamic table would be full with the ids of the first 500 rows alone "
        f"(user {sample['user'].distinct_ids:,} ids > capacity 200): raise capacity_per_shard; "
        "recsys-dist validate --scan counts every row (docs/cli.md#recsys-dist-validate)",
    ]
    assert main(["validate", "--config", config_path, "--data", data]) == 0
    out = capsys.readouterr().out.splitlines()
    warnings = [line for line in out if line.startswith("warning")]
    assert len(warnings) == 2, out
    assert "hashed table" in warnings[0] and "tiny " in warnings[0]
    assert "in all 1,200 rows" in warnings[0] and "dynamic table" in warnings[1]
    assert not any(line.startswith("ids ") for line in out)  # the per-table lines: --scan


def test_a_long_list_of_crowded_tables_is_cut_after_five(monkeypatch):
    """Many crowded tables: the five most shared are named, then how many more."""
    from recsys_dist.data import collisions
    from recsys_dist.data.collisions import TableIds

    tables = [
        TableIds(f"t{i}", False, 100, 100, 50, 40, shared, table_rows=64)
        for i, shared in enumerate([6, 30, 9, 4, 12, 50, 7, 5])
    ] + [TableIds("ok", True, 100, 100, 10, 10, 0, capacity=20)]
    monkeypatch.setattr(collisions, "table_ids", lambda *args, **kwargs: tables)

    class Plan:
        total_rows = 100

    class Pipeline:
        plan = Plan()

    assert collisions.collision_warnings(Pipeline(), shards=2) == [
        "warning  7 hashed tables: 5% or more of their lookups in all 100 rows share a row "
        "with another id (t5 50.0%, t1 30.0%, t4 12.0%, t2 9.0%, t6 7.0% and 2 more), which "
        "costs quality; recsys-dist validate --scan gives each table's fix "
        "(docs/cli.md#recsys-dist-validate)"
    ]
    monkeypatch.setattr(collisions, "table_ids", lambda *args, **kwargs: tables[3:4])
    assert collisions.collision_warnings(Pipeline(), shards=2) == []


def test_a_model_dirs_first_train_run_warns_and_later_runs_do_not(
    dataset, tmp_path, monkeypatch, caplog
):
    """``train`` checks the sample of its planned training rows before the first step,
    only while its model dir has no checkpoint (``train/run.py``)."""
    from recsys_dist.checkpoint.store import CheckpointManager
    from recsys_dist.train import run

    config_path, data, _ = dataset
    config = load_config(config_path).with_data_path(data)
    model_dir = str(tmp_path / "model")
    train_input = prepare_input(config, None, 2)
    caplog.set_level("INFO", logger="recsys_dist")
    run._warn_collisions_on_first_run(config, model_dir, train_input)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    # one line for the hashed tables, one for the dynamic table, each said once
    assert len(warned) == 2, warned
    assert " hashed table" in warned[0].split(":")[0] and "tiny " in warned[0], warned
    assert warned[1].startswith("1 dynamic table would be full with the ids of all "), warned
    assert any(
        m.startswith("tables\tchecked on the first 100,000 training rows in ")
        for m in caplog.messages
    ), caplog.messages
    caplog.clear()
    # a restart after a lost server, before the first checkpoint: said already
    monkeypatch.setenv("RECSYS_DIST_RESTART", "1")
    run._warn_collisions_on_first_run(config, model_dir, train_input)
    assert caplog.messages == []
    monkeypatch.delenv("RECSYS_DIST_RESTART")
    monkeypatch.setattr(CheckpointManager, "latest", lambda self: object())
    run._warn_collisions_on_first_run(config, model_dir, train_input)
    assert caplog.messages == []
