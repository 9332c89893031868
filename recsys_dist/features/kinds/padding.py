"""The padded ``{"ids", "weights"}`` input of multi-valued kinds (multi_categorical and
sequence): ``[N, L]`` each, L the feature's ``max_length``, weight 0 at padding."""

from __future__ import annotations

from recsys_dist.lazy import tensorflow as tf


def padded(
    ids: tf.Tensor,
    weight_values: tf.Tensor | None,
    nrows: tf.Tensor,
    rowids: tf.Tensor,
    splits: tf.Tensor,
    keep: tf.Tensor | None,
    max_length: int,
) -> dict[str, tf.Tensor]:
    """``{"ids", "weights"}``, ``[N, max_length]`` each, from flat ids and row ids: each
    row's first ``max_length`` kept ids from the left with their weights (``None``: 1);
    padding id 0, weight 0.

    The slot of each id is its position among its row's kept ids; dropped ids (``keep``
    false, or past ``max_length``) get slot -1, which the segment sums leave out."""
    nrows = tf.cast(nrows, tf.int64)
    kept = tf.ones(tf.shape(rowids), tf.int64) if keep is None else tf.cast(keep, tf.int64)
    before = tf.cumsum(kept, exclusive=True)
    position = before - tf.gather(before, tf.gather(splits, rowids))
    slot = rowids * max_length + position
    if keep is not None:
        slot = tf.where(keep, slot, -1)
    slot = tf.where(position < max_length, slot, -1)
    cells = nrows * max_length
    dense_ids = tf.reshape(tf.math.unsorted_segment_sum(ids, slot, cells), [-1, max_length])
    if weight_values is None:
        weight_values = tf.ones(tf.shape(ids), tf.float32)
    weights = tf.reshape(tf.math.unsorted_segment_sum(weight_values, slot, cells), [-1, max_length])
    dense_ids.set_shape([None, max_length])
    weights.set_shape([None, max_length])
    return {"ids": dense_ids, "weights": weights}


def padded_zeros(batch_size: int, max_length: int) -> dict[str, tf.Tensor]:
    """An all-padding input of ``batch_size`` rows (to build variables)."""
    shape = [batch_size, max_length]
    return {"ids": tf.zeros(shape, tf.int64), "weights": tf.zeros(shape)}
