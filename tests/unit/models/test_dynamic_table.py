"""Dynamic tables (``kind: dynamic``) in one process: config, admission, capacity,
gradients, checkpoints, warm start. Covers ``models/dynamic_table.py``, the lookup of
ids to rows before the gradient tape (``models/dynamic_lookup.py``) and the checkpoints
of rows in use (``models/rows_in_use.py``).
``tests/cluster/test_dynamic_tables.py`` trains them on real servers."""

from __future__ import annotations

import datetime
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import yaml

from recsys_dist.config.model_params import WideDeepParams
from recsys_dist.errors import ConfigError
from recsys_dist.features.config import TableSpec, load_feature_config
from recsys_dist.models.dynamic_table import DynamicTable, ModelTables, hour_number
from recsys_dist.models.embedding import FeatureEmbeddings
from recsys_dist.models.sharding import Placement
from recsys_dist.models.zoo import MODELS, build_model


def dynamic_spec(capacity: int = 8, admit_after: int = 1) -> TableSpec:
    return TableSpec(
        name="user", dim=4, kind="dynamic", capacity_per_shard=capacity, admit_after=admit_after
    )


def keys(*values: int) -> tf.Tensor:
    return tf.constant(values, tf.int64)


# ---- the feature config ----------------------------------------------------------------
FEATURES = {
    "tables": {
        "user": {"kind": "dynamic", "dim": 4, "capacity_per_shard": 100},
        "small": {"rows": 10, "dim": 4},
    },
    "features": {
        "user_id": {"kind": "categorical", "dtype": "int64", "table": "user"},
        "C2": {"kind": "categorical", "dtype": "int64", "table": "small"},
    },
    "labels": {"click": {}},
}


def write_features(tmp_path, change) -> str:
    doc = yaml.safe_load(yaml.safe_dump(FEATURES))
    change(doc)
    path = tmp_path / "features.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_a_dynamic_table_parses(tmp_path):
    config = load_feature_config(write_features(tmp_path, lambda doc: None))
    assert config.tables["user"].dynamic and config.tables["user"].admit_after == 1
    assert not config.tables["small"].dynamic


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda d: d["tables"]["user"].update(rows=5),
            r"tables\.user\.rows.*does not apply to kind: dynamic",
        ),
        (
            lambda d: d["tables"]["user"].pop("capacity_per_shard"),
            r"tables\.user\.capacity_per_shard.*missing required key",
        ),
        (
            lambda d: d["tables"]["user"].update(admit_after=0),
            r"tables\.user\.admit_after.*expected a value >= 1",
        ),
        (
            lambda d: d["tables"]["user"].update(evict_after_days=0),
            r"tables\.user\.evict_after_days.*expected a value >= 1",
        ),
        (
            lambda d: d["tables"]["small"].update(evict_after_days=30),
            r"tables\.small\.evict_after_days.*only applies to kind: dynamic",
        ),
        (
            lambda d: d["tables"]["small"].update(capacity_per_shard=5),
            r"tables\.small\.capacity_per_shard.*only applies to kind: dynamic",
        ),
        (lambda d: d["tables"]["small"].pop("rows"), r"tables\.small\.rows.*missing required key"),
        (
            lambda d: d["features"].update(
                I1={
                    "kind": "numeric",
                    "transform": "bucketize",
                    "boundaries": [1.0, 2.0],
                    "table": "user",
                }
            ),
            r"features\.I1\.table.*'user' is kind: dynamic, but numeric feature values are floats",
        ),
        (
            lambda d: d["features"]["user_id"].update(hash_buckets=50),
            r"features\.user_id\.hash_buckets.*does not apply to a feature of dynamic table 'user'",
        ),
    ],
)
def test_a_bad_dynamic_table_is_named(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message):
        load_feature_config(write_features(tmp_path, change))


# ---- the table in one process ----------------------------------------------------------
def test_admission_after_two_batches_then_a_row_each():
    table = DynamicTable(dynamic_spec(admit_after=2), 4, shards=2, seed=0)
    first = table.lookup(keys(1, 2, 3, 2), training=True)
    np.testing.assert_array_equal(first.numpy(), 0.0)  # seen once: not admitted yet
    assert table.stats()["counted_not_admitted"] == 3
    second = table.lookup(keys(1, 2, 3), training=True)
    assert np.all(np.abs(second.numpy()).sum(axis=1) > 0)
    stats = table.stats()
    assert (stats["live_ids"], stats["counted_not_admitted"]) == (3, 0)  # counts trimmed
    np.testing.assert_array_equal(
        table.lookup(keys(3, 1, 2)).numpy(), tf.gather(second, [2, 0, 1]).numpy()
    )


def test_evaluation_neither_inserts_nor_counts():
    table = DynamicTable(dynamic_spec(), 4, shards=2, seed=0)
    np.testing.assert_array_equal(table.lookup(keys(5, 6)).numpy(), 0.0)
    assert table.stats()["live_ids"] == 0 and table.stats()["lookups_without_row"] == 0


def test_a_full_shard_refuses_ids_counts_them_and_reads_zeros():
    table = DynamicTable(dynamic_spec(capacity=3), 4, shards=1, seed=0)
    vectors = table.lookup(keys(*range(10, 15)), training=True).numpy()
    rows_with_vectors = int(np.sum(np.abs(vectors).sum(axis=1) > 0))
    stats = table.stats()
    assert (rows_with_vectors, stats["live_ids"], stats["dropped_full"]) == (3, 3, 2)
    assert stats["fullest_shard"] == 1.0


def test_only_rows_with_an_id_get_a_gradient():
    table = DynamicTable(dynamic_spec(capacity=2), 4, shards=1, seed=0)

    @tf.function
    def grads(k):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(table.lookup(k, training=True))
        return tape.gradient(loss, table.embedding_variables)[0]

    grad = grads(keys(1, 2, 3, 1))  # 3 is refused: the shard holds 2 rows
    assert isinstance(grad, tf.IndexedSlices)
    assert sorted(set(grad.indices.numpy().tolist())) == [0, 1]


STEP_SCRIPT = """
import tensorflow as tf
from recsys_dist.features.config import TableSpec
from recsys_dist.models.dynamic_lookup import lookup_tables
from recsys_dist.models.dynamic_table import DynamicTable, ShardGroup

spec = TableSpec(name="t", dim=4, kind="dynamic", capacity_per_shard=50)
layers = []
for layer in ("a", "b"):  # two layers (a model's embeddings and its linear part)
    group = ShardGroup([None, None])
    layers.append([DynamicTable(spec, 4, 2, seed=i, name=f"{layer}{i}", group=group)
                   for i in range(2)])
keys = tf.constant([1, 2, 3, 4, 5, 1], tf.int64)

@tf.function
def step():
    with tf.GradientTape() as tape:
        loss = tf.add_n([tf.reduce_sum(v) for tables in layers
                         for v in lookup_tables(tables, [keys, keys + 7], training=True)])
    variables = [v for tables in layers for t in tables for v in t.embedding_variables]
    return tape.gradient(loss, variables)

step()
print(sum(t.stats()["live_ids"] for tables in layers for t in tables))
"""


def test_a_step_over_several_groups_of_tables_and_shards_finishes():
    """Two shard groups admitting on the same servers in one tf.function (each call
    takes its indexes' mutexes one at a time, so they cannot deadlock; run in a
    subprocess, so a hang fails, not stalls)."""
    done = subprocess.run(
        [sys.executable, "-c", STEP_SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "20"  # 4 tables x 5 distinct keys


def test_every_id_lives_on_its_shard_with_a_row_of_its_own():
    table = DynamicTable(dynamic_spec(capacity=400), 4, shards=3, seed=0)
    ids = np.random.default_rng(0).integers(0, 2**62, 600)
    for chunk in np.array_split(ids, 6):
        table.lookup(tf.constant(chunk), training=True)
    for index, shard in enumerate(table.shards):
        stored, rows = (t.numpy() for t in shard.index.export())
        assert len(set(rows.tolist())) == len(rows) == int(shard.next_row.numpy())
        assert rows.max() < int(shard.next_row.numpy())
        assert np.all(table.shard_of(tf.constant(stored)).numpy() == index)
    assert table.stats()["live_ids"] == len(set(ids.tolist()))


def test_concurrent_training_steps_never_give_two_ids_one_row():
    """Steps on several threads, as a parameter server serves several workers: every
    admission update lands before the shard's lock is released, so each stored id keeps
    a row of its own and the row counter covers them all."""
    import threading

    table = DynamicTable(dynamic_spec(capacity=50_000), 4, shards=2, seed=0)

    @tf.function
    def step(batch):
        return table.lookup(batch, training=True)

    def worker(seed):
        rng = np.random.default_rng(seed)
        for _ in range(200):
            step(tf.constant(rng.integers(0, 2**62, 64)))

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for shard in table.shards:
        stored, rows = (t.numpy() for t in shard.index.export())
        assert len(set(rows.tolist())) == len(rows) == int(shard.next_row.numpy())
    assert table.stats()["live_ids"] == 4 * 200 * 64


def test_eviction_drops_unseen_ids_and_moves_the_others_with_their_slots():
    """Ids trained on day 1 only are dropped; those of day 2 keep their vectors and
    Adagrad accumulators in new rows at the front; freed rows restart; counts start over;
    a dropped id is admitted again as a new one."""
    table = DynamicTable(dynamic_spec(capacity=16, admit_after=1), 4, shards=2, seed=0)
    optimizer = tf.keras.optimizers.legacy.Adagrad(0.5, initial_accumulator_value=0.25)

    def train(ids, day):
        table.stamp_trained_rows(day)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(table.lookup(keys(*ids), training=True))
        optimizer.apply_gradients(
            zip(tape.gradient(loss, table.embedding_variables), table.embedding_variables)
        )

    day1, day2, day3 = (datetime.date(2026, 1, d) for d in (1, 2, 3))
    train(range(1, 9), day1)
    train(range(5, 13), day2)
    before = table.lookup(keys(*range(5, 13))).numpy()
    slots = {id(s): s for s in table.embedding_variables}
    accumulators = [optimizer.get_slot(v, "accumulator").numpy() for v in slots.values()]
    assert table.evict(day2, [optimizer]) == {"kept": 8, "evicted": 4}
    np.testing.assert_array_equal(table.lookup(keys(*range(5, 13))).numpy(), before)
    assert not table.lookup(keys(1, 2, 3, 4)).numpy().any()  # dropped: zeros
    for shard, old in zip(table.shards, accumulators):
        used = int(shard.next_row.numpy())
        stored, rows = (t.numpy() for t in shard.index.export())
        assert sorted(rows.tolist()) == list(range(used))
        assert set(stored.tolist()) <= set(range(5, 13))
        assert (shard.last_seen.numpy()[:used] == hour_number(day2)).all()
        assert (shard.last_seen.numpy()[used:] == 0).all()
        accumulator = optimizer.get_slot(shard.emb, "accumulator").numpy()
        assert (accumulator[used:] == 0.25).all() and (accumulator[:used] > 0.25).all()
        assert accumulator[:used].sum() <= old.sum()
    assert table.stats()["counted_not_admitted"] == 0
    train([1], day3)
    assert table.stats()["live_ids"] == 9


def _sharing_tables(capacity: int = 16, admit_after: int = 1, shards: int = 2):
    """A table's vectors (dim 4) and its linear weights (dim 1), as two layers of one
    model build them: the second shares the first one's id index."""
    from recsys_dist.models.dynamic_table import ModelTables

    spec = dynamic_spec(capacity=capacity, admit_after=admit_after)
    shared = ModelTables(Placement(dynamic_shards=shards))
    return (
        shared.dynamic_table(spec, 4, "random_uniform", 1, "deep_user"),
        shared.dynamic_table(spec, 1, "random_uniform", 2, "wide_user"),
    )


def test_layers_that_read_one_table_share_its_id_index():
    """Both layers' keys are resolved once together: an id counts once per batch toward
    admission, gets one row in every layer, and each layer gathers its own vector."""
    from recsys_dist.models.dynamic_lookup import lookup_tables

    deep, wide = _sharing_tables(admit_after=2)
    assert wide.index_owner is deep and deep.index_owner is deep
    for a, b in zip(deep.shards, wide.shards):
        assert a.index is b.index and a.counts is b.counts and a.next_row is b.next_row
        assert a.emb is not b.emb
    with tf.GradientTape() as tape:
        # 3 appears in both layers' keys of one batch: one sighting, not two
        vectors = lookup_tables([deep, wide], [keys(1, 2, 3), keys(3, 4)], training=True)
        assert deep.stats()["live_ids"] == 0
        vectors = lookup_tables([deep, wide], [keys(3, 6, 7), keys(3, 4, 5)], training=True)
        loss = tf.add_n([tf.reduce_sum(v) for v in vectors])
    assert [v.shape.as_list() for v in vectors] == [[3, 4], [3, 1]]
    assert deep.stats()["live_ids"] == wide.stats()["live_ids"] == 2  # 3 and 4: 2 batches
    assert vectors[0][0].numpy().all() and not vectors[0][1:].numpy().any()
    assert vectors[1][:2].numpy().all() and not vectors[1][2].numpy().any()
    gradients = tape.gradient(loss, deep.embedding_variables + wide.embedding_variables)
    assert all(isinstance(g, tf.IndexedSlices) for g in gradients if g is not None)
    for key in (3, 4):  # one row per id, read by each layer from its own rows
        shard = int(deep.shard_of(keys(key)).numpy()[0])
        row = int(deep.shards[shard].index.lookup(keys(key)).numpy()[0])
        for table in (deep, wide):
            np.testing.assert_array_equal(
                table.lookup(keys(key)).numpy()[0], table.shards[shard].emb.numpy()[row]
            )


@pytest.mark.parametrize("in_function", [False, True])
def test_the_packed_lookup_gives_each_row_the_gradient_of_its_reads(in_function):
    """Vectors go to the worker packed per server and gradients come back packed: each
    layer's row of an id still gets the sum of the upstream gradients of every read."""
    from recsys_dist.models.dynamic_lookup import lookup_tables

    deep, wide = _sharing_tables(capacity=4)  # 2 shards of 4 rows: 8 fit, 9 and 10 refused
    batch = [keys(1, 2, 3, 1, 9, 5, 6), keys(3, 4, 7, 8, 3, 10)]
    lookup_tables([deep, wide], batch, training=True)  # admits every id that fits
    weights = [
        tf.random.stateless_normal([7, 4], [1, 2]),
        tf.random.stateless_normal([6, 1], [3, 4]),
    ]
    variables = deep.embedding_variables + wide.embedding_variables

    def step():
        with tf.GradientTape() as tape:
            vectors = lookup_tables([deep, wide], batch, training=True)
            loss = tf.add_n([tf.reduce_sum(w * v) for w, v in zip(weights, vectors)])
        return vectors, tape.gradient(loss, variables)

    vectors, gradients = tf.function(step)() if in_function else step()
    for t, (table, ids, w) in enumerate(zip((deep, wide), batch, weights)):
        expected = [np.zeros(v.shape, np.float32) for v in table.embedding_variables]
        for position, key in enumerate(ids.numpy()):
            shard = int(table.shard_of(keys(key)).numpy()[0])
            row = int(table.shards[shard].index.lookup(keys(key)).numpy()[0])
            if row < 0:  # refused: zeros, no gradient
                assert not vectors[t][position].numpy().any()
                continue
            np.testing.assert_array_equal(
                vectors[t][position].numpy(), table.shards[shard].emb.numpy()[row]
            )
            expected[shard][row] += w.numpy()[position]
        got = gradients[2 * t : 2 * t + 2]
        for shard, (g, want) in enumerate(zip(got, expected)):
            assert isinstance(g, tf.IndexedSlices)
            # an id is read at most twice per table here, and (0 + a) + b rounds as b + a:
            # the same float32 sums whatever order the kernels add the reads in
            np.testing.assert_allclose(
                tf.convert_to_tensor(g).numpy(),
                want,
                rtol=1e-6,
                err_msg=f"{table.name} shard {shard}",
            )
    assert deep.stats()["dropped_full"] > 0  # the refused ids were in the batch


def test_eviction_counts_hours_and_reads_day_stamps_as_their_first_hour():
    """Ids last trained at 10:00 are dropped by an eviction at 11:00 and those of 11:00
    kept; a row stamped with a day number (the unit of checkpoints that stamped days)
    counts as seen at that day's first hour."""
    table = DynamicTable(dynamic_spec(capacity=16), 4, shards=1, seed=0)
    at = datetime.datetime
    table.stamp_trained_rows(at(2026, 1, 2, 10))
    table.lookup(keys(1, 2), training=True)
    table.stamp_trained_rows(at(2026, 1, 2, 11))
    table.lookup(keys(3, 4), training=True)
    shard = table.shards[0]
    stored, rows = (t.numpy() for t in shard.index.export())
    row_of = dict(zip(stored.tolist(), rows.tolist()))
    day_stamp = (datetime.date(2026, 1, 2) - datetime.date(1970, 1, 1)).days
    shard.last_seen.scatter_update(
        tf.IndexedSlices(tf.constant([day_stamp], tf.int64), [row_of[4]])
    )
    assert table.evict(at(2026, 1, 2, 11), []) == {"kept": 1, "evicted": 3}
    assert table.lookup(keys(3)).numpy().any() and not table.lookup(keys(1, 2, 4)).numpy().any()
    table.stamp_trained_rows(at(2026, 1, 2, 12))
    table.lookup(keys(5), training=True)
    shard.last_seen.scatter_update(tf.IndexedSlices(tf.constant([day_stamp], tf.int64), [0]))
    assert table.evict(at(2026, 1, 2), []) == {"kept": 2, "evicted": 0}


def test_eviction_moves_the_rows_of_every_layer_that_shares_the_index():
    from recsys_dist.models.dynamic_table import evict_tables

    deep, wide = _sharing_tables()
    optimizer = tf.keras.optimizers.legacy.Adagrad(0.5, initial_accumulator_value=0.25)
    variables = deep.embedding_variables + wide.embedding_variables
    day1, day2 = datetime.date(2026, 1, 1), datetime.date(2026, 1, 2)
    for ids, day in ((range(1, 9), day1), (range(5, 13), day2)):
        deep.stamp_trained_rows(day)
        with tf.GradientTape() as tape:
            loss = tf.add_n(
                [tf.reduce_sum(t.lookup(keys(*ids), training=True)) for t in (deep, wide)]
            )
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    before = [t.lookup(keys(*range(5, 13))).numpy() for t in (deep, wide)]
    with pytest.raises(ValueError, match="wide_user shares the id index of deep_user"):
        wide.evict(day2, [optimizer])
    done = evict_tables([deep, wide], day2, [optimizer])
    assert done == {"deep_user": {"kept": 8, "evicted": 4}, "wide_user": {"kept": 8, "evicted": 4}}
    for table, vectors in zip((deep, wide), before):
        np.testing.assert_array_equal(table.lookup(keys(*range(5, 13))).numpy(), vectors)
        assert not table.lookup(keys(1, 2, 3, 4)).numpy().any()
        for shard in table.shards:
            used = int(shard.next_row.numpy())
            accumulator = optimizer.get_slot(shard.emb, "accumulator").numpy()
            assert (accumulator[used:] == 0.25).all() and (accumulator[:used] > 0.25).all()


def test_a_checkpoint_restores_keys_rows_and_counts_bit_exactly(tmp_path):
    table = DynamicTable(dynamic_spec(admit_after=2), 4, shards=2, seed=0)
    for batch in ([1, 2, 3], [2, 3, 4], [5]):
        table.lookup(tf.constant(batch, tf.int64), training=True)
    path = tf.train.Checkpoint(table=table).save(str(tmp_path / "ckpt"))
    again = DynamicTable(dynamic_spec(admit_after=2), 4, shards=2, seed=9)
    tf.train.Checkpoint(table=again).restore(path).assert_existing_objects_matched()
    assert again.stats() == table.stats()
    probe = keys(1, 2, 3, 4, 5, 77)
    np.testing.assert_array_equal(again.lookup(probe).numpy(), table.lookup(probe).numpy())
    for old, new in zip(table.shards, again.shards):
        assert sorted(zip(*(t.numpy().tolist() for t in old.counts.export()))) == sorted(
            zip(*(t.numpy().tolist() for t in new.counts.export()))
        )


def _trained_with_slots(seed: int, ids=()):
    """A 2-shard table of capacity 1,000 with Adagrad slots saved by rows in use, trained
    on ``ids`` once."""
    from recsys_dist.models.rows_in_use import save_slots_of_rows_in_use

    table = DynamicTable(dynamic_spec(capacity=1000), 4, shards=2, seed=seed)
    optimizer = tf.keras.optimizers.legacy.Adagrad(0.5, initial_accumulator_value=0.25)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(table.lookup(keys(*ids), training=True))
    optimizer.apply_gradients(
        zip(tape.gradient(loss, table.embedding_variables), table.embedding_variables)
    )
    save_slots_of_rows_in_use([table], [optimizer])
    return table, optimizer


def test_a_checkpoint_holds_only_the_rows_in_use(tmp_path):
    """Rows, their Adagrad slots and last-seen days are saved up to each shard's
    ``next_row``, not its capacity; a restore writes them back to the front and leaves the
    other rows as they were."""
    table, optimizer = _trained_with_slots(0, range(1, 12))
    prefix = tf.train.Checkpoint(table=table, optimizer=optimizer).save(str(tmp_path / "c"))
    shapes = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    for i, shard in enumerate(table.shards):
        used = int(shard.next_row.numpy())
        rows = {
            k: v
            for k, v in shapes.items()
            if f"shards/{i}/" in k and ("/emb/" in k or "/last_seen/" in k)
        }
        assert len(rows) == 3 and all(v[0] == used < 1000 for v in rows.values()), rows
    again, optimizer_again = _trained_with_slots(9, [500])  # one id: a row and a slot moved
    untouched = [
        (s.emb.numpy(), optimizer_again.get_slot(s.emb, "accumulator").numpy())
        for s in again.shards
    ]
    tf.train.Checkpoint(table=again, optimizer=optimizer_again).restore(
        prefix
    ).assert_existing_objects_matched()
    for old, new, (emb, slot) in zip(table.shards, again.shards, untouched):
        used = int(old.next_row.numpy())
        assert int(new.next_row.numpy()) == used
        for before, after, fresh in (
            (old.emb, new.emb, emb),
            (
                optimizer.get_slot(old.emb, "accumulator"),
                optimizer_again.get_slot(new.emb, "accumulator"),
                slot,
            ),
        ):
            np.testing.assert_array_equal(after.numpy()[:used], before.numpy()[:used])
            np.testing.assert_array_equal(after.numpy()[used:], fresh[used:])
        np.testing.assert_array_equal(new.last_seen.numpy()[:used], old.last_seen.numpy()[:used])
    probe = keys(*range(1, 12), 500)
    np.testing.assert_array_equal(again.lookup(probe).numpy(), table.lookup(probe).numpy())


def test_a_checkpoint_restores_into_another_capacity_the_rows_in_use_fit(tmp_path):
    """Resuming, evaluating or exporting with capacity_per_shard raised (or lowered while
    the rows in use still fit) restores every row; below them, the table and shard are
    named with the capacity needed."""
    from recsys_dist.checkpoint.restore import restore
    from recsys_dist.checkpoint.store import CheckpointError

    table = DynamicTable(dynamic_spec(capacity=16, admit_after=1), 4, shards=2, seed=0)
    table.lookup(keys(*range(1, 12)), training=True)
    prefix = tf.train.Checkpoint(table=table).save(str(tmp_path / "c"))
    used = [int(s.next_row.numpy()) for s in table.shards]
    probe = keys(*range(1, 12), 500)
    for capacity in (64, max(used)):
        again = DynamicTable(dynamic_spec(capacity=capacity, admit_after=1), 4, shards=2, seed=9)
        restore(tf.train.Checkpoint(table=again), prefix)
        assert again.shards[0].emb.shape[0] == capacity
        np.testing.assert_array_equal(again.lookup(probe).numpy(), table.lookup(probe).numpy())
    fullest = int(np.argmax(used))
    small = DynamicTable(dynamic_spec(capacity=max(used) - 1, admit_after=1), 4, shards=2, seed=9)
    with pytest.raises(CheckpointError) as error:
        restore(tf.train.Checkpoint(table=small), prefix)
    assert str(error.value) == (
        f"{prefix}: dynamic table 'user' holds {max(used)} rows in use on shard {fullest} in "
        f"the checkpoint, more than its capacity_per_shard {max(used) - 1} now; raise "
        f"tables.user.capacity_per_shard to at least {max(used)}"
    )


def test_a_checkpoint_that_holds_every_row_still_restores(tmp_path):
    """Checkpoints written before rows were saved by use hold the whole capacity."""
    table = DynamicTable(dynamic_spec(capacity=1000), 4, shards=2, seed=0)
    table.lookup(keys(*range(1, 12)), training=True)
    for shard in table.shards:  # back to TensorFlow's own hooks: every row saved
        for variable in (shard.emb, shard.last_seen):
            del variable._serialize_to_tensors, variable._restore_from_tensors
    prefix = tf.train.Checkpoint(table=table).save(str(tmp_path / "c"))
    assert [1000, 4] in tf.train.load_checkpoint(prefix).get_variable_to_shape_map().values()
    again = DynamicTable(dynamic_spec(capacity=1000), 4, shards=2, seed=9)
    tf.train.Checkpoint(table=again).restore(prefix).assert_existing_objects_matched()
    for old, new in zip(table.shards, again.shards):
        np.testing.assert_array_equal(new.emb.numpy(), old.emb.numpy())


def _warm(tmp_path, table, live):
    from recsys_dist.checkpoint.warm_start import warm_start

    prefix = tf.train.Checkpoint(table=table).save(str(tmp_path / "ckpt"))
    return warm_start(tf.train.Checkpoint(table=live), prefix, [], {}, [], source="yesterday")


def test_a_warm_start_keeps_every_id_row_and_may_grow_the_capacity(tmp_path):
    table = DynamicTable(dynamic_spec(capacity=8), 4, shards=2, seed=0)
    table.lookup(keys(*range(10)), training=True)
    bigger = DynamicTable(dynamic_spec(capacity=20), 4, shards=2, seed=3)
    report = _warm(tmp_path, table, bigger)
    assert any("dynamic table user shard 0" in line for line in report.restored)
    np.testing.assert_array_equal(
        bigger.lookup(keys(*range(10))).numpy(), table.lookup(keys(*range(10))).numpy()
    )
    bigger.lookup(keys(100), training=True)  # a new id takes the next free row
    assert bigger.stats()["live_ids"] == 11


@pytest.mark.parametrize("before, after", [(2, 3), (3, 1)])
def test_a_warm_start_into_another_number_of_shards_moves_every_id_to_its_shard(
    tmp_path, before, after
):
    """Every id lands on its new shard with its vector, Adagrad accumulator and last-seen
    day, in a row of its own; ids waiting for admission keep their counts."""
    from recsys_dist.checkpoint.warm_start import WarmStartError, warm_start

    table = DynamicTable(dynamic_spec(capacity=40, admit_after=2), 4, shards=before, seed=0)
    optimizer = tf.keras.optimizers.legacy.Adagrad(0.5, initial_accumulator_value=0.25)
    table.stamp_trained_rows(datetime.date(2026, 1, 5))
    ids = keys(*range(30))
    for batch in (ids, ids, keys(100, 101)):  # 0..29 admitted; 100, 101 counted once
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(table.lookup(batch, training=True) ** 2)
        optimizer.apply_gradients(
            zip(tape.gradient(loss, table.embedding_variables), table.embedding_variables)
        )
    prefix = tf.train.Checkpoint(table=table, optimizer=optimizer).save(str(tmp_path / "c"))
    live = DynamicTable(dynamic_spec(capacity=40, admit_after=2), 4, shards=after, seed=9)
    live_optimizer = tf.keras.optimizers.legacy.Adagrad(0.5, initial_accumulator_value=0.25)
    live_optimizer._create_all_weights(live.embedding_variables)
    report = warm_start(
        tf.train.Checkpoint(table=live, optimizer=live_optimizer),
        prefix,
        [],
        {},
        [live_optimizer],
        source="yesterday",
    )
    assert f"dynamic table user: re-sharded from {before} to {after} shards" in report.restored
    assert set(report.ignored) <= {"save_counter"}, report.ignored  # (tf.train.Checkpoint.save)
    np.testing.assert_array_equal(live.lookup(ids).numpy(), table.lookup(ids).numpy())

    def accumulators(t, opt):
        values = {}
        for shard in t.shards:
            stored, rows = (x.numpy() for x in shard.index.export())
            slot = opt.get_slot(shard.emb, "accumulator").numpy()
            values.update(
                {
                    int(k): (slot[r].tolist(), int(shard.last_seen.numpy()[r]))
                    for k, r in zip(stored, rows)
                }
            )
        return values

    assert accumulators(live, live_optimizer) == accumulators(table, optimizer)
    for index, shard in enumerate(live.shards):
        stored, rows = (x.numpy() for x in shard.index.export())
        assert sorted(rows.tolist()) == list(range(int(shard.next_row.numpy())))
        assert np.all(live.shard_of(tf.constant(stored)).numpy() == index)
    assert live.stats()["counted_not_admitted"] == 2
    live.lookup(keys(100), training=True)  # its second sighting: admitted
    assert live.stats()["live_ids"] == 31
    small = DynamicTable(dynamic_spec(capacity=5), 4, shards=after, seed=0)
    with pytest.raises(
        WarmStartError,
        match=r"dynamic table 'user' from yesterday puts "
        r"[\d,]+ ids on shard 0 of \d, more than "
        r"capacity_per_shard 5",
    ):
        warm_start(tf.train.Checkpoint(table=small), prefix, [], {}, [], source="yesterday")


@pytest.mark.parametrize("after", [2, 3])
def test_a_warm_start_keeps_every_layers_row_of_a_shared_index(tmp_path, after):
    """Both layers' vectors of every id survive a warm start (re-sharded or not), still
    at one row per id; a checkpoint that kept an index per layer is refused by name."""
    from recsys_dist.checkpoint.warm_start import WarmStartError, warm_start
    from recsys_dist.models.dynamic_lookup import lookup_tables

    deep, wide = _sharing_tables(capacity=40)
    ids = keys(*range(30))
    lookup_tables([deep, wide], [ids, ids[:20]], training=True)
    for table in (deep, wide):  # distinct values per row, to see any row move
        for shard in table.shards:
            shard.emb.assign(tf.random.normal(shard.emb.shape, seed=len(table.name)))
    prefix = tf.train.Checkpoint(deep=deep, wide=wide).save(str(tmp_path / "shared"))
    live_deep, live_wide = _sharing_tables(capacity=40, shards=after)
    warm_start(
        tf.train.Checkpoint(deep=live_deep, wide=live_wide), prefix, [], {}, [], source="yesterday"
    )
    for old, new in ((deep, live_deep), (wide, live_wide)):
        np.testing.assert_array_equal(new.lookup(ids).numpy(), old.lookup(ids).numpy())
    assert live_deep.stats()["live_ids"] == 30

    per_layer = [
        DynamicTable(dynamic_spec(capacity=40), d, 2, seed=0, name=n)
        for d, n in ((4, "deep_user"), (1, "wide_user"))
    ]
    for table, batch in zip(per_layer, (keys(1, 2), keys(2, 1))):  # other rows per layer
        table.lookup(batch, training=True)
    old_prefix = tf.train.Checkpoint(deep=per_layer[0], wide=per_layer[1]).save(
        str(tmp_path / "per_layer")
    )
    live_deep, live_wide = _sharing_tables(capacity=40, shards=after)
    with pytest.raises(
        WarmStartError,
        match=r"cannot warm start from yesterday: its dynamic "
        r"table 'user' keeps an id index per layer",
    ):
        warm_start(
            tf.train.Checkpoint(deep=live_deep, wide=live_wide),
            old_prefix,
            [],
            {},
            [],
            source="yesterday",
        )


def test_a_checkpoint_of_a_hashed_table_does_not_restore_into_a_dynamic_one(small_config, tmp_path):
    from recsys_dist.checkpoint.signature import check_signature, model_signature
    from recsys_dist.checkpoint.store import CheckpointError, SavedCheckpoint
    from recsys_dist.config import load_config

    hashed = load_config(small_config())
    features = yaml.safe_load(pathlib.Path(hashed.features.file).read_text())
    table = next(iter(features["tables"]))
    features["tables"][table] = {
        "kind": "dynamic",
        "dim": features["tables"][table]["dim"],
        "capacity_per_shard": 1000,
    }
    for feature in features["features"].values():
        if feature.get("table") == table:
            feature.pop("hash_buckets", None)
    dynamic_file = tmp_path / "dynamic_features.yaml"
    dynamic_file.write_text(yaml.safe_dump(features))
    dynamic = load_config(small_config(), [f"features={dynamic_file}"])
    saved = SavedCheckpoint(
        "/m/checkpoints/ckpt-000000000007", 7, {"signature": model_signature(hashed)}
    )
    with pytest.raises(
        CheckpointError,
        match=rf"table '{table}' is \d+ x \d+ in the "
        r"checkpoint but dynamic with capacity_per_shard",
    ):
        check_signature(saved, dynamic)
    saved = SavedCheckpoint(
        "/m/checkpoints/ckpt-000000000007", 7, {"signature": model_signature(dynamic)}
    )
    with pytest.raises(
        CheckpointError,
        match=rf"table '{table}' is dynamic .* in the "
        r"checkpoint but \d+ x \d+",
    ):
        check_signature(saved, hashed)
    check_signature(saved, dynamic)  # the same config: fine
    features["tables"][table]["capacity_per_shard"] = 5000
    dynamic_file.write_text(yaml.safe_dump(features))
    check_signature(saved, load_config(small_config(), [f"features={dynamic_file}"]))
    features["tables"][table]["dim"] += 1  # another dim is another table
    dynamic_file.write_text(yaml.safe_dump(features))
    with pytest.raises(
        CheckpointError,
        match=rf"table '{table}' is dynamic with "
        r"capacity_per_shard 1000 and dim \d+ in the "
        r"checkpoint but dynamic with capacity_per_shard "
        r"5000 and dim",
    ):
        check_signature(saved, load_config(small_config(), [f"features={dynamic_file}"]))
    earlier = model_signature(dynamic)
    del earlier["dynamic_index"]  # written before the layers shared one index per table
    with pytest.raises(
        CheckpointError,
        match=r"its dynamic tables keep one id index per "
        r"layer \(written by an earlier version",
    ):
        check_signature(
            SavedCheckpoint("/m/checkpoints/ckpt-000000000007", 7, {"signature": earlier}), dynamic
        )


def test_trained_rows_record_the_hour_they_were_last_seen():

    table = DynamicTable(dynamic_spec(capacity=4), 4, shards=1, seed=0)
    table.stamp_trained_rows(datetime.date(2026, 1, 2))
    table.lookup(keys(1, 2), training=True)
    table.stamp_trained_rows(datetime.datetime(2026, 1, 5, 13))
    table.lookup(keys(2), training=True)
    table.lookup(keys(1))  # evaluation: no update
    shard = table.shards[0]
    stored, rows = (t.numpy() for t in shard.index.export())
    seen = dict(zip(stored.tolist(), shard.last_seen.numpy()[rows].tolist()))
    assert seen == {
        1: hour_number(datetime.date(2026, 1, 2)),
        2: hour_number(datetime.datetime(2026, 1, 5, 13)),
    }
    assert hour_number(datetime.date(2026, 1, 2)) == 24 * 20455
    assert hour_number(datetime.datetime(2026, 1, 5, 13)) == 24 * 20458 + 13


def test_the_run_prints_each_table_and_warns_when_one_was_full():
    from recsys_dist.train.run import dynamic_table_lines

    stats = {
        "live_ids": 8,
        "capacity": 8,
        "dropped_full": 3,
        "lookups_without_row": 3,
        "counted_not_admitted": 0,
        "shards": 2,
    }
    lines = dynamic_table_lines({"embeddings_user": stats})
    assert lines[0].startswith("table    embeddings_user: 8 ids of capacity 8 (2 shards); ")
    admitted = dynamic_table_lines({"t": dict(stats, admitted_this_run=5)})[0]
    assert "8 ids of capacity 8 (2 shards), 5 admitted by this run; " in admitted
    assert lines[1] == (
        "warning  dynamic table embeddings_user is full: 3 ids were refused "
        "a row and read zeros; raise its capacity_per_shard (a resumed run, "
        "an evaluation, an export or a warm start takes the new capacity; "
        "checkpoints and exports hold the live rows only, so room costs "
        "memory on the servers alone)"
    )
    assert len(dynamic_table_lines({"t": dict(stats, dropped_full=0, fullest_shard=0.5)})) == 1
    nearly = dynamic_table_lines({"t": dict(stats, dropped_full=0, fullest_shard=0.93)})
    assert nearly[1].startswith(
        "warning  dynamic table t is nearly full: its fullest shard "
        "uses 93% of capacity_per_shard; raise it"
    )


# ---- one lock per server and one index per table for a whole model -----------------
INPUTS = {"wide": ["user_id", "C2"], "deep": ["user_id", "C2"]}


def _wide_deep(config, merged: bool, monkeypatch):
    """Wide & Deep with 2 shards per dynamic table; ``merged``: as built (its layers share
    the model's tables), else each layer's tables with a group and an index of their own."""
    placement = Placement(dynamic_shards=2)
    if merged:
        return build_model("wide_deep", config, INPUTS, ["click"], seed=3, placement=placement)

    def alone(self, table, dim, initializer, seed, name):
        shards = self.placement.dynamic_shards
        return DynamicTable(table, dim, shards, initializer, seed, name, placement=self.placement)

    with monkeypatch.context() as patched:
        patched.setattr(ModelTables, "dynamic_table", alone)
        return MODELS["wide_deep"](
            config, INPUTS, ["click"], params=WideDeepParams(), seed=3, placement=placement
        )


def _forward_in_training(model, batches):
    """A few forward passes in training mode (admission) through one traced function;
    returns the outputs, and the admission calls the function holds and the indexes
    they admit into."""

    @tf.function
    def forward(batch):
        return model(batch, training=True)["click"]

    outputs = [forward(batch).numpy() for batch in batches]
    graph = forward.get_concrete_function(batches[0]).graph
    admissions = [op for op in graph.get_operations() if op.type == "AdmitIds"]
    return outputs, (len(admissions), sum(op.get_attr("N") for op in admissions))


def test_one_admission_per_server_and_the_same_result(tmp_path, monkeypatch):
    """A model's dynamic tables share one shard group and one id index per table: a
    training step of Wide & Deep (a dynamic table in its wide part and in its tower)
    resolves both layers' ids once, in one admission call per server, with the same rows
    and outputs as each layer on its own."""
    config = load_feature_config(write_features(tmp_path, lambda doc: None))
    rng = np.random.default_rng(0)
    batches = [
        {
            "user_id": tf.constant(rng.integers(0, 40, 64), tf.int64),
            "C2": tf.constant(rng.integers(0, 10, 64), tf.int64),
        }
        for _ in range(4)
    ]
    merged = _wide_deep(config, merged=True, monkeypatch=monkeypatch)
    separate = _wide_deep(config, merged=False, monkeypatch=monkeypatch)
    layers = [m for m in merged._flatten_modules() if isinstance(m, FeatureEmbeddings)]
    assert len(layers) == 2 and layers[0].dynamic_tables_group is layers[1].dynamic_tables_group
    merged_out, merged_calls = _forward_in_training(merged, batches)
    separate_out, separate_calls = _forward_in_training(separate, batches)
    # 2 servers (x 2 layers on their own), each call admitting into one index
    assert (merged_calls, separate_calls) == ((2, 2), (4, 4))
    first, second = merged.dynamic_tables["user"]
    assert (
        first.index_owner is second.index_owner and first.shards[0].index is second.shards[0].index
    )
    for a, b in zip(merged_out, separate_out):
        np.testing.assert_array_equal(a, b)
    for name in ("user",):
        for a, b in zip(merged.dynamic_tables[name], separate.dynamic_tables[name]):
            assert a.stats()["live_ids"] == b.stats()["live_ids"] > 0
            for sa, sb in zip(a.shards, b.shards):
                ka, ra = (t.numpy() for t in sa.index.export())
                kb, rb = (t.numpy() for t in sb.index.export())
                assert dict(zip(ka, ra)) == dict(zip(kb, rb))


def test_layers_of_one_model_share_a_shard_group_only_on_the_same_servers():
    spec = dynamic_spec()
    shared = ModelTables(Placement(dynamic_shards=2))
    first = shared.dynamic_table(spec, 4, "random_uniform", 1, "a")
    assert shared.dynamic_table(spec, 1, "random_uniform", 2, "b").group is first.group
    assert first.group is shared.group and shared.group.devices == [None, None]
    with pytest.raises(
        ValueError,
        match=r"dynamic tables of one model on different "
        r"servers: \[None, None\] and \[None\]",
    ):
        DynamicTable(spec, 4, shards=1, group=shared.group)
    other = ModelTables(Placement(dynamic_shards=2))  # another model's: another group
    assert other.dynamic_table(spec, 4, "random_uniform", 1, "a").group is not first.group


def test_passes_after_the_first_neither_count_nor_admit():
    table = DynamicTable(dynamic_spec(admit_after=2), 4, shards=2, seed=0)
    table.lookup(keys(1, 2), training=True)  # a run's first pass: 1 and 2 seen once
    table.count_sightings(False)  # a later pass reads the same rows again
    again = table.lookup(keys(1, 2, 3), training=True)
    np.testing.assert_array_equal(again.numpy(), 0.0)
    stats = table.stats()
    assert (stats["live_ids"], stats["counted_not_admitted"]) == (0, 2)  # 3 not counted
    table.count_sightings(True)  # the next run's first pass counts again
    admitted = table.lookup(keys(1, 3), training=True)
    assert np.abs(admitted.numpy()[0]).sum() > 0 and np.all(admitted.numpy()[1] == 0)
    stats = table.stats()
    assert (stats["live_ids"], stats["counted_not_admitted"]) == (1, 2)  # 2 and 3 wait


def test_scoring_restores_rows_in_use_and_names_a_table_of_another_dim(tmp_path):
    """``restore_model`` (evaluate, export) takes a dynamic table's saved rows in use for
    its capacity-sized variables, and names the rows it cannot take."""
    from recsys_dist.checkpoint.restore import restore_model
    from recsys_dist.checkpoint.store import CheckpointError, CheckpointManager

    def holder(dim: int, seed: int) -> tf.Module:
        module = tf.Module()
        module.table = DynamicTable(dynamic_spec(capacity=8), dim, shards=2, seed=seed)
        return module

    trained = holder(4, 0)
    trained.table.lookup(keys(1, 2, 3, 4, 5), training=True)
    saved = CheckpointManager(str(tmp_path)).save(tf.train.Checkpoint(model=trained), 1, {})
    scoring = holder(4, 9)
    restore_model(scoring, saved, "config.yaml")
    probe = keys(1, 2, 3, 4, 5, 6)
    np.testing.assert_array_equal(
        scoring.table.lookup(probe).numpy(), trained.table.lookup(probe).numpy()
    )
    with pytest.raises(
        CheckpointError,
        match=r"does not fit the model of config\.yaml .*weight\(s\) of another shape: "
        r"model/table/shards/0/emb is \[\d, 4\] in the checkpoint, \[up to 8, 8\] in the model",
    ):
        restore_model(holder(8, 0), saved, "config.yaml")


def _tables(capacities: dict[str, int], shards: int, seed: int) -> tf.Module:
    """A model's worth of dynamic tables of the given capacities (dim 4); the table
    ``shared`` (if named) is read by two layers, as two features of one table are."""
    module = tf.Module()
    shared = ModelTables(Placement(dynamic_shards=shards))
    for n, (name, capacity) in enumerate(capacities.items()):
        spec = TableSpec(name=name, dim=4, kind="dynamic", capacity_per_shard=capacity)
        setattr(module, name, shared.dynamic_table(spec, 4, "random_uniform", seed + n, name))
        if name == "shared":
            module.shared_wide = shared.dynamic_table(spec, 1, "random_uniform", seed + 9, "w")
    return module


@pytest.mark.parametrize("shards", [1, 2, 3])
@pytest.mark.parametrize(
    "capacities",
    [
        {"user": 40, "item": 100},  # the larger table saves fewer rows than the smaller holds
        {"user": 40, "item": 100, "shared": 60},
    ],
    ids=["two", "three_one_shared"],
)
def test_scoring_restores_each_dynamic_table_by_its_checkpoint_key(tmp_path, capacities, shards):
    """Several dynamic tables of different capacities restore for scoring: each saved
    weight is paired with the model's by its checkpoint key, never by shape. ``user``
    (capacity 40 a shard) saves about 10 rows a shard and ``item`` (capacity 100) about
    60: a pairing by shape could hand user's rows to item, whose rows then fit nowhere
    (it did, for a model with two dynamic tables of different capacities)."""
    from recsys_dist.checkpoint.restore import restore_model
    from recsys_dist.checkpoint.store import CheckpointManager

    trained = _tables(capacities, shards, seed=0)
    per_shard = {"user": 10, "item": 60, "shared": 20}
    probes = {}
    for n, name in enumerate(capacities):
        first = 1000 * (n + 1)
        # 9999 is never admitted: it reads the zero row
        probes[name] = keys(*range(first, first + per_shard[name] * shards), 9999)
        getattr(trained, name).lookup(probes[name], training=True)
    probes["shared_wide"] = probes.get("shared")
    saved = CheckpointManager(str(tmp_path)).save(tf.train.Checkpoint(model=trained), 1, {})
    scoring = _tables(capacities, shards, seed=50)
    restore_model(scoring, saved, "config.yaml")
    for name, probe in probes.items():
        if probe is not None:
            # the restore copies saved bytes into the same rows: exactly equal
            np.testing.assert_array_equal(
                getattr(scoring, name).lookup(probe).numpy(),
                getattr(trained, name).lookup(probe).numpy(),
                err_msg=name,
            )


def test_scoring_names_a_missing_an_extra_and_a_reshaped_weight_by_key(tmp_path):
    """A model that is not the checkpoint's is refused with every weight that does not
    fit, by its key: missing from the checkpoint, only in the checkpoint, or of another
    trailing shape (both shapes named)."""
    from recsys_dist.checkpoint.restore import restore_model
    from recsys_dist.checkpoint.store import CheckpointError, CheckpointManager

    trained = _tables({"user": 40, "item": 100}, 1, seed=0)
    trained.user.lookup(keys(1, 2, 3), training=True)
    trained.dense = tf.Variable(tf.ones([3, 2]))
    saved = CheckpointManager(str(tmp_path)).save(tf.train.Checkpoint(model=trained), 1, {})
    other = _tables({"user": 40, "page": 100}, 1, seed=0)
    other.dense = tf.Variable(tf.ones([3, 5]))
    with pytest.raises(CheckpointError) as refused:
        restore_model(other, saved, "config.yaml")
    message = str(refused.value)
    assert "model/dense is [3, 2] in the checkpoint, [3, 5] in the model" in message
    assert "model weight(s) not in the checkpoint: " in message
    assert "model/page/shards/0/emb [100, 4]" in message.split("not in the checkpoint: ")[1]
    assert "model/item/shards/0/emb [0, 4]" in message.split("the model does not have: ")[1]


# ---- the placement is an argument of the model's construction ---------------------
def test_a_model_takes_its_placement_and_shard_count_as_arguments(tmp_path):
    """Built outside any strategy scope with an explicit placement of 3 dynamic shards,
    every dynamic table of every layer has 3 shards and the model's one shard group; the
    same build without a placement has the default 1."""
    config = load_feature_config(write_features(tmp_path, lambda doc: None))
    assert not tf.distribute.has_strategy()
    placement = Placement(dynamic_shards=3)
    model = build_model("wide_deep", config, INPUTS, ["click"], placement=placement)
    assert model.placement is placement
    tables = [t for found in model.dynamic_tables.values() for t in found]
    assert len(tables) == 2 and {len(t.shards) for t in tables} == {3}
    assert {id(t.group) for t in tables} == {id(model.model_tables.group)}
    assert all(t.placement is placement for t in tables)
    default = build_model("wide_deep", config, INPUTS, ["click"])
    assert {len(t.shards) for found in default.dynamic_tables.values() for t in found} == {1}


def test_a_model_built_for_stock_lookups_serves_without_the_row_kernels(tmp_path):
    """``Placement(stock_lookups=True)`` (an export's model): its traced lookups hold no op
    of the package's library, give what the kernels give, and training is refused."""
    config = load_feature_config(write_features(tmp_path, lambda doc: None))
    batch = {"user_id": keys(1, 2, 3, 1), "C2": keys(0, 1, 2, 3)}
    trained = build_model("wide_deep", config, INPUTS, ["click"], seed=3)
    trained(batch, training=True)  # admits the users
    stock = build_model(
        "wide_deep", config, INPUTS, ["click"], seed=3, placement=Placement(stock_lookups=True)
    )
    stock.create_variables()
    for mine, theirs in zip(stock.variables, trained.variables):
        mine.assign(theirs)
    for mine, theirs in zip(
        [s.index for found in stock.dynamic_tables.values() for t in found for s in t.shards],
        [s.index for found in trained.dynamic_tables.values() for t in found for s in t.shards],
    ):
        mine.insert(*theirs.export())
    serve = tf.function(lambda b: stock(b, training=False)["click"])
    graph = serve.get_concrete_function(batch).graph
    library_ops = {"AdmitIds", "RouteKeys", "UnrouteRows", "LiveRows", "PackRows"}
    assert not library_ops & {op.type for op in graph.get_operations()}
    np.testing.assert_allclose(
        serve(batch).numpy(), trained(batch, training=False)["click"].numpy(), rtol=1e-6
    )
    with pytest.raises(ValueError, match=r"stock_lookups=True\) looks up only"):
        stock(batch, training=True)
