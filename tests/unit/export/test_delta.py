"""Deltas between exports and the SavedModel rebuilt from a chain of them
(``recsys_dist/export/delta.py``).

The exports are real: a DCN-v2 with a dynamic ``user`` table is built without a cluster,
its weights and ids changed by hand between checkpoints (rows of the hashed table stack,
ids admitted, ids evicted so rows move, dense weights), and each checkpoint exported with
``export_model``. A chain of a base and its deltas must serve exactly as the full export
of the last state; the pure diff and apply are checked on small NumPy dicts.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import shutil

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist.checkpoint.signature import model_signature
from recsys_dist.checkpoint.store import CheckpointManager
from recsys_dist.config import load_config
from recsys_dist.export import export_model
from recsys_dist.export.delta import (
    FULL,
    NEW,
    REMOVED,
    ROWS,
    SAME,
    TABLE,
    Delta,
    DeltaError,
    TensorChange,
    apply_delta,
    apply_deltas,
    chain_tensors,
    diff_tensors,
    export_tensors,
    read_delta,
    write_chain,
    write_delta,
)
from recsys_dist.models.dynamic_table import hour_number
from recsys_dist.models.sharding import Placement
from recsys_dist.models.zoo import build_from_config
from tests.support.configs import changed
from tests.support.run_configs import ZOO_FEATURES, zoo_config

#: The raw columns of ZOO_FEATURES, as the checkpoint's state records them.
COLUMNS = {
    "I1": "float32",
    "I5": "float32",
    "C3": "int64",
    "C4": "int64",
    "C2": "int64",
    "C17": "int64",
    "C21": "string",
    "user_id": "int64",
    "tags": "list<int64>",
}
FEATURES = changed(
    ZOO_FEATURES,
    {
        "tables.user": {"kind": "dynamic", "dim": 8, "capacity_per_shard": 100},
        "features.user_id.table": "user",
    },
)
#: Rows of the hashed tables' stack (big, small, tag, cross) and the share changed.
STACK_ROWS, CHANGED_ROWS = 6800, 680
#: user ids admitted in each state; the first state's ids 17 and 4242 are evicted in the
#: third, whose kept rows move to the front.
ADMITTED = ([5, 17, 99, 4242], [123, 456], [777])
EVICTED = (17, 4242)
REQUEST_ROWS = 64


def _admit(shard, ids: list[int], day: int, rng) -> None:
    """Gives ``ids`` the next rows of a dynamic shard, as training's admission does."""
    first = int(shard.next_row.numpy())
    rows = tf.range(first, first + len(ids), dtype=tf.int64)
    shard.index.insert(tf.constant(ids, tf.int64), rows)
    values = rng.normal(size=(len(ids), int(shard.emb.shape[1]))).astype(np.float32)
    shard.emb.scatter_update(tf.IndexedSlices(tf.constant(values), rows))
    shard.last_seen.scatter_update(
        tf.IndexedSlices(tf.fill([len(ids)], tf.constant(day, tf.int64)), rows)
    )
    shard.next_row.assign(first + len(ids))


def _change_stack_rows(model, rng) -> np.ndarray:
    """Changes CHANGED_ROWS rows of the hashed tables' stack; returns their indices."""
    (stack,) = [v for v in model.variables if v.shape == (STACK_ROWS, 8)]
    rows = np.sort(rng.choice(STACK_ROWS, CHANGED_ROWS, replace=False))
    noise = rng.normal(size=(CHANGED_ROWS, 8)).astype(np.float32) + 0.5
    stack.scatter_add(tf.IndexedSlices(tf.constant(noise), tf.constant(rows)))
    return rows


def _evict_and_train_dense(model, shard, today: int) -> None:
    """Evicts the EVICTED ids (the rows kept move to the front) and changes every weight
    of the dense layers."""
    keys, rows = (t.numpy() for t in shard.index.export())
    old = rows[np.isin(keys, EVICTED)]
    days = tf.fill([len(old)], tf.constant(today - 9, tf.int64))
    shard.last_seen.scatter_update(tf.IndexedSlices(days, old))
    assert shard.evict(today - 1, []) == (4, 2)
    for variable in model.variables:
        dense = variable.shape.rank in (1, 2) and variable.shape[0] < 100
        if variable.dtype == tf.float32 and dense:
            variable.assign_add(tf.fill(variable.shape, 0.01))


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Three exports of one model, each of a state later than the one before."""
    root = tmp_path_factory.mktemp("delta")
    config = load_config(zoo_config(root, root / "data", "dcn_v2", features=FEATURES))
    model = build_from_config(config, Placement(stock_lookups=True))
    (shard,) = model.dynamic_tables["user"][0].shards
    manager, rng = CheckpointManager(str(root / "run")), np.random.default_rng(3)
    state = {"signature": model_signature(config, 1), "feature_columns": COLUMNS}
    today = hour_number(datetime.date.today())
    out, changed_rows = [], None
    for step, ids in enumerate(ADMITTED, start=1):
        if step == 2:
            changed_rows = _change_stack_rows(model, rng)
        if step == 3:
            _evict_and_train_dense(model, shard, today)
        _admit(shard, ids, today, rng)
        manager.save(tf.train.Checkpoint(model=model), step, state)
        out.append(str(root / "exports" / str(step)))
        export_model(config, str(root / "run"), out[-1])
    return {"root": root, "exports": out, "changed_rows": changed_rows}


@pytest.fixture(scope="module")
def deltas(exports):
    """The deltas from each export to the next: (directory, DeltaSummary)."""
    root, (e1, e2, e3) = exports["root"], exports["exports"]
    d2 = write_delta(export_tensors(e1), e2, str(root / "deltas" / "2"))
    d3 = write_delta(chain_tensors(e1, [d2.out_dir]), e3, str(root / "deltas" / "3"))
    return [(d2.out_dir, d2), (d3.out_dir, d3)]


def _request() -> dict[str, tf.Tensor]:
    rng = np.random.default_rng(11)
    users = [*ADMITTED[0], *ADMITTED[1], *ADMITTED[2], 31337]
    n = REQUEST_ROWS
    lengths = rng.integers(0, 5, n)
    return {
        "I1": tf.constant(rng.lognormal(size=n).astype(np.float32)),
        "I5": tf.constant(rng.lognormal(size=n).astype(np.float32)),
        **{c: tf.constant(rng.integers(0, 10**6, n)) for c in ("C3", "C4", "C2", "C17")},
        "C21": tf.constant([f"s{i}".encode() for i in rng.integers(0, 50, n)]),
        "user_id": tf.constant(np.resize(users, n).astype(np.int64)),
        "tags": tf.constant(rng.integers(0, 1000, (n, 4)) * (np.arange(4) < lengths[:, None])),
        "tags_lengths": tf.constant(lengths.astype(np.int64)),
    }


def _predict(export_dir: str) -> np.ndarray:
    loaded = tf.saved_model.load(export_dir)
    return loaded.signatures["serving_default"](**_request())["click"].numpy()


def _key(tensors: dict, suffix: str) -> str:
    (key,) = [k for k in tensors if k.endswith(suffix)]
    return key


def _exact(a: np.ndarray) -> tuple:
    """What two equal tensors share exactly: dtype, shape and bytes (strings: their items)."""
    return a.dtype, a.shape, a.tolist() if a.dtype == object else a.tobytes()


def _as_map(tensors: dict) -> dict:
    keys, values = tensors[_key(tensors, "-keys")], tensors[_key(tensors, "-values")]
    return dict(zip(keys.tolist(), values.tolist()))


# ---- real exports --------------------------------------------------------------------------
def test_export_tensors_name_the_hash_table_by_keys_and_values(exports):
    tensors = export_tensors(exports["exports"][0])
    assert _key(tensors, "-keys") == "id_tables/0/.ATTRIBUTES/table-keys"
    assert _key(tensors, "-values") == "id_tables/0/.ATTRIBUTES/table-values"
    assert _as_map(tensors) == {5: 0, 17: 1, 99: 2, 4242: 3}
    graph = tensors["_CHECKPOINTABLE_OBJECT_GRAPH"]
    assert graph.dtype == object and graph.shape == () and isinstance(graph.item(), bytes)
    assert [k for k, v in tensors.items() if v.shape == (4, 8)] != []  # the user rows


def test_a_delta_of_ten_percent_of_the_rows_stores_those_rows_only(exports, deltas):
    e1, e2, _ = exports["exports"]
    directory, summary = deltas[0]
    old, new = export_tensors(e1), export_tensors(e2)
    stack = next(k for k, v in new.items() if v.shape == (STACK_ROWS, 8))
    user_rows = next(k for k, v in new.items() if v.shape == (6, 8))
    assert summary.tensors[stack] == TensorChange(ROWS, CHANGED_ROWS, STACK_ROWS)
    assert summary.tensors[user_rows] == TensorChange(ROWS, 2, 6)  # 2 ids appended
    assert summary.tensors[_key(new, "-keys")] == TensorChange(TABLE, 2, 6)
    kinds = {c.how for k, c in summary.tensors.items() if k not in (stack, user_rows)}
    assert kinds <= {SAME, TABLE, FULL}
    full = [k for k, c in summary.tensors.items() if c.how == FULL]
    assert all(old[k].ndim < 2 for k in full), full  # next_row and the like
    delta = read_delta(directory)
    tag = delta.entries[stack]["data"]
    np.testing.assert_array_equal(delta.arrays[f"{tag}_indices"], exports["changed_rows"])
    assert delta.arrays[f"{tag}_values"].shape == (CHANGED_ROWS, 8)
    stored = (pathlib.Path(directory) / "tensors.npz").stat().st_size
    variables = sum(p.stat().st_size for p in (pathlib.Path(e2) / "variables").iterdir())
    assert stored < 0.2 * variables, (stored, variables)
    files = sorted(str(p.relative_to(directory)) for p in pathlib.Path(directory).rglob("*"))
    assert files == [
        "assets.extra",
        "assets.extra/export.json",
        "delta.json",
        "saved_model.pb",
        "tensors.npz",
    ]
    assert summary.bytes_written == sum(
        p.stat().st_size for p in pathlib.Path(directory).rglob("*") if p.is_file()
    )
    assert sorted(p.name for p in pathlib.Path(directory).parent.iterdir()) == ["2", "3"]


def test_the_chain_serves_exactly_as_the_full_export_of_the_last_state(exports, deltas):
    e1, e2, e3 = exports["exports"]
    root = exports["root"]
    (d2, _), (d3, summary) = deltas
    chained, full = chain_tensors(e1, [d2, d3]), export_tensors(e3)
    user_rows = next(k for k, v in full.items() if v.shape == (5, 8))
    # rows 1-4 hold other ids after the eviction; 777 has the last row
    assert summary.tensors[user_rows] == TensorChange(ROWS, 4, 5)
    # 99, 123 and 456 moved, 777 is new, 17 and 4242 were evicted
    assert summary.tensors[_key(summary.tensors, "-keys")] == TensorChange(TABLE, 6, 5)
    assert _as_map(chained) == _as_map(full) == {5: 0, 99: 1, 123: 2, 456: 3, 777: 4}
    assert sorted(chained) == sorted(full) and chained[user_rows].shape == (5, 8)
    for key in full:
        if not key.endswith(("-keys", "-values")):
            assert _exact(chained[key]) == _exact(full[key]), key
    write_chain(e1, [d2, d3], str(root / "chain"))
    write_chain(e1, [d2], str(root / "chain2"))
    expected = _predict(e3)
    np.testing.assert_array_equal(_predict(str(root / "chain")), expected)
    np.testing.assert_array_equal(_predict(str(root / "chain2")), _predict(e2))
    assert np.abs(_predict(e1) - expected).max() > 1e-3  # the deltas matter
    info = json.loads((root / "chain" / "assets.extra" / "export.json").read_text())
    assert info["step"] == 3
    # the chain's fingerprint is its own: the serving graph's hashes are the export's, the
    # checkpoint's differs (the hash table's keys are in another order)
    chain, export = (
        tf.saved_model.experimental.read_fingerprint(d) for d in (str(root / "chain"), e3)
    )
    assert chain.saved_model_checksum == export.saved_model_checksum
    assert chain.signature_def_hash == export.signature_def_hash
    assert not list(root.glob("chain*.tmp-*"))


def test_a_chain_without_deltas_is_the_base(exports):
    e1 = exports["exports"][0]
    out = str(exports["root"] / "chain0")
    write_chain(e1, [], out)
    np.testing.assert_array_equal(_predict(out), _predict(e1))


def test_deltas_to_and_from_s3(exports, s3_server):
    e1, e2, _ = exports["exports"]
    remote = f"s3://{s3_server['bucket']}/delta-test"
    summary = write_delta(export_tensors(e1), e2, f"{remote}/deltas/2")
    listing = s3_server["client"].list_objects_v2(Bucket=s3_server["bucket"], Prefix="delta-test")
    names = sorted(o["Key"].split("/deltas/2/")[1] for o in listing["Contents"])
    assert names == ["assets.extra/export.json", "delta.json", "saved_model.pb", "tensors.npz"]
    assert summary.bytes_written > 0
    write_chain(e1, [f"{remote}/deltas/2"], f"{remote}/chain")
    tensors, full = export_tensors(f"{remote}/chain"), export_tensors(e2)
    assert _as_map(tensors) == _as_map(full)
    assert all(_exact(tensors[k]) == _exact(full[k]) for k in full if "table-" not in k)


# ---- refusals ------------------------------------------------------------------------------
def test_a_base_that_is_not_an_export_is_refused(tmp_path):
    (tmp_path / "base").mkdir()
    with pytest.raises(DeltaError, match=r"/base: not an export \(it has no saved_model.pb, "):
        write_chain(str(tmp_path / "base"), [], str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_a_delta_without_delta_json_is_refused(exports, deltas, tmp_path):
    broken = tmp_path / "cut"
    shutil.copytree(deltas[0][0], broken)
    (broken / "delta.json").unlink()
    with pytest.raises(DeltaError, match=r"/cut: not a delta \(it has no delta.json\)"):
        write_chain(exports["exports"][0], [str(broken)], str(tmp_path / "out"))
    (broken / "delta.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(DeltaError, match=r"delta.json is not a 'recsys_dist export delta, ver"):
        read_delta(str(broken))


def test_deltas_out_of_order_are_refused(exports, deltas, tmp_path):
    e1 = exports["exports"][0]
    with pytest.raises(DeltaError, match=r"/deltas/3: tensor '.*' is \w+ \[4(, 8)?\] in the "):
        write_chain(e1, [deltas[1][0]], str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_rows_past_the_old_row_count_are_refused(exports, deltas, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(deltas[0][0], broken)
    delta = read_delta(str(broken))
    stack = next(k for k, e in delta.entries.items() if e.get("old_shape") == [STACK_ROWS, 8])
    indices = delta.arrays[f"{delta.entries[stack]['data']}_indices"]
    indices[-1] = STACK_ROWS + 5
    Delta(delta.entries, delta.arrays).save(str(broken))
    with pytest.raises(DeltaError, match=r"/broken: the rows of '.*' name row 6805 .* first 6800"):
        apply_deltas(export_tensors(exports["exports"][0]), str(broken))


def test_an_out_dir_that_is_not_empty_is_refused(exports, tmp_path):
    e1 = exports["exports"][0]
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(DeltaError, match="/full: exists and is not empty"):
        write_delta({}, e1, str(tmp_path / "full"))
    with pytest.raises(DeltaError, match="/full/x: exists and is not a directory"):
        write_chain(e1, [], str(tmp_path / "full" / "x"))
    with pytest.raises(DeltaError, match=r"/none: not an export \(it has no saved_model.pb"):
        export_tensors(str(tmp_path / "none"))


# ---- the diff and apply on NumPy dicts -----------------------------------------------------
def _round_trip(old: dict, new: dict, tmp_path: pathlib.Path) -> Delta:
    """The delta from ``old`` to ``new``, saved and read back; checks it makes ``new``."""
    delta = diff_tensors(old, new)
    tmp_path.mkdir(exist_ok=True)
    delta.save(str(tmp_path))
    read = read_delta(str(tmp_path))
    assert read.entries == delta.entries
    out = apply_delta(old, read)
    assert sorted(out) == sorted(new)
    for key, value in new.items():
        if "-keys" not in key and "-values" not in key:
            assert _exact(out[key]) == _exact(value), key
    return read


def test_each_kind(tmp_path):
    rng = np.random.default_rng(0)
    old = {
        "emb": rng.normal(size=(10, 4)).astype(np.float32),
        "shrinks": np.arange(12, dtype=np.int32).reshape(6, 2),
        "bias": np.array([0.5, 1.0], np.float32),
        "kernel": np.ones((3, 4, 2), np.float64),
        "wider": np.zeros((2, 3), np.float32),
        "same": np.arange(4),
        "gone": np.zeros(3),
        "t/table-keys": np.array([5, 7, 9, 11], np.int64),
        "t/table-values": np.array([0, 1, 2, 3], np.int64),
    }
    new = {k: v.copy() for k, v in old.items() if k != "gone"}
    new["emb"] = np.concatenate([old["emb"], np.ones((2, 4), np.float32)])
    new["emb"][[3, 8], 1] += 1
    new["shrinks"] = old["shrinks"][:3].copy()
    new["shrinks"][0, 0] = 99
    new["bias"][1] = 2.0
    new["kernel"][1, 2, 0] = 3.0
    new["wider"] = np.zeros((2, 4), np.float32)
    new["fresh"] = np.ones(2, np.float16)
    new["t/table-keys"] = np.array([13, 11, 9, 5], np.int64)  # 7 gone, 13 new, 9 changed
    new["t/table-values"] = np.array([4, 3, 20, 0], np.int64)
    delta = _round_trip(old, new, tmp_path)
    summary = delta.summary()
    assert summary == {
        "emb": TensorChange(ROWS, 4, 12),
        "shrinks": TensorChange(ROWS, 1, 3),
        "bias": TensorChange(FULL, 2, 2),
        "kernel": TensorChange(FULL, 3, 3),
        "wider": TensorChange(FULL, 2, 2),
        "same": TensorChange(SAME, 0, 4),
        "gone": TensorChange(REMOVED, 3, 0),
        "fresh": TensorChange(NEW, 2, 2),
        "t/table-keys": TensorChange(TABLE, 3, 4),
        "t/table-values": TensorChange(TABLE, 3, 4),
    }
    tag = delta.entries["emb"]["data"]
    np.testing.assert_array_equal(delta.arrays[f"{tag}_indices"], [3, 8])
    assert delta.arrays[f"{tag}_appended"].shape == (2, 4)
    tag = delta.entries["t/table-keys"]["data"]
    assert dict(zip(delta.arrays[f"{tag}_keys"], delta.arrays[f"{tag}_values"])) == {13: 4, 9: 20}
    np.testing.assert_array_equal(delta.arrays[f"{tag}_removed"], [7])
    out = apply_delta(old, delta)
    assert dict(zip(out["t/table-keys"].tolist(), out["t/table-values"].tolist())) == {
        5: 0,
        9: 20,
        11: 3,
        13: 4,
    }


def test_a_table_in_another_order_is_the_same(tmp_path):
    old = {"a-keys": np.array([3, 1, 2]), "a-values": np.array([[0.0], [2.0], [3.0]])}
    new = {"a-keys": np.array([1, 2, 3]), "a-values": np.array([[2.0], [3.0], [0.0]])}
    delta = _round_trip(old, new, tmp_path)
    assert {c.how for c in delta.summary().values()} == {SAME}
    new["a-values"][2, 0] = -0.0
    assert diff_tensors(old, new).summary()["a-keys"] == TensorChange(TABLE, 1, 3)


def test_comparison_is_bitwise(tmp_path):
    nan = np.float32(np.nan)
    other_nan = np.array([0x7FC00001], np.uint32).view(np.float32)[0]
    old = {"rows": np.array([[0.0, nan], [1.0, nan], [2.0, 2.0]], np.float32)}
    new = {"rows": np.array([[-0.0, nan], [1.0, other_nan], [2.0, 2.0]], np.float32)}
    delta = _round_trip(old, new, tmp_path / "1")
    assert delta.summary()["rows"] == TensorChange(ROWS, 2, 3)
    out = apply_delta(old, delta)["rows"]
    assert np.signbit(out[0, 0]) and out.view(np.uint32)[1, 1] == 0x7FC00001
    same = {"rows": old["rows"].copy(), "scalar": np.float64(np.nan) * np.ones(())}
    assert diff_tensors(same, {k: v.copy() for k, v in same.items()}).summary() == {
        "rows": TensorChange(SAME, 0, 3),
        "scalar": TensorChange(SAME, 0, 1),
    }
    flipped = {"rows": same["rows"], "scalar": -same["scalar"]}
    assert diff_tensors(same, flipped).summary()["scalar"] == TensorChange(FULL, 1, 1)


def test_strings_and_bfloat16_are_stored_without_pickles(tmp_path):
    bf16 = tf.bfloat16.as_numpy_dtype
    old = {
        "graph": np.array(b"proto\x00", object),
        "names": np.array([[b"a", b""], [b"c\x00", b"d"]], object),
        "half": np.ones((3, 2), bf16),
    }
    new = {
        "graph": np.array(b"proto\x00\x00", object),
        "names": np.array([[b"a", b"\x00"], [b"c\x00", b"e"]], object),
        "half": np.concatenate([np.ones((2, 2), bf16), np.full((2, 2), 3, bf16)]),
    }
    delta = _round_trip(old, new, tmp_path)
    assert delta.summary() == {
        "graph": TensorChange(FULL, 1, 1),
        "names": TensorChange(FULL, 2, 2),
        "half": TensorChange(ROWS, 2, 4),
    }
    assert all(a.dtype != object for a in delta.arrays.values())
    with np.load(tmp_path / "tensors.npz", allow_pickle=False) as stored:
        assert len(stored.files) == len(delta.arrays)


def test_a_delta_that_does_not_fit_is_refused(tmp_path):
    old = {"t-keys": np.array([1, 2]), "t-values": np.array([10, 20]), "w": np.zeros((2, 2))}
    new = {"t-keys": np.array([1]), "t-values": np.array([10]), "w": np.ones((3, 2))}
    delta = diff_tensors(old, new)
    with pytest.raises(DeltaError, match=r"d1: the hash table 't-keys' removes key\(s\) \[2\]"):
        apply_delta({**old, "t-keys": np.array([1, 3])}, delta, "d1")
    with pytest.raises(DeltaError, match=r"d1: tensor 'w' is float64 \[4, 2\] in the tensors"):
        apply_delta({**old, "w": np.zeros((4, 2))}, delta, "d1")
    with pytest.raises(
        DeltaError, match=r"d1: tensor 'w' is missing in the tensors .* from float64 \[2, 2\]"
    ):
        apply_delta({k: v for k, v in old.items() if k != "w"}, delta, "d1")
    with pytest.raises(DeltaError, match=r"d1: the tensors it is applied to hold \['x'\], which"):
        apply_delta({**old, "x": np.zeros(1)}, delta, "d1")
    odd = {**delta.entries, "w": {**delta.entries["w"], "kind": "odd"}}
    with pytest.raises(DeltaError, match="d1: tensor 'w' changed by an unknown kind 'odd'"):
        apply_delta(old, Delta(odd, delta.arrays), "d1")
    with pytest.raises(DeltaError, match=r"d1: tensors.npz or delta.json lacks 't\d_\w+'"):
        apply_delta(old, Delta(delta.entries, {}), "d1")
    added = diff_tensors({}, {"x": np.zeros(1)})
    with pytest.raises(DeltaError, match="d1: adds tensor 'x', which the tensors it is applied"):
        apply_delta({"x": np.zeros(1)}, added, "d1")
