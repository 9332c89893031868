"""The model blocks (MLP, cross network, FM, dot interaction, mixture of experts): exact
numbers computed by hand with deterministic weights, and their config round trips."""

from __future__ import annotations

import math

import numpy as np
import pytest

# isort: off
import recsys_dist  # noqa: F401  sets TF_USE_LEGACY_KERAS, so it must come before TensorFlow
import tensorflow as tf
# isort: on

from recsys_dist.models.blocks import (
    MLP,
    CrossNetwork,
    DotInteraction,
    FactorizationMachine,
    MixtureOfExperts,
    derive_seed,
)


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
    np.testing.assert_allclose(
        mlp(x, training=False).numpy().ravel(),
        np.array([1.0, 2.0, 3.0]) / math.sqrt(1 + eps),
        rtol=1e-6,
    )
    # Training: batch mean 2, batch variance 2/3.
    np.testing.assert_allclose(
        mlp(x, training=True).numpy().ravel(),
        (np.array([1.0, 2.0, 3.0]) - 2) / math.sqrt(2 / 3 + eps),
        rtol=1e-5,
    )
    norm = next(
        layer for layer in mlp.stack if isinstance(layer, tf.keras.layers.BatchNormalization)
    )
    np.testing.assert_allclose(norm.moving_mean.numpy(), [0.99 * 0 + 0.01 * 2.0], rtol=1e-6)


@pytest.mark.parametrize("units, dropout", [([], 0.0), ([8, 0], 0.0), ([8], 1.0)])
def test_mlp_rejects_bad_arguments(units, dropout):
    with pytest.raises(ValueError, match="MLP (units|dropout)"):
        MLP(units, dropout=dropout)


@pytest.mark.parametrize(
    "num_layers, low_rank, expected",
    [
        (1, None, [0.16, 0.32, 0.48]),  # x1 = x0 * (1 . x0 = 0.6) + x0
        (2, None, [0.256, 0.512, 0.768]),  # x2 = x0 * (1 . x1 = 0.96) + x1
        (1, 2, [0.22, 0.44, 0.66]),  # U V^T x0 with ones: 2 * 0.6 = 1.2 per unit
    ],
)
def test_cross_network_exact_output(num_layers, low_rank, expected):
    cross = CrossNetwork(num_layers, low_rank, kernel_initializer="ones")
    x0 = tf.constant([[0.1, 0.2, 0.3]])
    np.testing.assert_allclose(cross(x0).numpy(), [expected], rtol=1e-6)
    np.testing.assert_allclose(_roundtrip(cross)(x0).numpy(), [expected], rtol=1e-6)


def test_cross_network_low_rank_weight_shapes():
    cross = CrossNetwork(2, low_rank=2)
    cross(tf.zeros([1, 5]))
    assert sorted(tuple(w.shape) for w in cross.trainable_weights) == sorted(
        [(5, 2), (2, 5), (5,)] * 2
    )


def test_cross_network_rejects_bad_arguments():
    with pytest.raises(ValueError, match="num_layers must be a positive integer"):
        CrossNetwork(0)
    with pytest.raises(ValueError, match="low_rank must be None or a positive integer"):
        CrossNetwork(1, low_rank=0)


def test_factorization_machine_exact_output():
    fm = FactorizationMachine()
    x = tf.constant([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])
    # Row 0: <v1,v2> + <v1,v3> + <v2,v3> = 11 + 17 + 39; row 1: orthogonal vectors.
    np.testing.assert_allclose(fm(x).numpy(), [67.0, 0.0])
    np.testing.assert_allclose(_roundtrip(fm)(x).numpy(), [67.0, 0.0])


@pytest.mark.parametrize(
    "self_interaction, expected",
    [
        (False, [11.0, 17.0, 39.0]),  # (0,1) (0,2) (1,2)
        (True, [5.0, 11.0, 17.0, 25.0, 39.0, 61.0]),  # (0,0) (0,1) (0,2) (1,1) (1,2) (2,2)
    ],
)
def test_dot_interaction_exact_output(self_interaction, expected):
    dot = DotInteraction(self_interaction)
    x = tf.constant([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]])
    np.testing.assert_allclose(dot(x).numpy(), [expected])
    np.testing.assert_allclose(_roundtrip(dot)(x).numpy(), [expected])


def test_mixture_of_experts_exact_output():
    moe = MixtureOfExperts(num_experts=2, expert_units=[1], num_tasks=2, kernel_initializer="ones")
    x = tf.constant([[1.0, 2.0]])
    moe(x)
    moe.experts[1].set_weights([np.full([2, 1], 2.0), np.zeros([1])])  # expert 1 -> 6
    moe.gates[0].set_weights([np.zeros([2, 2]), np.zeros([2])])  # uniform gate
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
