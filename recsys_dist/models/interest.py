"""DIEN's layers (Zhou et al., 2019, "Deep Interest Evolution Network for Click-Through
Rate Prediction"): a history in time order, the GRU over it, its auxiliary loss, and the
attention-gated GRU that follows the interest relevant to the candidate.

Shape letters: B batch size, L a history's ``max_length``, G the dim of one position,
R the batch's real positions. A history arrives newest first at its real positions
(:class:`~recsys_dist.models.behaviour.History`); :func:`in_time_order` lays it out
oldest first, real positions at the front of each row, so a GRU's state after the last
real step is the row's final interest and padding never reaches it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from recsys_dist.models.blocks import derive_seed, seeded_initializer


@dataclasses.dataclass(frozen=True)
class TimeOrdered:
    """A batch's histories oldest first.

    Attributes:
      sequence: ``[B, W, G]``, each row's real positions at the front, oldest first,
        zeros after; W the longest history of the batch.
      mask: ``[B, W]`` bool, true at each row's real positions.
      slots: ``[R, 2]`` int64 ``(row, slot)`` of each real position of the input (in the
        input's order), so values laid out like the sequence are gathered back with it.
    """

    sequence: tf.Tensor
    mask: tf.Tensor
    slots: tf.Tensor


def in_time_order(values: tf.Tensor, positions: tf.Tensor, batch: tf.Tensor) -> TimeOrdered:
    """Lays ``values`` ``[R, G]`` (row-major, newest first within a row, as ``positions``
    ``[R, 2]`` gives them) out oldest first in ``batch`` rows (an int64 scalar) as wide
    as the longest history of the batch (at least 1), so a GRU runs no step that no row
    needs and the padding of the input changes nothing. A gap in a row's positions (a
    missing id inside a history) closes up."""
    rows = positions[:, 0]
    counts = tf.math.unsorted_segment_sum(tf.ones_like(rows), rows, batch)  # [B]
    width = tf.maximum(tf.reduce_max(counts), 1)
    starts = tf.cumsum(counts, exclusive=True)
    rank = tf.range(tf.size(rows, out_type=tf.int64)) - tf.gather(starts, rows)  # 0 newest
    slots = tf.stack([rows, tf.gather(counts, rows) - 1 - rank], axis=1)
    shape = tf.concat([[batch, width], tf.shape(values, out_type=tf.int64)[1:]], 0)
    sequence = tf.scatter_nd(slots, values, shape)
    return TimeOrdered(sequence, tf.sequence_mask(counts, width), slots)


class GRUCell(tf.keras.layers.Layer):
    """One GRU step (Cho et al., 2014, the reset gate applied before the recurrent
    product)::

        u = sigmoid(x W_u + h U_u + b_u),  r = sigmoid(x W_r + h U_r + b_r)
        h~ = tanh(x W_h + (r * h) U_h + b_h)
        h' = (1 - u) * h + u * h~

    Plain matmuls of its variables, so it runs with them on parameter servers, whole or
    partitioned. Run over a sequence by ``tf.keras.layers.RNN``.

    Args:
      units: Width of the state.
      seed: Seed of the kernels.
    """

    #: Trailing input columns that are not the step's input (AUGRU's score).
    score_columns = 0

    def __init__(self, units: int, seed: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = units
        self.output_size = units
        self.seed = seed

    def build(self, input_shape: tf.TensorShape) -> None:
        inputs = int(input_shape[-1]) - self.score_columns
        self.kernel = self.add_weight(
            name="kernel",
            shape=[inputs, 3 * self.units],
            initializer=seeded_initializer("glorot_uniform", derive_seed(self.seed, "kernel")),
        )
        self.recurrent_kernel = self.add_weight(
            name="recurrent_kernel",
            shape=[self.units, 3 * self.units],
            initializer=seeded_initializer("orthogonal", derive_seed(self.seed, "recurrent")),
        )
        self.bias = self.add_weight(name="bias", shape=[3 * self.units], initializer="zeros")
        super().build(input_shape)

    def _gate_scale(self, inputs: tf.Tensor) -> tf.Tensor | float:
        return 1.0

    def call(self, inputs: tf.Tensor, states: list[tf.Tensor]) -> tuple[tf.Tensor, list]:
        state = states[0]
        step = inputs[:, : int(inputs.shape[-1]) - self.score_columns]
        x = tf.matmul(step, self.kernel) + self.bias
        x_u, x_r, x_h = tf.split(x, 3, axis=1)
        recurrent = tf.convert_to_tensor(self.recurrent_kernel)
        gates = tf.matmul(state, recurrent[:, : 2 * self.units])
        h_u, h_r = tf.split(gates, 2, axis=1)
        update = tf.sigmoid(x_u + h_u) * self._gate_scale(inputs)
        reset = tf.sigmoid(x_r + h_r)
        candidate = tf.tanh(x_h + tf.matmul(reset * state, recurrent[:, 2 * self.units :]))
        new = (1.0 - update) * state + update * candidate
        return new, [new]

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "units": self.units, "seed": self.seed}


class AUGRUCell(GRUCell):
    """DIEN's GRU with attentional update gate: the last input column is the attention
    score ``a_t`` of the step, the others its input ``x_t``; the update gate ``u`` of
    :class:`GRUCell` becomes ``a u``::

        h' = (1 - a u) * h + a u * h~

    so a step the candidate finds irrelevant (``a`` near 0) barely moves the interest.
    """

    score_columns = 1

    def _gate_scale(self, inputs: tf.Tensor) -> tf.Tensor:
        return inputs[:, -1:]


class AuxiliaryLoss(tf.keras.layers.Layer):
    """DIEN's auxiliary loss: the interest state after step t tells the behaviour at step
    t + 1 from one that did not happen there. The negative of a row's step is the same
    step of the row half a batch away (another user's behaviour, real there too). A small
    MLP over ``[h_t, e]`` gives the logit; the loss is the mean cross-entropy of the
    positives plus that of the negatives, over the steps where each is real.

    Args:
      hidden_units: Widths of the MLP's sigmoid layers; DIEN's ``(100, 50)``.
      seed: Seed of the kernels.

    Call args:
      states: ``[B, L, G]`` the GRU's states, oldest first.
      ordered: The :class:`TimeOrdered` history the states were computed from.

    Returns:
      The scalar loss (0 for a batch without two real steps in a row).
    """

    def __init__(self, hidden_units: list[int], seed: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.hidden_units = list(hidden_units)
        self.seed = seed
        self.layers_ = [
            tf.keras.layers.Dense(
                width,
                activation="sigmoid",
                name=f"dense_{i}",
                kernel_initializer=seeded_initializer("glorot_uniform", derive_seed(seed, i)),
            )
            for i, width in enumerate(self.hidden_units)
        ]
        self.score = tf.keras.layers.Dense(
            1,
            name="score",
            kernel_initializer=seeded_initializer("glorot_uniform", derive_seed(seed, "score")),
        )

    def _logits(self, states: tf.Tensor, items: tf.Tensor) -> tf.Tensor:
        x = tf.concat([states, items], axis=-1)
        for dense in self.layers_:
            x = dense(x)
        return self.score(x)[..., 0]

    def call(self, states: tf.Tensor, ordered: TimeOrdered) -> tf.Tensor:
        sequence, mask = ordered.sequence, ordered.mask
        shift = tf.maximum(tf.shape(sequence)[0] // 2, 1)
        before, after = states[:, :-1], sequence[:, 1:]
        positive = mask[:, 1:]
        negative = positive & tf.roll(mask, shift, axis=0)[:, 1:]
        others = tf.roll(sequence, shift, axis=0)[:, 1:]

        def mean_loss(logits: tf.Tensor, label: float, where: tf.Tensor) -> tf.Tensor:
            loss = tf.nn.sigmoid_cross_entropy_with_logits(
                labels=tf.fill(tf.shape(logits), label), logits=logits
            )
            weight = tf.cast(where, loss.dtype)
            return tf.math.divide_no_nan(tf.reduce_sum(loss * weight), tf.reduce_sum(weight))

        return mean_loss(self._logits(before, after), 1.0, positive) + mean_loss(
            self._logits(before, others), 0.0, negative
        )

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "hidden_units": self.hidden_units, "seed": self.seed}
