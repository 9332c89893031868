"""The attention layers (Dice, DIN's target attention, BST's Transformer layer, position
embedding): exact numbers by hand or from a NumPy re-implementation with the layer's own
weights, padding invariance, all-padding rows, config and SavedModel round trips.

Covers ``models/attention.py``, the Dice activation and activation names of
``models/activations.py``, and ``models/masking.py`` (the masked softmax, the masks and the
argument checks behind the layers' rejections)."""

from __future__ import annotations

import math

import numpy as np
import pytest

# isort: off
import recsys_dist  # noqa: F401  sets TF_USE_LEGACY_KERAS, so it must come before TensorFlow
import tensorflow as tf
# isort: on

from recsys_dist.models import attention as attention_module
from recsys_dist.models.activations import Dice, activation_layer
from recsys_dist.models.attention import (
    LEAKY_RELU_ALPHA,
    PositionEmbedding,
    TargetAttention,
    TransformerEncoderLayer,
)
from recsys_dist.models.masking import masked_softmax

EPS = 1e-8  # Dice's default epsilon


def _roundtrip(layer: tf.keras.layers.Layer) -> tf.keras.layers.Layer:
    clone = type(layer).from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    return clone


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _np_dice(x, alpha, mean, variance):
    p = _sigmoid((x - mean) / np.sqrt(variance + EPS))
    return p * x + (1 - p) * alpha * x


def _np_softmax(scores, mask):
    """Softmax over the real positions of the last axis; 0 where a row has none."""
    largest = np.where(mask, scores, -np.inf).max(-1, keepdims=True)
    exps = np.where(mask, np.exp(scores - np.where(np.isfinite(largest), largest, 0.0)), 0.0)
    total = exps.sum(-1, keepdims=True)
    return exps / np.where(total > 0, total, 1.0)


def _history(seed: int = 0):
    """Query [3, 4], keys [3, 5, 4] and a mask with 3, 1 and 0 real positions."""
    rng = np.random.default_rng(seed)
    query = rng.normal(size=[3, 4]).astype(np.float32)
    keys = rng.normal(size=[3, 5, 4]).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=bool)
    return query, keys, mask


def _garbage_padding(keys: np.ndarray, mask: np.ndarray, seed: int = 1) -> np.ndarray:
    noise = np.random.default_rng(seed).normal(scale=100.0, size=keys.shape)
    return np.where(mask[..., None], keys, noise).astype(np.float32)


def _more_padding(keys: np.ndarray, mask: np.ndarray, extra: int = 3):
    """The same history with ``extra`` more (garbage) padding positions at the end."""
    noise = np.random.default_rng(2).normal(size=[keys.shape[0], extra, keys.shape[2]])
    return (
        np.concatenate([keys, noise.astype(np.float32)], axis=1),
        np.concatenate([mask, np.zeros([mask.shape[0], extra], bool)], axis=1),
    )


# --- masked_softmax -------------------------------------------------------------------


def test_masked_softmax_normalises_over_real_positions_only():
    logits = tf.constant([[1.0, 2.0, 50.0], [3.0, -1e30, 4.0], [7.0, 8.0, 9.0]])
    mask = tf.constant([[True, True, False], [False, False, False], [True, True, True]])
    e = math.e
    np.testing.assert_allclose(
        masked_softmax(logits, mask).numpy(),
        [
            [1 / (1 + e), e / (1 + e), 0.0],
            [0.0, 0.0, 0.0],
            [1 / (1 + e + e * e), e / (1 + e + e * e), e * e / (1 + e + e * e)],
        ],
        rtol=1e-6,
    )


def test_masked_softmax_gradient_is_finite_with_huge_padding_logits():
    logits = tf.constant([[1.0, 3e38], [3e38, -3e38]])
    mask = tf.constant([[True, False], [False, False]])
    with tf.GradientTape() as tape:
        tape.watch(logits)
        weights = masked_softmax(logits, mask)
        loss = tf.reduce_sum(weights * tf.constant([[2.0, 5.0], [1.0, 1.0]]))
    np.testing.assert_array_equal(weights.numpy(), [[1.0, 0.0], [0.0, 0.0]])
    assert np.all(np.isfinite(tape.gradient(loss, logits).numpy()))


# --- Dice and activation_layer ----------------------------------------------------------


def test_dice_uses_batch_statistics_when_training_and_moving_ones_otherwise():
    dice = Dice()
    x = np.array([[1.0, -2.0], [2.0, 0.0], [3.0, 5.0]], dtype=np.float32)
    # Before any update: moving mean 0, moving variance 1; alpha starts at 0.
    np.testing.assert_allclose(
        dice(x, training=False).numpy(), _np_dice(x, 0.0, 0.0, 1.0), rtol=1e-6
    )
    dice.alpha.assign([0.5, -0.25])
    # Training: per unit, mean [2, 1] and (biased) variance [2/3, 26/3].
    mean, variance = np.array([2.0, 1.0]), np.array([2 / 3, 26 / 3])
    np.testing.assert_allclose(
        dice(x, training=True).numpy(),
        _np_dice(x, np.array([0.5, -0.25]), mean, variance),
        rtol=1e-6,
    )
    np.testing.assert_allclose(dice.moving_mean.numpy(), 0.01 * mean, rtol=1e-6)
    np.testing.assert_allclose(dice.moving_variance.numpy(), 0.99 + 0.01 * variance, rtol=1e-6)
    # Inference now uses the moved statistics.
    np.testing.assert_allclose(
        dice(x, training=False).numpy(),
        _np_dice(x, np.array([0.5, -0.25]), 0.01 * mean, 0.99 + 0.01 * variance),
        rtol=1e-6,
    )


def test_dice_statistics_ignore_padding_rows_and_an_all_padding_batch():
    x = np.array([[[1.0], [2.0], [100.0]], [[3.0], [-50.0], [7.0]]], dtype=np.float32)
    mask = np.array([[1, 1, 0], [1, 0, 0]], dtype=np.float32)  # a float mask
    dice = Dice(momentum=0.5)
    out = dice(x, training=True, mask=mask).numpy()
    # Real values 1, 2, 3: mean 2, variance 2/3.
    np.testing.assert_allclose(out, _np_dice(x, 0.0, 2.0, 2 / 3), rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(dice.moving_mean.numpy(), [1.0], rtol=1e-6)
    np.testing.assert_allclose(dice.moving_variance.numpy(), [0.5 + 0.5 * 2 / 3], rtol=1e-6)

    out = dice(x, training=True, mask=np.zeros([2, 3], bool)).numpy()
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(dice.moving_mean.numpy(), [1.0], rtol=1e-6)  # not moved


def test_dice_takes_the_training_flag_as_a_tensor_inside_tf_function():
    dice = Dice()
    x = tf.constant([[1.0], [3.0]])
    call = tf.function(lambda training: dice(x, training=training))
    np.testing.assert_allclose(
        call(tf.constant(True)).numpy(), _np_dice(x.numpy(), 0.0, 2.0, 1.0), rtol=1e-6
    )
    np.testing.assert_allclose(dice.moving_mean.numpy(), [0.02], rtol=1e-6)
    np.testing.assert_allclose(
        call(tf.constant(False)).numpy(), _np_dice(x.numpy(), 0.0, 0.02, 0.99 + 0.01), rtol=1e-6
    )


def test_dice_config_roundtrip():
    dice = Dice(epsilon=1e-6, momentum=0.9)
    assert _roundtrip(dice).get_config()["epsilon"] == 1e-6


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"epsilon": 0.0}, "Dice epsilon must be a positive number. Received: epsilon=0.0"),
        ({"epsilon": "1e-8"}, "Dice epsilon must be a positive number. Received: epsilon='1e-8'"),
        ({"momentum": 1.0}, r"Dice momentum must be in \[0, 1\). Received: momentum=1.0"),
    ],
)
def test_dice_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Dice(**kwargs)


def test_activation_layer_builds_each_named_activation():
    x = tf.constant([[-2.0, 3.0]])
    assert isinstance(activation_layer("dice", name="d"), Dice)
    assert activation_layer("dice", name="d").name == "d"
    prelu = activation_layer("prelu")
    assert isinstance(prelu, tf.keras.layers.PReLU)
    np.testing.assert_allclose(prelu(x).numpy(), [[0.0, 3.0]])  # alpha starts at 0
    assert prelu.alpha.shape == (2,)
    np.testing.assert_allclose(activation_layer("relu")(x).numpy(), [[0.0, 3.0]])
    np.testing.assert_allclose(
        activation_layer("sigmoid")(x).numpy(), _sigmoid(x.numpy()), rtol=1e-6
    )


@pytest.mark.parametrize("name", ["tanh", "Dice", "", None])
def test_activation_layer_rejects_unknown_names(name):
    with pytest.raises(
        ValueError,
        match=(
            r"activation must be one of 'dice', 'prelu', "
            rf"'relu', 'sigmoid'. Received: activation={name!r}"
        ),
    ):
        activation_layer(name)


# --- TargetAttention ------------------------------------------------------------------


@pytest.mark.parametrize(
    "normalization, expected",
    [
        ("none", [7.0, 8.0]),
        ("softmax", [1 / (1 + math.e), math.e / (1 + math.e)]),
    ],
)
def test_target_attention_exact_output(normalization, expected):
    att = TargetAttention(
        [1], activation="relu", normalization=normalization, kernel_initializer="ones"
    )
    query = tf.constant([[1.0, 2.0]])
    keys = tf.constant([[[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]])
    mask = tf.constant([[True, True, False]])
    # u_0 = sum [q, k_0, q - k_0, q * k_0] = 3 + 1 + 2 + 1 = 7; u_1 = 3 + 1 + 2 + 2 = 8.
    np.testing.assert_allclose(att(query, keys, mask).numpy(), [expected], rtol=1e-6)
    np.testing.assert_allclose(_roundtrip(att)(query, keys, mask).numpy(), [expected], rtol=1e-6)


def _np_target_attention(layer, query, keys, mask, training):
    """Layer's forward pass in NumPy from its current weights (read before the call)."""
    keys = np.where(mask[..., None], keys, 0.0)
    queries = np.broadcast_to(query[:, None, :], keys.shape)
    x = np.concatenate([queries, keys, queries - keys, queries * keys], axis=-1)
    x = x.reshape(-1, x.shape[-1])
    rows = mask.reshape(-1)
    for dense, act in layer.hidden:
        kernel, bias = dense.get_weights()
        x = x @ kernel + bias
        if training:
            mean, variance = x[rows].mean(0), x[rows].var(0)
        else:
            mean, variance = act.moving_mean.numpy(), act.moving_variance.numpy()
        x = _np_dice(x, act.alpha.numpy(), mean, variance)
    kernel, bias = layer.score.get_weights()
    scores = (x @ kernel + bias).reshape(mask.shape)
    if layer.normalization == "softmax":
        weights = _np_softmax(scores, mask)
    else:
        weights = np.where(mask, scores, 0.0)
    return np.einsum("bl,bld->bd", weights, keys), weights


@pytest.mark.parametrize("normalization", ["none", "softmax"])
@pytest.mark.parametrize("training", [False, True])
def test_target_attention_with_dice_matches_numpy(normalization, training):
    query, keys, mask = _history()
    att = TargetAttention([6, 3], normalization=normalization, seed=7)
    att(query, keys, mask)  # builds
    for _, dice in att.hidden:
        dice.alpha.assign(np.linspace(-0.5, 0.5, dice.alpha.shape[0]))
        dice.moving_mean.assign(np.full(dice.moving_mean.shape, 0.3))
        dice.moving_variance.assign(np.full(dice.moving_variance.shape, 2.0))
    expected, expected_weights = _np_target_attention(att, query, keys, mask, training)
    outputs, weights = att(query, keys, mask, training=training, return_weights=True)
    # float32 against float64: sums of at most 16 terms of order 1 per stage, a few eps of
    # order-1 values (1.8e-7 seen), well inside rtol 1e-5 + atol 1e-6
    np.testing.assert_allclose(outputs.numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weights.numpy(), expected_weights, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(outputs.numpy()[2], np.zeros(4))


@pytest.mark.parametrize("normalization", ["none", "softmax"])
@pytest.mark.parametrize("activation", ["dice", "prelu", "sigmoid"])
def test_target_attention_ignores_keys_at_padding_positions(normalization, activation):
    query, keys, mask = _history()
    att = TargetAttention([8, 4], activation=activation, normalization=normalization, seed=0)
    for training in (True, False):
        clean, clean_weights = att(query, keys, mask, training=training, return_weights=True)
        noisy, noisy_weights = att(
            query, _garbage_padding(keys, mask), mask, training=training, return_weights=True
        )
        # padding keys are zeroed before any use: the same computation, the same values
        np.testing.assert_allclose(noisy.numpy(), clean.numpy(), rtol=1e-6)
        np.testing.assert_allclose(noisy_weights.numpy(), clean_weights.numpy(), rtol=1e-6)
        np.testing.assert_array_equal(clean_weights.numpy()[~mask], 0.0)
        # Nor does the number of padding positions (Dice's statistics count real ones only).
        longer_keys, longer_mask = _more_padding(keys, mask)
        longer, longer_weights = att(
            query, longer_keys, longer_mask, training=training, return_weights=True
        )
        # Other shapes: softmax's sum and the weighted sum over positions may be formed in
        # another order, so an output may move by float32 rounding, at most about L eps
        # times the sum of its terms' absolute values (rtol alone fails a sum near 0).
        terms = np.einsum("bl,bld->bd", np.abs(clean_weights.numpy()), np.abs(keys))
        atol = 2 * longer_mask.shape[1] * np.finfo(np.float32).eps * terms.max()
        np.testing.assert_allclose(longer.numpy(), clean.numpy(), rtol=1e-5, atol=atol)
        # weights are exp(s - max) / sum of positive terms: no cancellation, rtol holds
        np.testing.assert_allclose(longer_weights.numpy()[:, :5], clean_weights.numpy(), rtol=1e-5)
    # Even NaN keys at padding positions stay out.
    nan_keys = np.where(mask[..., None], keys, np.nan).astype(np.float32)
    np.testing.assert_allclose(
        att(query, nan_keys, mask, training=True).numpy(),
        att(query, keys, mask, training=True).numpy(),
        rtol=1e-6,
    )


@pytest.mark.parametrize("normalization", ["none", "softmax"])
def test_target_attention_all_padding_row_is_zero_with_finite_gradients(normalization):
    query, keys, mask = _history()
    att = TargetAttention([4], normalization=normalization, seed=0)
    keys = tf.constant(keys)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(keys)
        outputs, weights = att(query, keys, mask, training=True, return_weights=True)
        loss = tf.reduce_sum(tf.square(outputs))
    # masking writes exact zeros: the padding row's output and weights are 0 exactly
    np.testing.assert_array_equal(outputs.numpy()[2], np.zeros(4))
    np.testing.assert_array_equal(weights.numpy()[2], np.zeros(5))
    grads = tape.gradient(loss, [keys, *att.trainable_variables])
    assert all(np.all(np.isfinite(g.numpy())) for g in grads)
    np.testing.assert_array_equal(grads[0].numpy()[~mask], 0.0)  # nothing flows to padding
    for variable, grad in zip(att.trainable_variables, grads[1:]):
        if normalization == "softmax" and variable is att.score.bias:
            # softmax(s + c) == softmax(s): the score's bias shifts every score of a row
            # alike, so its gradient, the sum over a row of dL/ds_j = w_j (g_j - sum_k w_k
            # g_k) with g = dL/dw, is 0 in exact arithmetic. What is left is float32
            # rounding of those terms: at most a few ulps of their absolute sum.
            w = weights.numpy().astype(np.float64)
            # dL/dw_l = 2 outputs . k_l (outputs = sum_l w_l k_l, L = |outputs|^2)
            k = np.where(mask[..., None], keys.numpy(), 0.0).astype(np.float64)
            g = 2 * np.einsum("bd,bld->bl", outputs.numpy().astype(np.float64), k)
            terms = w * (np.abs(g) + np.abs((w * g).sum(axis=1, keepdims=True)))
            bound = 4 * w.size * np.finfo(np.float32).eps * terms.sum()
            assert np.all(np.abs(grad.numpy()) <= bound), (grad.numpy(), bound)
        else:
            # no symmetry cancels any other weight's gradient (Dice's alpha included)
            assert np.any(grad.numpy() != 0), variable.name


def test_target_attention_softmax_weights_sum_to_one_over_real_positions():
    query, keys, mask = _history()
    att = TargetAttention([4], normalization="softmax", seed=0)
    _, weights = att(query, keys, mask.astype(np.float32), return_weights=True)
    np.testing.assert_allclose(weights.numpy().sum(axis=1), [1.0, 1.0, 0.0], rtol=1e-6)
    np.testing.assert_allclose(weights.numpy()[1], [1.0, 0.0, 0.0, 0.0, 0.0])


def test_target_attention_dice_training_flag():
    query, keys, mask = _history()
    att = TargetAttention([4], seed=0)
    inference = att(query, keys, mask, training=False).numpy()
    np.testing.assert_array_equal(att(query, keys, mask).numpy(), inference)  # default
    dice = att.hidden[0][1]
    assert np.all(dice.moving_mean.numpy() == 0.0)
    training = att(query, keys, mask, training=True).numpy()
    assert not np.allclose(training, inference)
    assert np.all(dice.moving_mean.numpy() != 0.0)


def test_target_attention_uses_the_keras_mask_of_the_keys():
    ids = tf.constant([[3, 1, 0, 0]])
    embedded = tf.keras.layers.Embedding(5, 4, mask_zero=True)(ids)
    query = tf.ones([1, 4])
    att = TargetAttention([4], seed=0)
    np.testing.assert_allclose(
        att(query, embedded).numpy(), att(query, embedded, ids > 0).numpy(), rtol=1e-6
    )


def test_target_attention_same_seed_same_weights():
    query, keys, mask = _history()
    first, second, other = (TargetAttention([4, 2], seed=s) for s in (1, 1, 2))
    for att in (first, second, other):
        att(query, keys, mask)
    for a, b in zip(first.get_weights(), second.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first.get_weights()[0], other.get_weights()[0])
    kernels = [dense.kernel.numpy() for dense, _ in first.hidden]
    assert not np.array_equal(kernels[1], first.score.kernel.numpy()[: kernels[1].shape[0]])


_HIDDEN = "hidden_units must be a non-empty list of positive integers. Received: "


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"hidden_units": []}, _HIDDEN + r"hidden_units=\[\]"),
        ({"hidden_units": [8, 0]}, _HIDDEN + r"hidden_units=\[8, 0\]"),
        ({"hidden_units": [-1]}, _HIDDEN + r"hidden_units=\[-1\]"),
        ({"hidden_units": 80}, _HIDDEN + "hidden_units=80"),
        (
            {"activation": "tanh"},
            "activation must be one of 'dice', 'prelu', 'relu', 'sigmoid'. "
            "Received: activation='tanh'",
        ),
        (
            {"normalization": "sum"},
            "normalization must be one of 'none', 'softmax'. Received: normalization='sum'",
        ),
    ],
)
def test_target_attention_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=f"TargetAttention {match}"):
        TargetAttention(**kwargs)


def test_target_attention_rejects_query_and_keys_of_different_dims():
    with pytest.raises(ValueError, match="query and keys must have the same dim D"):
        TargetAttention([4])(tf.ones([2, 3]), tf.ones([2, 5, 4]))


# --- TransformerEncoderLayer ------------------------------------------------------------


def _np_layer_norm(x, norm):
    gamma, beta = norm.get_weights()
    mean, variance = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + norm.epsilon) * gamma + beta


def _np_transformer(layer, x, mask):
    def dense(d, v):
        kernel, bias = d.get_weights()
        return v @ kernel + bias

    batch, length, dim = x.shape
    heads, width = layer.num_heads, dim // layer.num_heads
    x = np.where(mask[..., None], x, 0.0)

    def split(v):
        return v.reshape(batch, length, heads, width).transpose(0, 2, 1, 3)

    q, k, v = (split(dense(d, x)) for d in (layer.query_dense, layer.key_dense, layer.value_dense))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(width)
    key_mask = np.broadcast_to(mask[:, None, None, :], scores.shape)
    weights = _np_softmax(scores, key_mask)
    attended = dense(
        layer.output_dense, (weights @ v).transpose(0, 2, 1, 3).reshape(batch, length, dim)
    )
    x = _np_layer_norm(x + attended, layer.attention_norm)
    inner = dense(layer.ffn_inner, x)
    inner = np.where(inner > 0, inner, LEAKY_RELU_ALPHA * inner)
    x = _np_layer_norm(x + dense(layer.ffn_outer, inner), layer.ffn_norm)
    return np.where(mask[..., None], x, 0.0)


def test_transformer_layer_matches_numpy_and_zeroes_padding():
    _, x, mask = _history()
    layer = TransformerEncoderLayer(num_heads=2, seed=3)
    layer(x, mask)
    # Non-trivial layer-norm weights, so they are checked too.
    for norm in (layer.attention_norm, layer.ffn_norm):
        norm.set_weights([np.array([1.0, 2.0, 0.5, 1.5]), np.array([0.1, -0.1, 0.2, 0.0])])
    outputs = layer(x, mask, training=False).numpy()
    # float32 against float64: layer-normed outputs of order 1, from sums of at most 16
    # terms per stage: a few eps of 1, well inside 1e-5
    np.testing.assert_allclose(outputs, _np_transformer(layer, x, mask), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(outputs[~mask], 0.0)
    assert np.all(np.abs(outputs[mask]) > 0)


def test_transformer_layer_ignores_padding_and_all_padding_rows_are_zero(monkeypatch):
    _, x, mask = _history()
    layer = TransformerEncoderLayer(num_heads=4, dropout=0.0, seed=0)
    clean = layer(x, mask, training=True).numpy()
    # padding positions are zeroed before any use: the same computation, the same values
    np.testing.assert_allclose(
        layer(_garbage_padding(x, mask), mask, training=True).numpy(), clean, rtol=1e-5, atol=1e-6
    )
    np.testing.assert_array_equal(clean[2], np.zeros([5, 4]))
    longer_x, longer_mask = _more_padding(x, mask)
    longer = layer(longer_x, longer_mask, training=True).numpy()
    # Other shapes: the sums over positions (softmax's, weights @ values) may be formed in
    # another order, each rounding by up to L eps of its terms' absolute values, which are
    # of the outputs' scale (layer-normed, |y| <= sqrt(D - 1)); the two layer norms rescale
    # by 1/std, about 1 here. One padding position let in moves outputs by 0.5.
    atol = 8 * longer_mask.shape[1] * np.finfo(np.float32).eps * np.abs(clean).max()
    np.testing.assert_allclose(longer[:, :5], clean, rtol=1e-5, atol=atol)
    inputs = tf.constant(np.where(mask[..., None], x, np.nan).astype(np.float32))
    # A fixed projection of the outputs, not their squares: the squares of a LayerNorm's
    # output (gamma 1, beta 0) sum to D var / (var + epsilon) per position, all but
    # constant, so every weight before it would get a gradient of order epsilon only.
    projection = tf.constant(np.random.default_rng(3).normal(size=x.shape).astype(np.float32))
    softmaxes = []

    def recorded_softmax(logits, softmax_mask, axis=-1):
        softmaxes.append(masked_softmax(logits, softmax_mask, axis))
        return softmaxes[-1]

    monkeypatch.setattr(attention_module, "masked_softmax", recorded_softmax)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(inputs)
        loss = tf.reduce_sum(layer(inputs, mask, training=True) * projection)
    assert np.isfinite(loss.numpy())
    grads = tape.gradient(loss, [inputs, *layer.trainable_variables])
    assert all(np.all(np.isfinite(g.numpy())) for g in grads)
    np.testing.assert_array_equal(grads[0].numpy()[~mask], 0.0)  # tf.where: exact zeros
    for variable, grad in zip(layer.trainable_variables, grads[1:]):
        if variable is layer.key_dense.bias:
            # The key's bias adds q_i . b to every score of query i alike, which softmax
            # ignores: its gradient sum_{b,i,j} dL/ds_ij q_i / sqrt(W) is 0 in exact
            # arithmetic (sum_j dL/ds_ij = 0); what is left is float32 rounding of its terms.
            (weights,) = softmaxes
            w = weights.numpy().astype(np.float64)  # [B, H, L, L]
            g = tape.gradient(loss, weights).numpy().astype(np.float64)
            terms = (w * (np.abs(g) + np.abs((w * g).sum(-1, keepdims=True)))).sum(-1)
            batch, heads, length, _ = w.shape
            width = x.shape[-1] // heads
            real = np.where(mask[..., None], x, 0.0).astype(np.float32)
            q = layer.query_dense(real).numpy().reshape(batch, length, heads, width)
            scale = np.einsum("bhi,bihd->hd", terms, np.abs(q)).ravel() / math.sqrt(width)
            bound = 4 * batch * length * length * np.finfo(np.float32).eps * scale
            assert np.all(np.abs(grad.numpy()) <= bound), (grad.numpy(), bound)
        else:
            # no symmetry cancels any other weight's gradient
            assert np.any(grad.numpy() != 0), variable.name


def test_transformer_layer_dropout_only_when_training():
    _, x, _ = _history()
    layer = TransformerEncoderLayer(num_heads=2, dropout=0.5, seed=0)
    inference = layer(x, training=False).numpy()
    np.testing.assert_array_equal(layer(x).numpy(), inference)
    assert not np.allclose(layer(x, training=True).numpy(), inference)


def test_transformer_layer_takes_the_keras_mask_and_passes_it_on():
    ids = tf.constant([[3, 1, 0, 0]])
    embedded = tf.keras.layers.Embedding(5, 4, mask_zero=True)(ids)
    layer = TransformerEncoderLayer(num_heads=2, seed=0)
    outputs = layer(embedded)
    np.testing.assert_array_equal(outputs.numpy()[0, 2:], 0.0)
    np.testing.assert_array_equal(outputs._keras_mask.numpy(), [[True, True, False, False]])


@pytest.mark.parametrize("ffn_units, inner", [(None, 32), (6, 6)])
def test_transformer_layer_feed_forward_width_and_config_roundtrip(ffn_units, inner):
    _, x, mask = _history()
    x = np.tile(x, [1, 1, 2])  # D = 8
    layer = TransformerEncoderLayer(num_heads=2, ffn_units=ffn_units, ffn_activation="gelu", seed=5)
    layer(x, mask)
    assert layer.ffn_inner.kernel.shape == (8, inner)
    clone = _roundtrip(layer)
    clone(x, mask)
    for a, b in zip(layer.get_weights(), clone.get_weights()):
        np.testing.assert_array_equal(a, b)  # the seed is in the config
    np.testing.assert_allclose(clone(x, mask).numpy(), layer(x, mask).numpy(), rtol=1e-6)
    # One seed per weight: the four projections start different.
    assert not np.array_equal(layer.query_dense.kernel.numpy(), layer.key_dense.kernel.numpy())


def test_transformer_layer_rejects_a_dim_not_divisible_by_num_heads():
    with pytest.raises(ValueError, match="input dim D=10 must be divisible by num_heads=3"):
        TransformerEncoderLayer(num_heads=3)(tf.ones([2, 5, 10]))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_heads": 0}, "num_heads must be a positive integer. Received: num_heads=0"),
        ({"num_heads": -2}, "num_heads must be a positive integer. Received: num_heads=-2"),
        ({"num_heads": 2.0}, "num_heads must be a positive integer. Received: num_heads=2.0"),
        ({"ffn_units": 0}, "ffn_units must be None or a positive integer. Received: ffn_units=0"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\). Received: dropout=1.0"),
        (
            {"ffn_activation": "tanh"},
            "ffn_activation must be one of 'leaky_relu', 'gelu', "
            "'relu'. Received: ffn_activation='tanh'",
        ),
    ],
)
def test_transformer_layer_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=f"TransformerEncoderLayer {match}"):
        TransformerEncoderLayer(**kwargs)


# --- PositionEmbedding ------------------------------------------------------------------


def test_position_embedding_adds_the_row_of_each_position():
    pos = PositionEmbedding(max_length=4, dim=2)
    x = tf.constant([[[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]])
    pos(x)
    pos.table.assign([[0.0, 0.1], [10.0, 10.1], [20.0, 20.1], [30.0, 30.1]])
    # float32: 20.1 is stored to half an ulp and the sum rounds by another, up to 2^-23
    # (1.2e-7) of the decimal sums, more than assert_allclose's default rtol of 1e-7
    np.testing.assert_allclose(
        pos(x).numpy(), [[[1.0, 1.1], [12.0, 12.1], [23.0, 23.1]]], rtol=1e-6
    )
    np.testing.assert_allclose(
        pos(x, tf.constant([[1.0, 1.0, 0.0]])).numpy(),
        [[[1.0, 1.1], [12.0, 12.1], [0.0, 0.0]]],
        rtol=1e-6,
    )


def test_position_embedding_seed_and_config_roundtrip():
    x = tf.zeros([2, 3, 4])
    first, second = PositionEmbedding(5, 4, seed=1), PositionEmbedding(5, 4, seed=1)
    np.testing.assert_array_equal(first(x).numpy(), second(x).numpy())
    assert not np.array_equal(first(x).numpy(), PositionEmbedding(5, 4, seed=2)(x).numpy())
    np.testing.assert_array_equal(_roundtrip(first)(x).numpy(), first(x).numpy())


def test_position_embedding_rejects_bad_arguments_and_inputs():
    with pytest.raises(
        ValueError,
        match="PositionEmbedding max_length must be a positive integer. Received: max_length=0",
    ):
        PositionEmbedding(0, 4)
    with pytest.raises(
        ValueError, match="PositionEmbedding dim must be a positive integer. Received: dim=None"
    ):
        PositionEmbedding(3, None)
    with pytest.raises(ValueError, match="longer than max_length=3"):
        PositionEmbedding(3, 4)(tf.zeros([1, 5, 4]))
    with pytest.raises(ValueError, match=r"expects inputs \[B, L, dim=4\]"):
        PositionEmbedding(3, 4)(tf.zeros([1, 2, 6]))
    pos = PositionEmbedding(3, 4)
    check = tf.function(
        lambda x: pos(x), input_signature=[tf.TensorSpec([None, None, 4], tf.float32)]
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than max_length=3"):
        check(tf.zeros([1, 5, 4]))


# --- A model of all of them: SavedModel round trip --------------------------------------


def _tiny_model() -> tf.keras.Model:
    query = tf.keras.Input([4], name="query")
    history = tf.keras.Input([5, 4], name="history")
    mask = tf.keras.Input([5], dtype=tf.bool, name="mask")
    din = TargetAttention([8, 4], normalization="none", seed=1)(query, history, mask)
    sequence = PositionEmbedding(5, 4, seed=2)(history, mask)
    sequence = TransformerEncoderLayer(num_heads=2, seed=3)(sequence, mask)
    pooled = tf.reduce_sum(sequence, axis=1)
    logit = tf.keras.layers.Dense(1, kernel_initializer="ones")(
        tf.keras.layers.Concatenate()([din, pooled, query])
    )
    return tf.keras.Model({"query": query, "history": history, "mask": mask}, logit)


def test_saved_model_roundtrip_gives_the_same_predictions(tmp_path):
    query, keys, mask = _history()
    inputs = {"query": query, "history": keys, "mask": mask}
    model = _tiny_model()
    for _ in range(10):  # moves Dice's statistics 10% of the way, which must be saved too
        model(inputs, training=True)
    expected = model(inputs, training=False).numpy()
    assert np.all(np.isfinite(expected))
    tf.saved_model.save(model, str(tmp_path))
    loaded = tf.saved_model.load(str(tmp_path))
    served = loaded.signatures["serving_default"](
        query=tf.constant(query), history=tf.constant(keys), mask=tf.constant(mask)
    )
    # The SavedModel runs graph kernels (fused by grappler), this model eager ones: float32
    # rounding in other places. A logit is the sum of 12 inputs (their absolute values sum
    # to about 12, against a logit of 1.5: rtol alone is too tight), each rounded in a few
    # stages of its own (sums over L = 5 positions, layer norm): within some 16 eps of the
    # sum of the terms' absolute values. Dice's statistics not saved move a logit by 1e-3.
    concat = tf.keras.Model(model.inputs, model.layers[-2].output)(inputs, training=False)
    atol = 16 * np.finfo(np.float32).eps * np.abs(concat.numpy()).sum(axis=-1).max()
    np.testing.assert_allclose(next(iter(served.values())).numpy(), expected, rtol=0, atol=atol)
    np.testing.assert_allclose(loaded(inputs, training=False).numpy(), expected, rtol=0, atol=atol)
