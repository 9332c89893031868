"""Warm start of stacked embedding tables under feature drift (no cluster needed):
``checkpoint/warm_start.py`` and the object-graph reading it uses,
``checkpoint/object_graph.py``.

Tables of one dim share one stacked weight, so a table added, removed, reordered or
resized moves every other table's rows inside the stack. These tests save a checkpoint of
one layout and warm start another from it, with the stacks sharded differently on each
side (the way 2 and 3 parameter servers would shard them), and check each table's rows
and Adagrad accumulator by value.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist.checkpoint.warm_start import WarmStartError, stack_layouts, warm_start
from recsys_dist.models.embedding import FeatureEmbeddings
from recsys_dist.models.table_stack import shard_rows
from tests.support.configs import changed
from tests.support.models import sharding_creator, write_feature_config


def _categorical(table: str) -> dict:
    return {"kind": "categorical", "dtype": "int64", "table": table}


OLD = {
    "tables": {
        "a": {"rows": 4, "dim": 2},
        "b": {"rows": 3, "dim": 2},
        "c": {"rows": 5, "dim": 2},
        "w": {"rows": 6, "dim": 3},
    },
    "features": {
        "fa": _categorical("a"),
        "fb": _categorical("b"),
        "fc": _categorical("c"),
        "fw": _categorical("w"),
    },
    "labels": {"click": {}},
}

# b first now, c removed, d new, a resized only in RESIZED.
NEW = {
    "tables": {
        "b": {"rows": 3, "dim": 2},
        "d": {"rows": 6, "dim": 2},
        "a": {"rows": 4, "dim": 2},
        "w": {"rows": 6, "dim": 3},
    },
    "features": {
        "fb": _categorical("b"),
        "fd": _categorical("d"),
        "fa": _categorical("a"),
        "fw": _categorical("w"),
    },
    "labels": {"click": {}},
}
RESIZED = changed(NEW, {"tables.a.rows": 7})


def _layer(tmp_path: pathlib.Path, doc: dict, shards: int, name: str):
    features = write_feature_config(tmp_path, doc, f"{name}.yaml")
    with tf.variable_creator_scope(sharding_creator(shards)):
        layer = FeatureEmbeddings(features, list(features.features), seed=7)
        optimizer = tf.keras.optimizers.legacy.Adagrad(0.1)
        optimizer._create_all_weights(layer.trainable_variables)  # pylint: disable=protected-access
    return layer, optimizer


def _accumulator(layer, optimizer, table: str) -> np.ndarray:
    stacked = layer.tables[table]
    slot = optimizer.get_slot(stacked.stack.variable, "accumulator")
    value = tf.convert_to_tensor(slot).numpy()
    return value[stacked.first_row : stacked.first_row + stacked.rows]


@pytest.fixture()
def saved(tmp_path):
    layer, optimizer = _layer(tmp_path, OLD, shards=2, name="old")
    values = {}
    for i, (table, view) in enumerate(layer.tables.items()):
        values[table] = np.arange(np.prod(view.shape), dtype=np.float32).reshape(view.shape)
        values[table] += 100 * (i + 1)
        view.assign(values[table])
        slot = optimizer.get_slot(view.stack.variable, "accumulator")
        full = tf.convert_to_tensor(slot).numpy()
        full[view.first_row : view.first_row + view.rows] = values[table] + 0.5
        for shard, start, stop in shard_rows(slot):
            shard.assign(full[start:stop])
    prefix = tf.train.Checkpoint(embeddings=layer, optimizer=optimizer).write(
        str(tmp_path / "ckpt" / "variables")
    )
    return prefix, stack_layouts(layer.stacks), values


def test_each_table_takes_its_own_rows_when_the_stack_layout_changes(tmp_path, saved):
    prefix, layouts, values = saved
    layer, optimizer = _layer(tmp_path, NEW, shards=3, name="new")
    fresh_d = layer.tables["d"].numpy()
    report = warm_start(
        tf.train.Checkpoint(embeddings=layer, optimizer=optimizer),
        prefix,
        layer.stacks,
        layouts,
        [optimizer],
    )
    for table in ("a", "b", "w"):
        np.testing.assert_array_equal(layer.tables[table].numpy(), values[table])
        np.testing.assert_array_equal(_accumulator(layer, optimizer, table), values[table] + 0.5)
    np.testing.assert_array_equal(layer.tables["d"].numpy(), fresh_d)  # new: untouched
    assert report.fresh == ["table d"]
    assert report.ignored == ["table c"]
    assert not report.reinitialized


def test_a_resized_table_fails_or_starts_fresh_by_policy(tmp_path, saved):
    prefix, layouts, values = saved
    layer, optimizer = _layer(tmp_path, RESIZED, shards=2, name="resized")
    root = tf.train.Checkpoint(embeddings=layer, optimizer=optimizer)
    with pytest.raises(
        WarmStartError,
        match=r"table 'a' is 4 x 2 in .* but 7 x 2 now.*"
        r"on_table_resize: reinitialize",
    ):
        warm_start(root, prefix, layer.stacks, layouts, [optimizer])
    fresh_a = layer.tables["a"].numpy()
    report = warm_start(
        root, prefix, layer.stacks, layouts, [optimizer], on_table_resize="reinitialize"
    )
    np.testing.assert_array_equal(layer.tables["a"].numpy(), fresh_a)
    np.testing.assert_array_equal(layer.tables["b"].numpy(), values["b"])
    assert any(name.endswith(": table a") for name in report.reinitialized), report


def test_a_table_whose_dim_changed_counts_as_resized(tmp_path, saved):
    prefix, layouts, _ = saved
    # w moves from the dim-3 stack to the dim-2 one: same rows, other dim.
    layer, optimizer = _layer(tmp_path, changed(NEW, {"tables.w.dim": 2}), shards=2, name="redim")
    with pytest.raises(WarmStartError, match=r"table 'w' is 6 x 3 in .* but 6 x 2 now"):
        warm_start(
            tf.train.Checkpoint(embeddings=layer, optimizer=optimizer),
            prefix,
            layer.stacks,
            layouts,
            [optimizer],
        )
