"""DIEN's layers (``models/interest.py``): a history in time order, the GRU cells (plain
and attentional) and the auxiliary loss, each against the formula computed in numpy."""

from __future__ import annotations

import numpy as np
import pytest

# isort: off
import recsys_dist  # noqa: F401  sets TF_USE_LEGACY_KERAS, so it must come before TensorFlow
import tensorflow as tf
# isort: on

from recsys_dist.models.interest import (
    AUGRUCell,
    AuxiliaryLoss,
    GRUCell,
    TimeOrdered,
    in_time_order,
)

#: float32 rounding of a few chained matmuls and activations of values below 10
RTOL = 1e-5


def test_a_history_is_laid_out_oldest_first_with_its_gaps_closed():
    # row 0: positions 0, 1, 3 (newest first; position 2 has no id); row 1 empty; row 2: 0
    positions = tf.constant([[0, 0], [0, 1], [0, 3], [2, 0]], tf.int64)
    values = tf.constant([[1.0], [2.0], [3.0], [4.0]])
    ordered = in_time_order(values, positions, tf.constant(3, tf.int64))
    assert ordered.sequence.numpy()[..., 0].tolist() == [  # as wide as the longest: 3
        [3.0, 2.0, 1.0],
        [0.0, 0.0, 0.0],
        [4.0, 0.0, 0.0],
    ]
    assert ordered.mask.numpy().tolist() == [
        [True, True, True],
        [False] * 3,
        [True, False, False],
    ]
    empty = in_time_order(tf.zeros([0, 1]), tf.zeros([0, 2], tf.int64), tf.constant(2, tf.int64))
    assert empty.sequence.shape == (2, 1, 1) and not empty.mask.numpy().any()
    gathered = tf.gather_nd(ordered.sequence, ordered.slots)
    np.testing.assert_array_equal(gathered.numpy(), values.numpy())


def _gru_step(x, h, kernel, recurrent, bias, score):
    units = h.shape[1]
    sigmoid = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    xs = x @ kernel + bias
    u = sigmoid(xs[:, :units] + h @ recurrent[:, :units]) * score
    r = sigmoid(xs[:, units : 2 * units] + h @ recurrent[:, units : 2 * units])
    candidate = np.tanh(xs[:, 2 * units :] + (r * h) @ recurrent[:, 2 * units :])
    return (1 - u) * h + u * candidate


def test_the_attentional_gru_scales_its_update_gate_by_the_score():
    rng = np.random.default_rng(0)
    cell = AUGRUCell(3, seed=1)
    x = rng.normal(size=(4, 2)).astype(np.float32)
    h = rng.normal(size=(4, 3)).astype(np.float32)
    score = np.array([[0.0], [0.3], [1.0], [0.7]], np.float32)
    new, _ = cell(tf.constant(np.concatenate([x, score], 1)), [tf.constant(h)])
    weights = [cell.kernel.numpy(), cell.recurrent_kernel.numpy(), cell.bias.numpy()]
    expected = _gru_step(x.astype(np.float64), h.astype(np.float64), *weights, score)
    np.testing.assert_allclose(new.numpy(), expected, rtol=RTOL, atol=1e-6)
    np.testing.assert_array_equal(new.numpy()[0], h[0])  # score 0: the state stays
    plain = GRUCell(3, seed=1)  # the same weights without a score: a score of 1
    plain(tf.constant(x), [tf.constant(h)])
    for variable, value in zip(plain.weights, weights):
        variable.assign(value)
    step, _ = plain(tf.constant(x), [tf.constant(h)])
    expected = _gru_step(x.astype(np.float64), h.astype(np.float64), *weights, np.ones([4, 1]))
    np.testing.assert_allclose(step.numpy(), expected, rtol=RTOL, atol=1e-6)


def test_the_auxiliary_loss_tells_the_next_behaviour_from_another_users():
    rng = np.random.default_rng(1)
    sequence = rng.normal(size=(4, 3, 2)).astype(np.float32)
    mask = np.array([[1, 1, 1], [1, 1, 0], [1, 1, 1], [0, 0, 0]], bool)
    sequence[~mask] = 0
    states = rng.normal(size=(4, 3, 2)).astype(np.float32)
    layer = AuxiliaryLoss([4], seed=2)
    ordered = TimeOrdered(tf.constant(sequence), tf.constant(mask), tf.zeros([0, 2], tf.int64))
    loss = float(layer(tf.constant(states), ordered))
    (hidden, score) = layer.layers_[0], layer.score
    w1, b1, w2, b2 = (v.numpy().astype(np.float64) for v in (*hidden.weights, *score.weights))

    def logit(h, e):
        z = 1 / (1 + np.exp(-(np.concatenate([h, e]) @ w1 + b1)))
        return float((z @ w2 + b2)[0])

    def xent(z, label):
        return max(z, 0) - z * label + np.log1p(np.exp(-abs(z)))

    positives, negatives = [], []
    for row in range(4):
        other = (row - 2) % 4  # the row half a batch away (tf.roll by 2)
        for t in range(2):
            if mask[row, t + 1]:
                positives.append(xent(logit(states[row, t], sequence[row, t + 1]), 1.0))
                if mask[other, t + 1]:
                    negatives.append(xent(logit(states[row, t], sequence[other, t + 1]), 0.0))
    assert len(positives) == 5 and len(negatives) == 4
    expected = np.mean(positives) + np.mean(negatives)
    assert loss == pytest.approx(expected, rel=RTOL)
    empty = TimeOrdered(
        tf.zeros([2, 3, 2]), tf.constant([[True, False, False]] * 2), tf.zeros([0, 2], tf.int64)
    )
    assert float(layer(tf.zeros([2, 3, 2]), empty)) == 0.0
