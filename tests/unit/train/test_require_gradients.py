"""A training step refuses an embedding table that gets no gradient (it would keep its
initial rows without a word)."""

from __future__ import annotations

import pytest
import tensorflow as tf

from recsys_dist.train.step import require_gradients


def test_a_table_without_a_gradient_is_named():
    read, unread = (
        tf.Variable(tf.ones([3, 2]), name="user_emb"),
        tf.Variable(tf.ones([3, 2]), name="item_emb"),
    )
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(read, [0, 2]))
    grads = tape.gradient(loss, [read, unread])
    with pytest.raises(
        RuntimeError,
        match=r"no gradient reaches the embedding variables "
        r"\['item_emb:0'\]",
    ):
        require_gradients([read, unread], grads)
    require_gradients([read], grads[:1])  # every table read: nothing to say
