"""Masked attention layers for user-behaviour sequences (DIN and BST).

:class:`TargetAttention` is DIN's local activation unit (the candidate item attending over
the user's history), :class:`TransformerEncoderLayer` BST's self-attention block and
:class:`PositionEmbedding` a learned position table; the masks they share are in
``models/masking.py``, Dice in ``models/activations.py``. Shape letters: B batch size,
L history length (padding included), D embedding dim of the query and of each history
item, H attention heads.

Every mask is ``[B, L]``, bool or float (non-zero = a real position), and means the same
thing everywhere: padding never changes an output at a real position (nor the batch
statistics of :class:`Dice`), outputs at padding positions are zero, and an all-false
row gives finite zeros, never NaN, forward and backward (keys at padding positions are
zeroed before use). Weights are plain variables from Keras layers and ops only, so the
layers run under ``ParameterServerStrategy``; each random weight has its own seed
(:func:`~recsys_dist.models.blocks.derive_seed`).
"""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf

from recsys_dist.models.activations import ACTIVATIONS, Dice, activation_layer
from recsys_dist.models.blocks import (
    InitializerLike,
    _serialize,
    derive_seed,
    seeded_initializer,
)
from recsys_dist.models.masking import (
    bool_mask,
    check_choice,
    is_positive_int,
    masked_softmax,
    ragged_softmax,
)

#: Score normalizations of :class:`TargetAttention`.
NORMALIZATIONS = ("none", "softmax")
#: Feed-forward activations of :class:`TransformerEncoderLayer`.
FFN_ACTIVATIONS = ("leaky_relu", "gelu", "relu")
#: Negative slope of the ``"leaky_relu"`` feed-forward activation (``tf.nn.leaky_relu``'s).
LEAKY_RELU_ALPHA = 0.2


class TargetAttention(tf.keras.layers.Layer):
    """DIN's local activation unit: the candidate item attends over the user's history.

    For each history position l, ``u_l = MLP([q, k_l, q - k_l, q * k_l])``: hidden dense
    layers with ``activation``, then ``Dense(1)`` without activation. The weights are

    - ``normalization="none"`` (the paper): ``w_l = u_l`` at real positions, 0 at padding;
      unnormalised, so the output keeps the intensity of the user's interest.
    - ``normalization="softmax"``: ``w = softmax(u)`` over the real positions, 0 at
      padding; a row without any real position gets all zeros.

    and the output is ``sum_l w_l k_l``. Padding keys are zeroed first, and Dice's batch
    statistics are taken over real positions only, so padding changes nothing.

    Args:
      hidden_units: Widths of the hidden layers, non-empty, positive; DIN's ``(80, 40)``.
      activation: Activation of the hidden layers, one of :data:`ACTIVATIONS`; DIN's
        ``"dice"``.
      normalization: ``"none"`` or ``"softmax"``.
      kernel_initializer: Initializer of the dense kernels.
      bias_initializer: Initializer of the dense biases.
      seed: Seed for the kernels; None draws fresh ones.

    Call args:
      query: ``[B, D]`` candidate item embedding.
      keys: ``[B, L, D]`` history embeddings.
      mask: ``[B, L]`` bool or float, true at real positions. When None, the Keras mask of
        ``keys`` if any, else every position is real.
      training: Batch (True) or moving (False) statistics for Dice.
      return_weights: Also return the weights.

    Returns:
      ``[B, D]``, or the pair (``[B, D]``, weights ``[B, L]``) with ``return_weights``.

    Example:
      >>> att = TargetAttention([1], activation="relu", kernel_initializer="ones")
      >>> att(tf.constant([[1.0]]), tf.constant([[[1.0], [2.0]]]),
      ...     tf.constant([[True, False]])).numpy()  # u_0 = relu(1 + 1 + 0 + 1) = 3
      array([[3.]], dtype=float32)
    """

    def __init__(
        self,
        hidden_units: tuple[int, ...] | list[int] = (80, 40),
        activation: str = "dice",
        normalization: str = "none",
        kernel_initializer: InitializerLike = "glorot_uniform",
        bias_initializer: InitializerLike = "zeros",
        seed: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        units = list(hidden_units) if isinstance(hidden_units, (list, tuple)) else None
        if not units or not all(is_positive_int(u) for u in units):
            raise ValueError(
                f"TargetAttention hidden_units must be a non-empty list of "
                f"positive integers. Received: hidden_units={hidden_units!r}"
            )
        check_choice("TargetAttention ", "activation", activation, ACTIVATIONS)
        check_choice("TargetAttention ", "normalization", normalization, NORMALIZATIONS)
        self.hidden_units = units
        self.activation = activation
        self.normalization = normalization
        self.kernel_initializer = _serialize(kernel_initializer)
        self.bias_initializer = _serialize(bias_initializer)
        self.seed = seed
        self.hidden: list[tuple[tf.keras.layers.Dense, tf.keras.layers.Layer]] = []
        for i, width in enumerate(units):
            dense = tf.keras.layers.Dense(
                width,
                name=f"dense_{i}",
                kernel_initializer=seeded_initializer(kernel_initializer, derive_seed(seed, i)),
                bias_initializer=tf.keras.initializers.get(bias_initializer),
            )
            self.hidden.append((dense, activation_layer(activation, name=f"{activation}_{i}")))
        self.score = tf.keras.layers.Dense(
            1,
            name="score",
            kernel_initializer=seeded_initializer(kernel_initializer, derive_seed(seed, "score")),
            bias_initializer=tf.keras.initializers.get(bias_initializer),
        )

    def call(
        self,
        query: tf.Tensor,
        keys: tf.Tensor,
        mask: tf.Tensor | None = None,
        training: bool | None = None,
        return_weights: bool = False,
    ) -> tf.Tensor | tuple[tf.Tensor, tf.Tensor]:
        if mask is None:
            mask = getattr(keys, "_keras_mask", None)
        query = tf.convert_to_tensor(query, self.compute_dtype)
        keys = tf.convert_to_tensor(keys, self.compute_dtype)
        if query.shape.rank != 2 or keys.shape.rank != 3:
            raise ValueError(
                f"TargetAttention expects query [B, D] and keys [B, L, D]. "
                f"Received: query.shape={query.shape}, keys.shape={keys.shape}"
            )
        if (
            query.shape[-1] is not None
            and keys.shape[-1] is not None
            and query.shape[-1] != keys.shape[-1]
        ):
            raise ValueError(
                f"TargetAttention query and keys must have the same dim D. "
                f"Received: query.shape={query.shape}, keys.shape={keys.shape}"
            )
        mask = bool_mask(mask, keys)  # [B, L]
        dim = keys.shape[-1] if keys.shape[-1] is not None else tf.shape(keys)[-1]
        real = tf.where(tf.reshape(mask, [-1]))[:, 0]  # [R]
        length = tf.shape(keys, out_type=tf.int64)[1]
        values = tf.gather(tf.reshape(keys, [-1, dim]), real)  # [R, D]
        outputs, scores = self._unit(query, values, real // length, training)
        cells = tf.size(mask, out_type=tf.int64)
        weights = tf.reshape(tf.scatter_nd(real[:, tf.newaxis], scores, [cells]), tf.shape(mask))
        return (outputs, weights) if return_weights else outputs

    def attend(
        self,
        query: tf.Tensor,
        values: tf.Tensor,
        rows: tf.Tensor,
        training: bool | None = None,
        extra: tf.Tensor | None = None,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """The unit on a history kept at its real positions only: ``values`` ``[R, D]``,
        the example of each in ``rows`` ``[R]`` (int64, ascending). One row of the unit per
        real position, so Dice and PReLU keep one parameter per unit and padding costs
        nothing. ``extra`` ``[R, E]`` (e.g. a position embedding) joins the unit's input
        and weighs nothing itself. Returns the outputs ``[B, D]`` and each position's
        weight ``[R]``."""
        # called outside __call__: the layer's own scope keeps its weights' names
        with tf.name_scope(self.name):
            return self._unit(query, values, rows, training, extra)

    def _unit(
        self,
        query: tf.Tensor,
        values: tf.Tensor,
        rows: tf.Tensor,
        training: bool | None,
        extra: tf.Tensor | None = None,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        query = tf.convert_to_tensor(query, self.compute_dtype)
        values = tf.convert_to_tensor(values, self.compute_dtype)
        q = tf.gather(query, rows)  # [R, D]
        parts = [q, values, q - values, q * values]
        x = tf.concat(parts if extra is None else [*parts, extra], axis=-1)
        for dense, act in self.hidden:
            x = dense(x)
            x = act(x, training=training) if isinstance(act, Dice) else act(x)
        scores = self.score(x)[:, 0]  # [R]
        batch = tf.shape(query)[0]
        if self.normalization == "softmax":
            scores = ragged_softmax(scores, rows, batch)
        outputs = tf.math.unsorted_segment_sum(values * scores[:, None], rows, batch)
        return outputs, scores

    def compute_mask(self, inputs: Any, mask: Any = None) -> None:
        return None

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "hidden_units": self.hidden_units,
            "activation": self.activation,
            "normalization": self.normalization,
            "kernel_initializer": self.kernel_initializer,
            "bias_initializer": self.bias_initializer,
            "seed": self.seed,
        }


class TransformerEncoderLayer(tf.keras.layers.Layer):
    """BST's Transformer layer (Chen et al., 2019, "Behavior Sequence Transformer").

    Post-norm, as in BST (and Vaswani et al.)::

        A  = MultiHead(x) = concat_h(softmax(Q_h K_h^T / sqrt(D / H)) V_h) W_O
        x' = LayerNorm(x + Dropout(A))
        y  = LayerNorm(x' + Dropout(act(x' W_1 + b_1) W_2 + b_2))

    with ``Q = x W_Q + b_Q`` (same for K, V) split into H heads of width D / H. Padding
    positions are masked out as keys (softmax over real positions, see
    :func:`masked_softmax`), and the output at padding positions is set to 0. The
    feed-forward is per position, so padding never reaches a real position. Dropout
    (on the attention and feed-forward outputs, as BST) is active with ``training=True``.

    Args:
      num_heads: Number of heads H (>= 1); D must be divisible by H.
      ffn_units: Hidden width of the feed-forward network; None for ``4 * D`` (the
        Transformer's ratio; BST does not state its width).
      dropout: Dropout rate, in [0, 1).
      ffn_activation: ``"leaky_relu"`` (BST; negative slope :data:`LEAKY_RELU_ALPHA`),
        ``"gelu"`` or ``"relu"``.
      layer_norm_epsilon: Epsilon of both layer norms.
      kernel_initializer: Initializer of the dense kernels.
      bias_initializer: Initializer of the dense biases.
      seed: Seed for the kernels and dropout masks; None draws fresh ones.

    Call args:
      inputs: ``[B, L, D]`` sequence.
      mask: ``[B, L]`` bool or float, true at real positions. When None, the Keras mask
        of ``inputs`` if any, else every position is real.
      training: Whether dropout is active.

    Returns:
      ``[B, L, D]``, zero at padding positions. The mask is passed on as the output's
      Keras mask.

    Example:
      >>> layer = TransformerEncoderLayer(num_heads=2, seed=0)
      >>> layer(tf.ones([3, 5, 8]), tf.sequence_mask([5, 2, 0], 5)).shape
      TensorShape([3, 5, 8])
    """

    def __init__(
        self,
        num_heads: int = 2,
        ffn_units: int | None = None,
        dropout: float = 0.1,
        ffn_activation: str = "leaky_relu",
        layer_norm_epsilon: float = 1e-6,
        kernel_initializer: InitializerLike = "glorot_uniform",
        bias_initializer: InitializerLike = "zeros",
        seed: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if not is_positive_int(num_heads):
            raise ValueError(
                f"TransformerEncoderLayer num_heads must be a positive integer. "
                f"Received: num_heads={num_heads!r}"
            )
        if ffn_units is not None and not is_positive_int(ffn_units):
            raise ValueError(
                f"TransformerEncoderLayer ffn_units must be None or a positive "
                f"integer. Received: ffn_units={ffn_units!r}"
            )
        if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise ValueError(
                f"TransformerEncoderLayer dropout must be in [0, 1). Received: dropout={dropout!r}"
            )
        check_choice("TransformerEncoderLayer ", "ffn_activation", ffn_activation, FFN_ACTIVATIONS)
        self.num_heads = num_heads
        self.ffn_units = ffn_units
        self.dropout = dropout
        self.ffn_activation = ffn_activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = _serialize(kernel_initializer)
        self.bias_initializer = _serialize(bias_initializer)
        self.seed = seed
        self.supports_masking = True

    def _dense(self, units: int, name: str) -> tf.keras.layers.Dense:
        return tf.keras.layers.Dense(
            units,
            name=name,
            kernel_initializer=seeded_initializer(
                self.kernel_initializer, derive_seed(self.seed, name)
            ),
            bias_initializer=tf.keras.initializers.get(self.bias_initializer),
        )

    def build(self, input_shape: tf.TensorShape) -> None:
        input_shape = tf.TensorShape(input_shape)
        if input_shape.rank != 3 or input_shape[-1] is None:
            raise ValueError(
                f"TransformerEncoderLayer expects inputs [B, L, D] with a known "
                f"D. Received: input_shape={input_shape}"
            )
        dim = int(input_shape[-1])
        if dim % self.num_heads:
            raise ValueError(
                f"TransformerEncoderLayer input dim D={dim} must be divisible "
                f"by num_heads={self.num_heads}."
            )
        self._dim = dim
        self.query_dense = self._dense(dim, "query")
        self.key_dense = self._dense(dim, "key")
        self.value_dense = self._dense(dim, "value")
        self.output_dense = self._dense(dim, "attention_output")
        self.ffn_inner = self._dense(self.ffn_units or 4 * dim, "ffn_inner")
        self.ffn_outer = self._dense(dim, "ffn_outer")
        self.attention_norm = tf.keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="attention_norm"
        )
        self.ffn_norm = tf.keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="ffn_norm"
        )
        self.attention_dropout = tf.keras.layers.Dropout(
            self.dropout,
            seed=derive_seed(self.seed, "dropout", "attention"),
            name="attention_dropout",
        )
        self.ffn_dropout = tf.keras.layers.Dropout(
            self.dropout, seed=derive_seed(self.seed, "dropout", "ffn"), name="ffn_dropout"
        )
        super().build(input_shape)

    def _split_heads(self, x: tf.Tensor) -> tf.Tensor:
        batch, length = tf.shape(x)[0], tf.shape(x)[1]
        x = tf.reshape(x, [batch, length, self.num_heads, self._dim // self.num_heads])
        return tf.transpose(x, [0, 2, 1, 3])  # [B, H, L, D/H]

    def _activate(self, x: tf.Tensor) -> tf.Tensor:
        if self.ffn_activation == "leaky_relu":
            return tf.nn.leaky_relu(x, alpha=LEAKY_RELU_ALPHA)
        if self.ffn_activation == "gelu":
            return tf.nn.gelu(x)
        return tf.nn.relu(x)

    def call(
        self, inputs: tf.Tensor, mask: tf.Tensor | None = None, training: bool | None = None
    ) -> tf.Tensor:
        mask = bool_mask(mask, inputs)  # [B, L]
        real = mask[..., tf.newaxis]
        x = tf.where(real, inputs, tf.zeros_like(inputs))
        query = self._split_heads(self.query_dense(x))
        key = self._split_heads(self.key_dense(x))
        value = self._split_heads(self.value_dense(x))
        scores = tf.matmul(query, key, transpose_b=True) / math.sqrt(
            self._dim // self.num_heads
        )  # [B, H, L, L]
        weights = masked_softmax(scores, mask[:, tf.newaxis, tf.newaxis, :])
        heads = tf.transpose(tf.matmul(weights, value), [0, 2, 1, 3])  # [B, L, H, D/H]
        attended = self.output_dense(tf.reshape(heads, tf.shape(x)))
        x = self.attention_norm(x + self.attention_dropout(attended, training=training))
        ffn = self.ffn_outer(self._activate(self.ffn_inner(x)))
        x = self.ffn_norm(x + self.ffn_dropout(ffn, training=training))
        return tf.where(real, x, tf.zeros_like(x))

    def compute_output_shape(self, input_shape: tf.TensorShape) -> tf.TensorShape:
        return tf.TensorShape(input_shape)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "ffn_units": self.ffn_units,
            "dropout": self.dropout,
            "ffn_activation": self.ffn_activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "kernel_initializer": self.kernel_initializer,
            "bias_initializer": self.bias_initializer,
            "seed": self.seed,
        }


class PositionEmbedding(tf.keras.layers.Layer):
    """A learned position table added to a sequence: ``y[b, l] = x[b, l] + P[l]``.

    Position 0 is the first position of the sequence (index order, not recency).

    Args:
      max_length: Rows of ``P`` (>= 1): the longest sequence the layer accepts.
      dim: Width D of ``P``; must equal the inputs' last dimension.
      initializer: Initializer of ``P``; Keras Embedding's default ``"uniform"``.
      seed: Seed of ``P``; None draws fresh values.

    Call args:
      inputs: ``[B, L, D]`` with ``L <= max_length``.
      mask: Optional ``[B, L]`` mask; padding positions of the output are set to 0.
        Taken from a Keras mask on ``inputs`` when not given, and passed on.

    Returns:
      ``[B, L, D]``.

    Example:
      >>> pos = PositionEmbedding(4, 2, initializer="ones")
      >>> pos(tf.zeros([1, 3, 2]), tf.constant([[True, True, False]])).numpy()[0]
      array([[1., 1.],
             [1., 1.],
             [0., 0.]], dtype=float32)
    """

    def __init__(
        self,
        max_length: int,
        dim: int,
        initializer: InitializerLike = "uniform",
        seed: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        for key, value in (("max_length", max_length), ("dim", dim)):
            if not is_positive_int(value):
                raise ValueError(
                    f"PositionEmbedding {key} must be a positive integer. Received: {key}={value!r}"
                )
        self.max_length = max_length
        self.dim = dim
        self.initializer = _serialize(initializer)
        self.seed = seed
        self.supports_masking = True

    def build(self, input_shape: tf.TensorShape) -> None:
        input_shape = tf.TensorShape(input_shape)
        if input_shape.rank != 3 or input_shape[-1] != self.dim:
            raise ValueError(
                f"PositionEmbedding expects inputs [B, L, dim={self.dim}]. "
                f"Received: input_shape={input_shape}"
            )
        if input_shape[1] is not None and input_shape[1] > self.max_length:
            raise ValueError(
                f"PositionEmbedding inputs are longer than max_length="
                f"{self.max_length}. Received: input_shape={input_shape}"
            )
        self.table = self.add_weight(
            name="table",
            shape=[self.max_length, self.dim],
            initializer=seeded_initializer(self.initializer, derive_seed(self.seed, "table")),
        )
        super().build(input_shape)

    def call(self, inputs: tf.Tensor, mask: tf.Tensor | None = None) -> tf.Tensor:
        length = tf.shape(inputs)[1]
        check = tf.debugging.assert_less_equal(
            length,
            self.max_length,
            message=f"PositionEmbedding inputs are longer than max_length={self.max_length}",
        )
        with tf.control_dependencies([check]):
            outputs = inputs + self.table[tf.newaxis, :length]
        if mask is None:
            return outputs
        real = bool_mask(mask, inputs)[..., tf.newaxis]
        return tf.where(real, outputs, tf.zeros_like(outputs))

    def compute_output_shape(self, input_shape: tf.TensorShape) -> tf.TensorShape:
        return tf.TensorShape(input_shape)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "max_length": self.max_length,
            "dim": self.dim,
            "initializer": self.initializer,
            "seed": self.seed,
        }
