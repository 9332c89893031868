"""Masks of padded sequences, shared by the attention layers and Dice: a mask as bool,
the softmax over real positions, and the argument checks the sequence layers share.

Every mask is ``[B, L]``, bool or float (non-zero = a real position).
"""

from __future__ import annotations

import tensorflow as tf


def is_positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_choice(where: str, name: str, value: object, allowed: tuple[str, ...]) -> None:
    """Raises ValueError naming ``where``'s argument ``name`` unless ``value`` is allowed."""
    if value not in allowed:
        raise ValueError(
            f"{where}{name} must be one of {', '.join(map(repr, allowed))}. "
            f"Received: {name}={value!r}"
        )


def bool_mask(mask: tf.Tensor | None, like: tf.Tensor) -> tf.Tensor:
    """``mask`` as bool, or all-true of ``like``'s shape minus its last axis when None."""
    if mask is None:
        return tf.ones(tf.shape(like)[:-1], tf.bool)
    mask = tf.convert_to_tensor(mask)
    if mask.dtype == tf.bool:
        return mask
    return tf.not_equal(mask, tf.zeros([], mask.dtype))


def masked_softmax(logits: tf.Tensor, mask: tf.Tensor, axis: int = -1) -> tf.Tensor:
    """Softmax of ``logits`` over the positions where ``mask`` is true, 0 elsewhere.

    ``w_l = exp(s_l - m) / sum_{j real} exp(s_j - m)`` for real l, with m the maximum over
    real positions; a slice without any real position is all zeros. Padding logits may be
    anything finite: they never reach an ``exp``, so the gradient is finite too.

    Args:
      logits: Scores, any shape.
      mask: Bool mask broadcastable to ``logits``.
      axis: Axis to normalise over.

    Returns:
      Weights of ``logits``' shape and dtype, summing to 1 along ``axis`` (or 0 when the
      slice has no real position).

    Example:
      >>> masked_softmax(tf.constant([[0.0, 0.0, 9.0]]), tf.constant([[True, True, False]]))
      <tf.Tensor: shape=(1, 3), dtype=float32, numpy=array([[0.5, 0.5, 0. ]], dtype=float32)>
    """
    mask = tf.broadcast_to(mask, tf.shape(logits))
    lowest = tf.fill(tf.shape(logits), logits.dtype.min)
    largest = tf.reduce_max(tf.where(mask, logits, lowest), axis=axis, keepdims=True)
    any_real = tf.reduce_any(mask, axis=axis, keepdims=True)
    largest = tf.stop_gradient(tf.where(any_real, largest, tf.zeros_like(largest)))
    # exp(0) = 1 at padding positions, then multiplied by 0: no overflow, no NaN gradient.
    shifted = tf.where(mask, logits - largest, tf.zeros_like(logits))
    exps = tf.exp(shifted) * tf.cast(mask, logits.dtype)
    total = tf.reduce_sum(exps, axis=axis, keepdims=True)
    return exps / tf.where(total > 0, total, tf.ones_like(total))


def ragged_softmax(scores: tf.Tensor, rows: tf.Tensor, batch: tf.Tensor) -> tf.Tensor:
    """Softmax of ``scores`` ``[R]`` within each example of ``rows`` ``[R]`` (of ``batch``
    examples): the ragged form of :func:`masked_softmax`, over real positions only."""
    largest = tf.stop_gradient(tf.math.unsorted_segment_max(scores, rows, batch))
    exp = tf.exp(scores - tf.gather(largest, rows))
    return exp / tf.gather(tf.math.unsorted_segment_sum(exp, rows, batch), rows)
