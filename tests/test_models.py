"""Tests of the model zoo: blocks, feature embeddings, models and their params.

Block and embedding tests check exact numbers computed by hand with deterministic
weights. Model tests build every model on a tiny feature config and train it for a few
dozen steps with separate optimizers for embedding and dense variables. The one test
marked ``cluster`` trains every model under a real ParameterServerStrategy with
partitioned tables (in-process servers, in a subprocess).
"""

from __future__ import annotations

import math
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

# isort: off
import recsys_dist  # sets TF_USE_LEGACY_KERAS, so it must come before TensorFlow
import tensorflow as tf
# isort: on

from recsys_dist.config.features import FeatureConfig, load_feature_config
from recsys_dist.config.schema import parse_dataclass
from recsys_dist.config.yaml_loader import load_yaml
from recsys_dist.errors import ConfigError
from recsys_dist.models.blocks import (
    MLP,
    CrossNetwork,
    DotInteraction,
    FactorizationMachine,
    MixtureOfExperts,
    derive_seed,
)
from recsys_dist.models.embedding import FeatureEmbeddings, example_features
from recsys_dist.config.model_params import (
    MODEL_PARAMS,
    DCNv2Params,
    DLRMParams,
    MMoEParams,
    WideDeepParams,
)
from recsys_dist.models.zoo import MODELS, RankingModel, build_model

PROJECT_ROOT = pathlib.Path(recsys_dist.__file__).resolve().parent.parent

TINY_FEATURES = """\
tables:
  ad: {rows: 50, dim: 4}
  user: {rows: 40, dim: 4}
  age_bucket: {rows: 5, dim: 4}
  tag: {rows: 30, dim: 4}
  cross: {rows: 60, dim: 4}
features:
  ad_id: {kind: categorical, dtype: int64, table: ad}
  user_id: {kind: categorical, dtype: string, table: user}
  price: {kind: numeric, transform: log1p}
  age: {kind: numeric, transform: bucketize, boundaries: [18, 30, 45, 60], table: age_bucket}
  tags: {kind: multi_categorical, table: tag, max_length: 3, combiner: mean}
  ad_x_user: {kind: cross, inputs: [ad_id, user_id], table: cross}
labels:
  click: {}
  conversion: {}
"""

POOLING_FEATURES = """\
tables:
  t: {rows: 4, dim: 2}
  b: {rows: 3, dim: 2}
features:
  cat: {kind: categorical, dtype: int64, table: t}
  tags_sum: {kind: multi_categorical, table: t, max_length: 3, combiner: sum}
  tags_mean: {kind: multi_categorical, table: t, max_length: 3, combiner: mean}
  tags_sqrtn: {kind: multi_categorical, table: t, max_length: 3, combiner: sqrtn}
  x1: {kind: numeric}
  bucket: {kind: numeric, transform: bucketize, boundaries: [0.0, 1.0], table: b}
  x2: {kind: numeric, transform: log1p}
labels:
  click: {}
"""

LABELS = ["click", "conversion"]


def _write_config(tmp_path: pathlib.Path, text: str, name: str = "features.yaml"
                  ) -> FeatureConfig:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return load_feature_config(path)


@pytest.fixture
def tiny(tmp_path) -> FeatureConfig:
    return _write_config(tmp_path, TINY_FEATURES)


def _inputs(name: str, features: FeatureConfig) -> dict[str, list[str]]:
    groups = {"lr": ["wide"], "wide_deep": ["wide", "deep"]}.get(name, ["deep"])
    return {group: list(features.features) for group in groups}


def _tiny_batch(rows: int = 64, seed: int = 0) -> tuple[dict, dict]:
    """A batch for TINY_FEATURES whose labels are functions of the ids."""
    rng = np.random.default_rng(seed)
    ad = rng.integers(0, 50, rows)
    user = rng.integers(0, 40, rows)
    batch = {
        "ad_id": tf.constant(ad, tf.int64),
        "user_id": tf.constant(user, tf.int64),
        "price": tf.constant(rng.lognormal(size=rows), tf.float32),
        "age": tf.constant(rng.integers(0, 5, rows), tf.int64),
        "tags": {"ids": tf.constant(rng.integers(0, 30, (rows, 3)), tf.int64),
                 "weights": tf.constant(rng.random((rows, 3)) < 0.6, tf.float32)},
        "ad_x_user": tf.constant((ad * 7 + user) % 60, tf.int64),
    }
    labels = {"click": tf.constant(ad % 2 == 0, tf.float32),
              "conversion": tf.constant(user < 20, tf.float32)}
    return batch, labels


def _loss(logits: dict[str, tf.Tensor], labels: dict[str, tf.Tensor]) -> tf.Tensor:
    return tf.add_n([tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels[k], v))
                     for k, v in logits.items()])


def _refs(variables: list[tf.Variable]) -> set:
    return {v.ref() for v in variables}


# ---- blocks ----------------------------------------------------------------------------

def _roundtrip(layer: tf.keras.layers.Layer) -> tf.keras.layers.Layer:
    clone = type(layer).from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    return clone


def test_mlp_exact_output_and_config_roundtrip():
    mlp = MLP([2, 1], kernel_initializer="ones", final_activation=None)
    x = tf.constant([[1.0, 2.0], [-1.0, -2.0]])
    # Layer 0: relu([3, 3]) and relu([-3, -3]); layer 1 (linear) sums them.
    np.testing.assert_allclose(mlp(x).numpy(), [[6.0], [0.0]])
    np.testing.assert_allclose(_roundtrip(mlp)(x).numpy(), [[6.0], [0.0]])


def test_mlp_final_activation_applies_to_last_layer():
    mlp = MLP([1], kernel_initializer="ones", final_activation="relu")
    np.testing.assert_allclose(mlp(tf.constant([[-1.0, -2.0]])).numpy(), [[0.0]])


def test_mlp_dropout_only_when_training():
    mlp = MLP([64], dropout=0.5, kernel_initializer="ones", seed=3)
    x = tf.ones([4, 3])
    np.testing.assert_allclose(mlp(x, training=False).numpy(), np.full([4, 64], 3.0))
    trained = mlp(x, training=True).numpy()
    # Dropped units are 0, kept ones are scaled by 1 / (1 - 0.5).
    assert set(np.unique(trained)) == {0.0, 6.0}


def test_mlp_batch_norm_uses_batch_stats_when_training_and_moving_stats_otherwise():
    mlp = MLP([1], batch_norm=True, final_activation="linear", kernel_initializer="ones")
    x = tf.constant([[1.0], [2.0], [3.0]])
    eps = 1e-3  # Keras BatchNormalization default epsilon
    # Before any update: moving mean 0, moving variance 1.
    np.testing.assert_allclose(mlp(x, training=False).numpy().ravel(),
                               np.array([1.0, 2.0, 3.0]) / math.sqrt(1 + eps), rtol=1e-6)
    # Training: batch mean 2, batch variance 2/3.
    np.testing.assert_allclose(mlp(x, training=True).numpy().ravel(),
                               (np.array([1.0, 2.0, 3.0]) - 2) / math.sqrt(2 / 3 + eps),
                               rtol=1e-5)
    norm = next(layer for layer in mlp.stack
                if isinstance(layer, tf.keras.layers.BatchNormalization))
    np.testing.assert_allclose(norm.moving_mean.numpy(), [0.99 * 0 + 0.01 * 2.0], rtol=1e-6)


@pytest.mark.parametrize("units, dropout", [([], 0.0), ([8, 0], 0.0), ([8], 1.0)])
def test_mlp_rejects_bad_arguments(units, dropout):
    with pytest.raises(ValueError, match="MLP (units|dropout)"):
        MLP(units, dropout=dropout)


@pytest.mark.parametrize("num_layers, low_rank, expected", [
    (1, None, [0.16, 0.32, 0.48]),    # x1 = x0 * (1 . x0 = 0.6) + x0
    (2, None, [0.256, 0.512, 0.768]),  # x2 = x0 * (1 . x1 = 0.96) + x1
    (1, 2, [0.22, 0.44, 0.66]),        # U V^T x0 with ones: 2 * 0.6 = 1.2 per unit
])
def test_cross_network_exact_output(num_layers, low_rank, expected):
    cross = CrossNetwork(num_layers, low_rank, kernel_initializer="ones")
    x0 = tf.constant([[0.1, 0.2, 0.3]])
    np.testing.assert_allclose(cross(x0).numpy(), [expected], rtol=1e-6)
    np.testing.assert_allclose(_roundtrip(cross)(x0).numpy(), [expected], rtol=1e-6)


def test_cross_network_low_rank_weight_shapes():
    cross = CrossNetwork(2, low_rank=2)
    cross(tf.zeros([1, 5]))
    assert sorted(tuple(w.shape) for w in cross.trainable_weights) == sorted(
        [(5, 2), (2, 5), (5,)] * 2)


def test_cross_network_rejects_bad_arguments():
    with pytest.raises(ValueError, match="num_layers must be a positive integer"):
        CrossNetwork(0)
    with pytest.raises(ValueError, match="low_rank must be None or a positive integer"):
        CrossNetwork(1, low_rank=0)


def test_factorization_machine_exact_output():
    fm = FactorizationMachine()
    x = tf.constant([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]],
                     [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])
    # Row 0: <v1,v2> + <v1,v3> + <v2,v3> = 11 + 17 + 39; row 1: orthogonal vectors.
    np.testing.assert_allclose(fm(x).numpy(), [67.0, 0.0])
    np.testing.assert_allclose(_roundtrip(fm)(x).numpy(), [67.0, 0.0])


@pytest.mark.parametrize("self_interaction, expected", [
    (False, [11.0, 17.0, 39.0]),                     # (0,1) (0,2) (1,2)
    (True, [5.0, 11.0, 17.0, 25.0, 39.0, 61.0]),    # (0,0) (0,1) (0,2) (1,1) (1,2) (2,2)
])
def test_dot_interaction_exact_output(self_interaction, expected):
    dot = DotInteraction(self_interaction)
    x = tf.constant([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]])
    np.testing.assert_allclose(dot(x).numpy(), [expected])
    np.testing.assert_allclose(_roundtrip(dot)(x).numpy(), [expected])


def test_mixture_of_experts_exact_output():
    moe = MixtureOfExperts(num_experts=2, expert_units=[1], num_tasks=2,
                           kernel_initializer="ones")
    x = tf.constant([[1.0, 2.0]])
    moe(x)
    moe.experts[1].set_weights([np.full([2, 1], 2.0), np.zeros([1])])  # expert 1 -> 6
    moe.gates[0].set_weights([np.zeros([2, 2]), np.zeros([2])])        # uniform gate
    moe.gates[1].set_weights([np.array([[1.0, 0.0], [0.0, 0.0]]), np.zeros([2])])
    task0, task1 = moe(x)
    np.testing.assert_allclose(task0.numpy(), [[4.5]], rtol=1e-6)
    e = math.e
    np.testing.assert_allclose(task1.numpy(), [[(3 * e + 6) / (1 + e)]], rtol=1e-6)
    assert [t.shape for t in _roundtrip(moe)(x)] == [tf.TensorShape([1, 1])] * 2


def test_mixture_of_experts_output_per_task():
    moe = MixtureOfExperts(num_experts=3, expert_units=[8, 4], num_tasks=3, seed=0)
    outputs = moe(tf.ones([5, 6]))
    assert [o.shape for o in outputs] == [tf.TensorShape([5, 4])] * 3


def test_derive_seed_is_stable_and_distinct():
    assert derive_seed(None, "x") is None
    assert derive_seed(0, "expert", 1) == derive_seed(0, "expert", 1)
    assert len({derive_seed(0, "expert", i) for i in range(100)}) == 100


# ---- feature embeddings ----------------------------------------------------------------

POOLING_ORDER = ["x2", "cat", "tags_sum", "tags_mean", "tags_sqrtn", "bucket", "x1"]


def _pooling_batch() -> dict:
    tags = {"ids": tf.constant([[1, 2, 0], [3, 0, 0], [0, 0, 0]], tf.int64),
            "weights": tf.constant([[1.0, 2.0, 0.0], [0.5, 0.0, 0.0], [0.0, 0.0, 0.0]])}
    return {"cat": tf.constant([3, 0, 2], tf.int64), "tags_sum": tags, "tags_mean": tags,
            "tags_sqrtn": tags, "bucket": tf.constant([2, 0, 1], tf.int64),
            "x1": tf.constant([1.0, 2.0, 3.0]), "x2": tf.constant([4.0, 5.0, 6.0])}


T_VALUES = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 3.0]], np.float32)
B_VALUES = np.array([[10.0, 20.0], [30.0, 40.0], [50.0, 60.0]], np.float32)
SQRT5 = math.sqrt(5.0)
POOLED = {
    "cat": [[2, 3], [1, 0], [1, 1]],
    # row 0: 1 * t[1] + 2 * t[2] = [2, 3]; row 1: 0.5 * t[3]; row 2: only padding.
    "tags_sum": [[2, 3], [1, 1.5], [0, 0]],
    "tags_mean": [[2 / 3, 1], [2, 3], [0, 0]],              # / (1 + 2), / 0.5, 0
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
    cfg = _write_config(tmp_path, POOLING_FEATURES)
    layer = FeatureEmbeddings(cfg, POOLING_ORDER, seed=0)
    assert list(layer.tables) == ["t", "b"]
    # Both tables (dim 2) are stacked in one weight, t's 4 rows then b's 3; four
    # features share table t.
    assert [v.name for v in layer.trainable_variables] == [
        "feature_embeddings/embedding/stack_d2:0"]
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
    cfg = _write_config(tmp_path, POOLING_FEATURES)
    layer = FeatureEmbeddings(cfg, ["tags_sum"])
    with tf.GradientTape() as tape:
        sparse, _ = layer(_pooling_batch())
        total = tf.reduce_sum(sparse["tags_sum"])
    (grad,) = tape.gradient(total, layer.trainable_variables)
    assert isinstance(grad, tf.IndexedSlices)
    assert sorted(grad.indices.numpy()) == [1, 2, 3]  # id 0 only appears as padding


def test_tables_of_different_dims_get_their_own_stacks(tmp_path):
    cfg = _write_config(tmp_path, POOLING_FEATURES.replace("b: {rows: 3, dim: 2}",
                                                           "b: {rows: 3, dim: 3}"))
    layer = FeatureEmbeddings(cfg, POOLING_ORDER)
    assert [(s.key, s.layout) for s in layer.stacks] == [
        ("feature_embeddings/embedding/stack_d2", {"t": (0, 4)}),
        ("feature_embeddings/embedding/stack_d3", {"b": (0, 3)})]
    sparse, _ = layer(_pooling_batch())
    assert sparse["cat"].shape == (3, 2) and sparse["bucket"].shape == (3, 3)
    with pytest.raises(ValueError, match=r"shape \(4, 2\) cannot take a value of shape"):
        layer.tables["t"].assign(np.zeros((3, 2)))


def test_feature_embeddings_dim_override(tmp_path):
    cfg = _write_config(tmp_path, POOLING_FEATURES)
    layer = FeatureEmbeddings(cfg, POOLING_ORDER, dim_override=1)
    assert {n: tuple(v.shape) for n, v in layer.tables.items()} == {"t": (4, 1), "b": (3, 1)}
    assert [tuple(v.shape) for v in layer.trainable_variables] == [(7, 1)]
    sparse, _ = layer(_pooling_batch())
    assert all(v.shape == (3, 1) for v in sparse.values())
    assert set(layer.embedding_dims.values()) == {1}


def test_feature_embeddings_are_seeded(tmp_path):
    cfg = _write_config(tmp_path, POOLING_FEATURES)
    first, again, other = (FeatureEmbeddings(cfg, POOLING_ORDER, seed=s) for s in (0, 0, 1))
    t = first.tables["t"].numpy()
    np.testing.assert_array_equal(t, again.tables["t"].numpy())
    assert not np.array_equal(t, other.tables["t"].numpy())
    assert not np.array_equal(t[:3, :], first.tables["b"].numpy())  # tables differ
    assert np.abs(t).max() <= 0.05


def _sharding_creator(num_shards: int):
    """A variable creator that splits 2-D variables by rows into a ShardedVariable,
    the way ParameterServerStrategy does with a variable_partitioner ("div" layout)."""

    def creator(next_creator, **kwargs):
        shape = tf.TensorShape(kwargs.get("shape"))
        if shape.rank != 2:
            return next_creator(**kwargs)
        initial = kwargs["initial_value"]
        value = tf.convert_to_tensor(initial() if callable(initial) else initial)
        shards = []
        for i, rows in enumerate(np.array_split(np.arange(shape[0]), num_shards)):
            shards.append(next_creator(**{
                **kwargs, "initial_value": value[rows[0]:rows[-1] + 1],
                "shape": (len(rows), shape[1]), "name": f"{kwargs['name']}/part_{i}"}))
        return tf.__internal__.distribute.ShardedVariable(shards)

    return creator


def test_feature_embeddings_look_up_sharded_tables(tmp_path):
    cfg = _write_config(tmp_path, POOLING_FEATURES)
    with tf.variable_creator_scope(_sharding_creator(2)):
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
    grads = [tf.convert_to_tensor(g).numpy() for g in
             tape.gradient(total, layer.trainable_variables)]
    np.testing.assert_allclose(grads[0], [[1, 1], [0, 0], [1, 1], [1, 1]])  # t on shard 0
    np.testing.assert_allclose(grads[1], np.zeros((3, 2)))  # b untouched


def test_eager_lookup_never_concatenates_a_sharded_table(tmp_path, monkeypatch):
    # tf.nn.embedding_lookup(ShardedVariable) only dispatches per shard inside a graph;
    # eagerly (e.g. create_variables on the coordinator) it would concat the whole table.
    from tensorflow.python.ops import array_ops

    cfg = _write_config(tmp_path, POOLING_FEATURES)
    with tf.variable_creator_scope(_sharding_creator(2)):
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
    cfg = _write_config(tmp_path, POOLING_FEATURES)
    with pytest.raises(ValueError, match="unknown feature 'catt'.*Did you mean \"cat\""):
        FeatureEmbeddings(cfg, ["catt"])
    with pytest.raises(ValueError, match=r"\['cat'\] listed more than once"):
        FeatureEmbeddings(cfg, ["cat", "x1", "cat"])
    with pytest.raises(ValueError, match="at least one feature"):
        FeatureEmbeddings(cfg, [])
    with pytest.raises(ValueError, match="dim_override must be None or a positive integer"):
        FeatureEmbeddings(cfg, ["cat"], dim_override=0)


def test_feature_embeddings_name_missing_batch_features(tmp_path):
    cfg = _write_config(tmp_path, POOLING_FEATURES)
    layer = FeatureEmbeddings(cfg, ["cat", "x1"])
    with pytest.raises(KeyError, match=r"no feature\(s\) \['x1'\]"):
        layer({"cat": tf.constant([0], tf.int64)})


def test_example_features_match_pipeline_shapes(tiny):
    batch = example_features(tiny, list(tiny.features), batch_size=2)
    assert batch["ad_id"].dtype == tf.int64 and batch["ad_id"].shape == (2,)
    assert batch["age"].dtype == tf.int64
    assert batch["price"].dtype == tf.float32
    assert batch["tags"]["ids"].shape == (2, 3) and batch["tags"]["weights"].shape == (2, 3)


# ---- models ----------------------------------------------------------------------------

MODEL_CASES = [(name, None) for name in MODELS] + [
    ("dcn_v2", DCNv2Params(cross_layers=2, low_rank=2, structure="parallel",
                           hidden_units=[16, 8], dropout=0.1, batch_norm=True)),
    ("dlrm", DLRMParams(bottom_units=[], top_units=[8], self_interaction=True,
                        batch_norm=True)),
    ("mmoe", MMoEParams(num_experts=2, expert_units=[8], tower_units=[4], dropout=0.1)),
]


def _case_id(case) -> str:
    name, params = case
    return name if params is None else f"{name}-custom"


@pytest.mark.parametrize("name, params", MODEL_CASES, ids=[_case_id(c) for c in MODEL_CASES])
def test_model_trains_with_split_optimizers(tiny, name, params):
    model = build_model(name, tiny, _inputs(name, tiny), LABELS, params=params, seed=0)
    assert isinstance(model, RankingModel)
    model.create_variables()
    batch, labels = _tiny_batch()

    logits = model(batch)
    assert sorted(logits) == sorted(LABELS)
    assert all(v.shape == (64,) and v.dtype == tf.float32 for v in logits.values())

    embedding, dense = model.embedding_variables, model.dense_variables
    assert embedding and dense
    assert not _refs(embedding) & _refs(dense)
    assert _refs(embedding) | _refs(dense) == _refs(model.trainable_variables)
    stacks = [s.variable for m in model.submodules if isinstance(m, FeatureEmbeddings)
              for s in m.stacks]
    assert _refs(embedding) == _refs(stacks)

    with tf.GradientTape() as tape:
        loss = _loss(model(batch, training=True), labels)
    grads = tape.gradient(loss, embedding + dense)
    unused = [v.name for v, g in zip(embedding + dense, grads) if g is None]
    assert not unused, f"variables without a gradient: {unused}"

    embedding_opt = tf.keras.optimizers.legacy.Adagrad(0.5)
    dense_opt = tf.keras.optimizers.legacy.Adam(0.01)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = _loss(model(batch, training=True), labels)
        grads = tape.gradient(loss, embedding + dense)
        embedding_opt.apply_gradients(zip(grads[:len(embedding)], embedding))
        dense_opt.apply_gradients(zip(grads[len(embedding):], dense))

    before = float(_loss(model(batch), labels))
    for _ in range(50):
        step()
    after = float(_loss(model(batch), labels))
    print(f"{name}: loss {before:.3f} -> {after:.3f}")
    assert after < 0.5 * before, (before, after)


def test_single_label_model_predicts_only_that_label(tiny):
    model = build_model("deepfm", tiny, _inputs("deepfm", tiny), ["conversion"])
    logits = model(_tiny_batch(8)[0])
    assert list(logits) == ["conversion"] and logits["conversion"].shape == (8,)


def test_wide_deep_groups_can_differ(tiny):
    inputs = {"wide": ["ad_id", "ad_x_user"], "deep": ["user_id", "price", "tags"]}
    model = build_model("wide_deep", tiny, inputs, LABELS)
    model.create_variables()
    assert sorted(v.name for v in model.embedding_variables) == sorted([
        "deep_embeddings/embedding/stack_d4:0", "wide_embeddings/embedding/stack_d2:0"])
    assert [list(s.layout) for s in model.wide.embeddings.stacks] == [["ad", "cross"]]
    assert model.wide.embeddings.tables["ad"].shape == (50, 2)  # one column per label


@pytest.mark.parametrize("name", ["dcn_v2", "mmoe"])
def test_same_seed_same_weights(tiny, name):
    def weights(seed: int) -> list[np.ndarray]:
        model = build_model(name, tiny, _inputs(name, tiny), LABELS, seed=seed)
        model.create_variables()
        return [v.numpy() for v in model.trainable_variables]

    first, again, other = weights(0), weights(0), weights(1)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


@pytest.mark.parametrize("name", list(MODELS))
def test_checkpoint_restores_predictions(tiny, tmp_path, name):
    batch = _tiny_batch(8)[0]
    model = build_model(name, tiny, _inputs(name, tiny), LABELS, seed=0)
    model.create_variables()
    rng = np.random.default_rng(1)
    for variable in model.trainable_variables:
        variable.assign(rng.normal(size=variable.shape).astype(np.float32))
    expected = model(batch)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))

    restored = build_model(name, tiny, _inputs(name, tiny), LABELS, seed=1)
    restored.create_variables()
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    for label, value in restored(batch).items():
        np.testing.assert_allclose(value.numpy(), expected[label].numpy(), rtol=1e-5)


MIXED_DIMS = TINY_FEATURES.replace("user: {rows: 40, dim: 4}", "user: {rows: 40, dim: 8}")


@pytest.mark.parametrize("name", ["deepfm", "dlrm"])
def test_models_needing_one_dim_reject_mixed_dims(tmp_path, name):
    cfg = _write_config(tmp_path, MIXED_DIMS)
    with pytest.raises(ValueError, match=rf"model '{name}' needs one embedding dim for all its "
                                         r"tables; got 'ad' \(dim 4\), 'user' \(dim 8\)"):
        build_model(name, cfg, {"deep": list(cfg.features)}, LABELS)


def test_models_with_mixed_dims_that_allow_them(tmp_path):
    cfg = _write_config(tmp_path, MIXED_DIMS)
    model = build_model("dcn_v2", cfg, {"deep": list(cfg.features)}, LABELS)
    assert model(_tiny_batch(4)[0])["click"].shape == (4,)


def test_dlrm_needs_dense_and_sparse_features(tiny):
    with pytest.raises(ValueError, match="'dlrm' needs at least one dense numeric feature"):
        build_model("dlrm", tiny, {"deep": ["ad_id", "age"]}, LABELS)
    with pytest.raises(ValueError, match="'dlrm' needs at least one id-valued feature"):
        build_model("dlrm", tiny, {"deep": ["price"]}, LABELS)


def test_mmoe_needs_two_labels(tiny):
    with pytest.raises(ValueError, match=r"'mmoe' is multi-task; it needs at least 2 labels, "
                                         r"got \['click'\]"):
        build_model("mmoe", tiny, {"deep": list(tiny.features)}, ["click"])


@pytest.mark.parametrize("kwargs, error, match", [
    ({"name": "dcn"}, ValueError, "unknown model 'dcn'.*Did you mean \"dcn_v2\""),
    ({"params": WideDeepParams()}, TypeError, "takes DCNv2Params params, got WideDeepParams"),
    ({"inputs": {"wide": ["ad_id"]}}, ValueError, r"reads input group\(s\) deep; got \['wide'\]"),
    ({"inputs": {"deep": ["ad_idd"]}}, ValueError, "unknown feature 'ad_idd'.*Did you mean"),
    ({"labels": ["clicks"]}, ValueError, "unknown label 'clicks'.*Did you mean \"click\""),
    ({"labels": []}, ValueError, "at least one label"),
    ({"labels": ["click", "click"]}, ValueError, "more than once"),
])
def test_build_model_rejects_bad_arguments(tiny, kwargs, error, match):
    args = {"name": "dcn_v2", "features": tiny, "inputs": {"deep": ["ad_id"]},
            "labels": ["click"], **kwargs}
    with pytest.raises(error, match=match):
        build_model(**args)


# ---- params ----------------------------------------------------------------------------

def test_every_model_has_params_and_input_groups():
    from recsys_dist.config.experiment import MODEL_INPUT_GROUPS

    assert set(MODELS) == set(MODEL_PARAMS) == set(MODEL_INPUT_GROUPS)


def _params_doc(tmp_path: pathlib.Path, text: str):
    path = tmp_path / "model.yaml"
    path.write_text(textwrap.dedent(text))
    return load_yaml(path)


@pytest.mark.parametrize("name", list(MODEL_PARAMS))
def test_params_parse_with_schema_defaults(tmp_path, name):
    doc = _params_doc(tmp_path, "params: {}\n")
    parsed = parse_dataclass(MODEL_PARAMS[name], doc.data["params"], doc, "model.params")
    assert parsed == MODEL_PARAMS[name]()


def test_params_parse_values_and_report_bounds_with_location(tmp_path):
    doc = _params_doc(tmp_path, """\
        good: {cross_layers: 2, low_rank: 8, structure: parallel, hidden_units: [32]}
        bad:
          cross_layers: 0
        """)
    good = parse_dataclass(DCNv2Params, doc.data["good"], doc, "good")
    assert good == DCNv2Params(cross_layers=2, low_rank=8, structure="parallel",
                               hidden_units=[32])
    with pytest.raises(ConfigError, match=r"model.yaml:3: bad.cross_layers: got 0; "
                                          r"expected a value >= 1"):
        parse_dataclass(DCNv2Params, doc.data["bad"], doc, "bad")


@pytest.mark.parametrize("cls, kwargs, match", [
    (DCNv2Params, {"cross_layers": 0}, r"DCNv2Params.cross_layers: got 0; expected a value >= 1"),
    (DCNv2Params, {"structure": "tower"}, r"structure: got 'tower'; expected one of 'stacked'"),
    (WideDeepParams, {"hidden_units": []}, r"hidden_units: got \[\]; expected at least 1"),
    (WideDeepParams, {"hidden_units": [64, 0]}, r"every item must be >= 1"),
    (MMoEParams, {"dropout": 1.0}, r"MMoEParams.dropout: got 1.0; expected a value <= 0.99"),
])
def test_params_reject_bad_values_in_python(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


def test_params_module_imports_without_tensorflow():
    code = ("import sys; import recsys_dist.config.model_params; "
            "assert 'tensorflow' not in sys.modules, 'params imported tensorflow'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PROJECT_ROOT,
                   env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})


# ---- parameter-server strategy ---------------------------------------------------------

PSS_SCRIPT = """\
import os, socket, sys
import numpy as np
import recsys_dist
import tensorflow as tf
from recsys_dist.config.features import load_feature_config
from recsys_dist.models.zoo import MODELS, build_model
sys.path.insert(0, {tests!r})
from test_models import LABELS, _inputs, _loss, _tiny_batch

def port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

spec = {{"worker": [f"127.0.0.1:{{port()}}"], "ps": [f"127.0.0.1:{{port()}}" for _ in range(2)]}}
cluster = tf.train.ClusterSpec(spec)
config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=4)
servers = [tf.distribute.Server(cluster, job_name=job, task_index=i, config=config)
           for job in spec for i in range(len(spec[job]))]
strategy = tf.distribute.experimental.ParameterServerStrategy(
    tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, rpc_layer="grpc"),
    variable_partitioner=tf.distribute.experimental.partitioners.FixedShardsPartitioner(2))
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
features = load_feature_config({features!r})
batch, labels = _tiny_batch(32)
models, optimizers = {{}}, {{}}
with strategy.scope():
    for name in MODELS:
        models[name] = build_model(name, features, _inputs(name, features), LABELS)
        models[name].create_variables()
        optimizers[name] = (tf.keras.optimizers.legacy.Adagrad(0.5),
                            tf.keras.optimizers.legacy.Adam(0.01))
for name, model in models.items():
    tables = [s.variable for m in model.submodules if hasattr(m, "stacks") for s in m.stacks]
    assert all(isinstance(t, tf.__internal__.distribute.ShardedVariable)
               and len(t.variables) == 2 for t in tables), name
    assert ({{v.ref() for v in model.embedding_variables}}
            == {{s.ref() for t in tables for s in t.variables}}), name


@tf.function
def step():
    def replica_step():
        losses = {{}}
        for name, model in models.items():
            embedding, dense = model.embedding_variables, model.dense_variables
            with tf.GradientTape() as tape:
                losses[name] = _loss(model(batch, training=True), labels)
            grads = tape.gradient(losses[name], embedding + dense)
            embedding_opt, dense_opt = optimizers[name]
            embedding_opt.apply_gradients(zip(grads[:len(embedding)], embedding))
            dense_opt.apply_gradients(zip(grads[len(embedding):], dense))
        return losses
    return strategy.run(replica_step)


results = [coordinator.schedule(step) for _ in range(5)]
coordinator.join()
first, last = results[0].fetch(), results[-1].fetch()
for name in MODELS:
    assert last[name] < first[name], (name, first[name], last[name])
    print(name, first[name], last[name], flush=True)
sys.stdout.flush()
os._exit(0)  # in-process servers cannot be shut down cleanly
"""


@pytest.mark.cluster
def test_models_train_with_sharded_tables_on_parameter_servers(tmp_path):
    features = tmp_path / "features.yaml"
    features.write_text(TINY_FEATURES)
    script = tmp_path / "pss.py"
    script.write_text(PSS_SCRIPT.format(tests=str(PROJECT_ROOT / "tests"),
                                        features=str(features)))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=300, cwd=PROJECT_ROOT,
                            env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT),
                                 "GRPC_FAIL_FAST": "use_caller"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert [line.split()[0] for line in result.stdout.splitlines()] == list(MODELS)


@pytest.mark.parametrize("name,params", [
    ("dcn_v2", DCNv2Params(hidden_units=[16], dropout=0.5, batch_norm=True)),
    ("mmoe", MMoEParams(num_experts=2, expert_units=[8], tower_units=[4], dropout=0.5,
                        batch_norm=True)),
])
def test_models_honour_the_training_flag(tiny, name, params):
    """Dropout draws anew and batch norm uses batch statistics only with training=True."""
    model = build_model(name, tiny, _inputs(name, tiny), LABELS, params, seed=3)
    model.create_variables()
    features, _ = _tiny_batch()
    evaluation = [model(features, training=False)["click"].numpy() for _ in range(2)]
    np.testing.assert_array_equal(evaluation[0], evaluation[1])
    training = [model(features, training=True)["click"].numpy() for _ in range(2)]
    assert not np.allclose(training[0], training[1])
    assert not np.allclose(training[0], evaluation[0])
    # training=True moved the batch-norm moving statistics; inference stays deterministic.
    after = model(features, training=False)["click"].numpy()
    assert not np.allclose(after, evaluation[0])
    np.testing.assert_array_equal(after, model(features, training=False)["click"].numpy())
