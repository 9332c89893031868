"""Feature embeddings: exact pooling with hand-set table values, stacked and sharded
tables (``models/embedding.py`` and ``models/table_stack.py``), and the rejections."""

from __future__ import annotations

import math

import numpy as np
import pytest

# isort: off
import recsys_dist  # noqa: F401  sets TF_USE_LEGACY_KERAS, so it must come before TensorFlow
import tensorflow as tf
# isort: on

from recsys_dist.models.embedding import FeatureEmbeddings, example_features
from tests.support.configs import changed
from tests.support.models import sharding_creator, write_feature_config

POOLING_FEATURES = {
    "tables": {"t": {"rows": 4, "dim": 2}, "b": {"rows": 3, "dim": 2}},
    "features": {
        "cat": {"kind": "categorical", "dtype": "int64", "table": "t"},
        "tags_sum": {"kind": "multi_categorical", "table": "t", "max_length": 3, "combiner": "sum"},
        "tags_mean": {
            "kind": "multi_categorical",
            "table": "t",
            "max_length": 3,
            "combiner": "mean",
        },
        "tags_sqrtn": {
            "kind": "multi_categorical",
            "table": "t",
            "max_length": 3,
            "combiner": "sqrtn",
        },
        "x1": {"kind": "numeric"},
        "bucket": {
            "kind": "numeric",
            "transform": "bucketize",
            "boundaries": [0.0, 1.0],
            "table": "b",
        },
        "x2": {"kind": "numeric", "transform": "log1p"},
    },
    "labels": {"click": {}},
}

POOLING_ORDER = ["x2", "cat", "tags_sum", "tags_mean", "tags_sqrtn", "bucket", "x1"]


def _pooling_batch() -> dict:
    tags = {
        "ids": tf.constant([[1, 2, 0], [3, 0, 0], [0, 0, 0]], tf.int64),
        "weights": tf.constant([[1.0, 2.0, 0.0], [0.5, 0.0, 0.0], [0.0, 0.0, 0.0]]),
    }
    return {
        "cat": tf.constant([3, 0, 2], tf.int64),
        "tags_sum": tags,
        "tags_mean": tags,
        "tags_sqrtn": tags,
        "bucket": tf.constant([2, 0, 1], tf.int64),
        "x1": tf.constant([1.0, 2.0, 3.0]),
        "x2": tf.constant([4.0, 5.0, 6.0]),
    }


T_VALUES = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 3.0]], np.float32)
B_VALUES = np.array([[10.0, 20.0], [30.0, 40.0], [50.0, 60.0]], np.float32)
SQRT5 = math.sqrt(5.0)
POOLED = {
    "cat": [[2, 3], [1, 0], [1, 1]],
    # row 0: 1 * t[1] + 2 * t[2] = [2, 3]; row 1: 0.5 * t[3]; row 2: only padding.
    "tags_sum": [[2, 3], [1, 1.5], [0, 0]],
    "tags_mean": [[2 / 3, 1], [2, 3], [0, 0]],  # / (1 + 2), / 0.5, 0
    "tags_sqrtn": [[2 / SQRT5, 3 / SQRT5], [2, 3], [0, 0]],  # / sqrt(1 + 4), / 0.5, 0
    "bucket": [[50, 60], [10, 20], [30, 40]],
}


def _check_pooled(layer: FeatureEmbeddings, call=None) -> None:
    sparse, dense = (call or layer)(_pooling_batch())
    assert list(sparse) == ["cat", "tags_sum", "tags_mean", "tags_sqrtn", "bucket"]
    for name, expected in POOLED.items():
        np.testing.assert_allclose(sparse[name].numpy(), expected, rtol=1e-6, err_msg=name)
    np.testing.assert_allclose(dense.numpy(), [[4, 1], [5, 2], [6, 3]])


def test_feature_embeddings_pool_exactly_and_share_tables(tmp_path):
    cfg = write_feature_config(tmp_path, POOLING_FEATURES)
    layer = FeatureEmbeddings(cfg, POOLING_ORDER, seed=0)
    assert list(layer.tables) == ["t", "b"]
    # Both tables (dim 2) are stacked in one weight, t's 4 rows then b's 3; four
    # features share table t.
    assert [v.name for v in layer.trainable_variables] == [
        "feature_embeddings/embedding/stack_d2:0"
    ]
    (stack,) = layer.stacks
    assert stack.layout == {"t": (0, 4), "b": (4, 3)}
    assert stack.key == "feature_embeddings/embedding/stack_d2"
    assert layer.sparse_feature_names == ["cat", "tags_sum", "tags_mean", "tags_sqrtn", "bucket"]
    assert layer.dense_feature_names == ["x2", "x1"]
    assert layer.embedding_dims == dict.fromkeys(layer.sparse_feature_names, 2)
    layer.tables["t"].assign(T_VALUES)
    layer.tables["b"].assign(B_VALUES)
    _check_pooled(layer)
    _check_pooled(layer, tf.function(layer))


def test_feature_embeddings_never_read_padding(tmp_path):
    cfg = write_feature_config(tmp_path, POOLING_FEATURES)
    layer = FeatureEmbeddings(cfg, ["tags_sum"])
    with tf.GradientTape() as tape:
        sparse, _ = layer(_pooling_batch())
        total = tf.reduce_sum(sparse["tags_sum"])
    (grad,) = tape.gradient(total, layer.trainable_variables)
    assert isinstance(grad, tf.IndexedSlices)
    assert sorted(grad.indices.numpy()) == [1, 2, 3]  # id 0 only appears as padding


def test_tables_of_different_dims_get_their_own_stacks(tmp_path):
    cfg = write_feature_config(tmp_path, changed(POOLING_FEATURES, {"tables.b.dim": 3}))
    layer = FeatureEmbeddings(cfg, POOLING_ORDER)
    assert [(s.key, s.layout) for s in layer.stacks] == [
        ("feature_embeddings/embedding/stack_d2", {"t": (0, 4)}),
        ("feature_embeddings/embedding/stack_d3", {"b": (0, 3)}),
    ]
    sparse, _ = layer(_pooling_batch())
    assert sparse["cat"].shape == (3, 2) and sparse["bucket"].shape == (3, 3)
    with pytest.raises(ValueError, match=r"shape \(4, 2\) cannot take a value of shape"):
        layer.tables["t"].assign(np.zeros((3, 2)))


def test_feature_embeddings_dim_override(tmp_path):
    cfg = write_feature_config(tmp_path, POOLING_FEATURES)
    layer = FeatureEmbeddings(cfg, POOLING_ORDER, dim_override=1)
    assert {n: tuple(v.shape) for n, v in layer.tables.items()} == {"t": (4, 1), "b": (3, 1)}
    assert [tuple(v.shape) for v in layer.trainable_variables] == [(7, 1)]
    sparse, _ = layer(_pooling_batch())
    assert all(v.shape == (3, 1) for v in sparse.values())
    assert set(layer.embedding_dims.values()) == {1}


def test_feature_embeddings_are_seeded(tmp_path):
    cfg = write_feature_config(tmp_path, POOLING_FEATURES)
    first, again, other = (FeatureEmbeddings(cfg, POOLING_ORDER, seed=s) for s in (0, 0, 1))
    t = first.tables["t"].numpy()
    np.testing.assert_array_equal(t, again.tables["t"].numpy())
    assert not np.array_equal(t, other.tables["t"].numpy())
    assert not np.array_equal(t[:3, :], first.tables["b"].numpy())  # tables differ
    assert np.abs(t).max() <= 0.05


def test_feature_embeddings_look_up_sharded_tables(tmp_path):
    cfg = write_feature_config(tmp_path, POOLING_FEATURES)
    with tf.variable_creator_scope(sharding_creator(2)):
        layer = FeatureEmbeddings(cfg, POOLING_ORDER)
    sharded = tf.__internal__.distribute.ShardedVariable
    assert all(isinstance(s.variable, sharded) for s in layer.stacks)
    # Keras tracks the shards: the stack of t (4 rows) and b (3 rows) -> 4 + 3, so
    # b's rows are all on shard 1.
    assert [tuple(v.shape) for v in layer.trainable_variables] == [(4, 2), (3, 2)]
    layer.tables["t"].assign(T_VALUES)
    layer.tables["b"].assign(B_VALUES)
    _check_pooled(layer)
    _check_pooled(layer, tf.function(layer))
    with tf.GradientTape() as tape:
        sparse, _ = layer(_pooling_batch())
        total = tf.reduce_sum(sparse["cat"])  # reads rows 3, 0 and 2 of t
    grads = [
        tf.convert_to_tensor(g).numpy() for g in tape.gradient(total, layer.trainable_variables)
    ]
    np.testing.assert_allclose(grads[0], [[1, 1], [0, 0], [1, 1], [1, 1]])  # t on shard 0
    np.testing.assert_allclose(grads[1], np.zeros((3, 2)))  # b untouched


def test_eager_lookup_never_concatenates_a_sharded_table(tmp_path, monkeypatch):
    # tf.nn.embedding_lookup(ShardedVariable) only dispatches per shard inside a graph;
    # eagerly (e.g. create_variables on the coordinator) it would concat the whole table.
    from tensorflow.python.ops import array_ops

    cfg = write_feature_config(tmp_path, POOLING_FEATURES)
    with tf.variable_creator_scope(sharding_creator(2)):
        layer = FeatureEmbeddings(cfg, POOLING_ORDER)
    concatenated = []
    original = array_ops.concat

    def spy(values, axis, name="concat"):
        concatenated.extend(v.name for v in values if isinstance(v, tf.Variable))
        return original(values, axis, name)

    monkeypatch.setattr(array_ops, "concat", spy)
    layer(_pooling_batch())
    assert concatenated == []


def test_feature_embeddings_reject_bad_feature_names(tmp_path):
    cfg = write_feature_config(tmp_path, POOLING_FEATURES)
    with pytest.raises(ValueError, match="unknown feature 'catt'.*Did you mean \"cat\""):
        FeatureEmbeddings(cfg, ["catt"])
    with pytest.raises(ValueError, match=r"\['cat'\] listed more than once"):
        FeatureEmbeddings(cfg, ["cat", "x1", "cat"])
    with pytest.raises(ValueError, match="at least one feature"):
        FeatureEmbeddings(cfg, [])
    with pytest.raises(ValueError, match="dim_override must be None or a positive integer"):
        FeatureEmbeddings(cfg, ["cat"], dim_override=0)


def test_feature_embeddings_name_missing_batch_features(tmp_path):
    cfg = write_feature_config(tmp_path, POOLING_FEATURES)
    layer = FeatureEmbeddings(cfg, ["cat", "x1"])
    with pytest.raises(KeyError, match=r"no feature\(s\) \['x1'\]"):
        layer({"cat": tf.constant([0], tf.int64)})


def test_example_features_match_pipeline_shapes(tiny):
    batch = example_features(tiny, list(tiny.features), batch_size=2)
    assert batch["ad_id"].dtype == tf.int64 and batch["ad_id"].shape == (2,)
    assert batch["age"].dtype == tf.int64
    assert batch["price"].dtype == tf.float32
    assert batch["tags"]["ids"].shape == (2, 3) and batch["tags"]["weights"].shape == (2, 3)
