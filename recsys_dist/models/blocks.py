"""Reusable Keras layers that the models of the zoo are assembled from.

None of these layers knows about features or tables; they see plain tensors.

Shape letters used in the docstrings:

- B: batch size.
- F: number of feature vectors interacting (sparse features, plus DLRM's dense vector).
- D: embedding dim.
- N: width of a flat input vector.
- H: width of an MLP's last layer.

Every random weight is drawn from a seeded initializer when a ``seed`` is given, with
a distinct seed per weight (see :func:`derive_seed`), so two builds with the same seed
start from identical weights.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import tensorflow as tf

InitializerLike = str | dict | tf.keras.initializers.Initializer


def derive_seed(seed: int | None, *path: object) -> int | None:
    """Returns a seed for the weight at ``path`` below ``seed``, or None when unseeded.

    Distinct paths give unrelated seeds, so weights of the same shape never start equal.

    Example:
      >>> derive_seed(0, "expert", 1) == derive_seed(0, "expert", 1)
      True
    """
    if seed is None:
        return None
    return zlib.crc32("/".join(str(p) for p in (seed, *path)).encode())


def seeded_initializer(
    identifier: InitializerLike, seed: int | None
) -> tf.keras.initializers.Initializer:
    """Returns the Keras initializer ``identifier`` with its seed set to ``seed``.

    Initializers without randomness (``"zeros"``, ``"ones"``) come back unchanged. A
    seeded Keras initializer returns the same values on every call, so give each weight
    its own seed. A new object is returned; ``identifier`` is never modified.
    """
    initializer = tf.keras.initializers.get(identifier)
    if seed is None or not hasattr(initializer, "seed"):
        return initializer
    config = initializer.get_config()
    config["seed"] = seed
    return type(initializer).from_config(config)


def _serialize(identifier: InitializerLike) -> dict:
    return tf.keras.initializers.serialize(tf.keras.initializers.get(identifier))


class MLP(tf.keras.layers.Layer):
    """A stack of dense layers: ``Dense -> [BatchNorm] -> activation -> [Dropout]``.

    The last layer ends with ``final_activation``. When that is None the last layer is a
    plain linear projection (no batch norm, no dropout), e.g. the bottom MLP of a tower
    that must output a raw value.

    Args:
      units: Width of each layer, e.g. ``[256, 128]``.
      activation: Activation of every layer but the last: a Keras activation name, or a
        function that returns a new activation layer given its name (e.g. a learned one
        such as PReLU or Dice).
      dropout: Dropout rate after each non-linear layer, in [0, 1); active only when
        called with ``training=True``.
      batch_norm: Batch-normalise each non-linear layer before its activation (the
        dense layer then has no bias). Batch statistics are used when
        ``training=True``, moving statistics otherwise.
      final_activation: Activation of the last layer, or None for a linear last layer.
      kernel_initializer: Initializer of the dense kernels.
      bias_initializer: Initializer of the dense biases.
      seed: Seed for kernel initialisation and dropout masks; None draws fresh ones.

    Call args:
      inputs: ``[B, N]`` float tensor.
      training: Whether dropout and batch statistics are active.

    Returns:
      ``[B, units[-1]]``.

    Example:
      >>> mlp = MLP([2, 1], kernel_initializer="ones", final_activation=None)
      >>> mlp(tf.constant([[1.0, 2.0]])).numpy()
      array([[6.]], dtype=float32)
    """

    def __init__(
        self,
        units: list[int],
        activation: str = "relu",
        dropout: float = 0.0,
        batch_norm: bool = False,
        final_activation: str | None = "relu",
        kernel_initializer: InitializerLike = "glorot_uniform",
        bias_initializer: InitializerLike = "zeros",
        seed: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        units = list(units)
        if not units or any(not isinstance(u, int) or u < 1 for u in units):
            raise ValueError(
                f"MLP units must be a non-empty list of positive integers. Received: units={units}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"MLP dropout must be in [0, 1). Received: dropout={dropout}")
        self.units = units
        self.activation = activation
        self.dropout = dropout
        self.batch_norm = batch_norm
        self.final_activation = final_activation
        self.kernel_initializer = _serialize(kernel_initializer)
        self.bias_initializer = _serialize(bias_initializer)
        self.seed = seed
        self.stack: list[tf.keras.layers.Layer] = []
        for i, width in enumerate(units):
            last = i == len(units) - 1
            linear = last and final_activation is None
            normalize = batch_norm and not linear
            self.stack.append(
                tf.keras.layers.Dense(
                    width,
                    use_bias=not normalize,
                    name=f"dense_{i}",
                    kernel_initializer=seeded_initializer(kernel_initializer, derive_seed(seed, i)),
                    bias_initializer=tf.keras.initializers.get(bias_initializer),
                )
            )
            if linear:
                continue
            if normalize:
                self.stack.append(tf.keras.layers.BatchNormalization(name=f"batch_norm_{i}"))
            name = final_activation if last else activation
            self.stack.append(
                name(f"activation_{i}")
                if callable(name)
                else tf.keras.layers.Activation(name, name=f"activation_{i}")
            )
            if dropout > 0.0:
                self.stack.append(
                    tf.keras.layers.Dropout(
                        dropout, seed=derive_seed(seed, "dropout", i), name=f"dropout_{i}"
                    )
                )

    def call(self, inputs: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        x = inputs
        for layer in self.stack:
            x = layer(x, training=training)
        return x

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "units": self.units,
            "activation": self.activation if not callable(self.activation) else None,
            "dropout": self.dropout,
            "batch_norm": self.batch_norm,
            "final_activation": self.final_activation,
            "kernel_initializer": self.kernel_initializer,
            "bias_initializer": self.bias_initializer,
            "seed": self.seed,
        }


class _CrossLayer(tf.keras.layers.Layer):
    """One DCN-v2 cross layer: ``x0 * (W x + b) + x`` with W full or ``U V^T``."""

    def __init__(
        self,
        low_rank: int | None,
        kernel_initializer: InitializerLike,
        bias_initializer: InitializerLike,
        seed: int | None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.low_rank = low_rank
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer
        self.seed = seed

    def build(self, input_shape: tf.TensorShape) -> None:
        width = int(input_shape[-1])
        self.down = None
        if self.low_rank is not None:
            self.down = tf.keras.layers.Dense(
                self.low_rank,
                use_bias=False,
                name="v",
                kernel_initializer=seeded_initializer(
                    self.kernel_initializer, derive_seed(self.seed, "v")
                ),
            )
        self.up = tf.keras.layers.Dense(
            width,
            name="w" if self.low_rank is None else "u",
            kernel_initializer=seeded_initializer(
                self.kernel_initializer, derive_seed(self.seed, "w")
            ),
            bias_initializer=tf.keras.initializers.get(self.bias_initializer),
        )
        super().build(input_shape)

    def call(self, x0: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        projected = self.up(x if self.down is None else self.down(x))
        return x0 * projected + x


class CrossNetwork(tf.keras.layers.Layer):
    """DCN-v2 cross network: ``x_{l+1} = x_0 * (W_l x_l + b_l) + x_l``.

    Each ``W_l`` is ``N x N``, or the low-rank product ``U_l V_l^T`` (``N x r`` and
    ``r x N``) when ``low_rank=r`` (Wang et al., 2021, "DCN V2").

    Args:
      num_layers: Number of cross layers (>= 1).
      low_rank: Rank r of each ``W_l``; None for full rank.
      kernel_initializer: Initializer of ``W_l`` (or of U and V).
      bias_initializer: Initializer of ``b_l``.
      seed: Seed for the kernels; None draws fresh ones.

    Call args:
      inputs: ``x_0``, a ``[B, N]`` float tensor.

    Returns:
      ``x_L``, ``[B, N]``.

    Example:
      >>> cross = CrossNetwork(1, kernel_initializer="ones")
      >>> cross(tf.constant([[0.1, 0.2, 0.3]])).numpy()  # x0 * 0.6 + x0
      array([[0.16, 0.32, 0.48]], dtype=float32)
    """

    def __init__(
        self,
        num_layers: int,
        low_rank: int | None = None,
        kernel_initializer: InitializerLike = "glorot_uniform",
        bias_initializer: InitializerLike = "zeros",
        seed: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(
                f"CrossNetwork num_layers must be a positive integer. "
                f"Received: num_layers={num_layers}"
            )
        if low_rank is not None and (not isinstance(low_rank, int) or low_rank < 1):
            raise ValueError(
                f"CrossNetwork low_rank must be None or a positive integer. "
                f"Received: low_rank={low_rank}"
            )
        self.num_layers = num_layers
        self.low_rank = low_rank
        self.kernel_initializer = _serialize(kernel_initializer)
        self.bias_initializer = _serialize(bias_initializer)
        self.seed = seed
        self.cross_layers = [
            _CrossLayer(
                low_rank,
                kernel_initializer,
                bias_initializer,
                derive_seed(seed, i),
                name=f"cross_{i}",
            )
            for i in range(num_layers)
        ]

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        x = inputs
        for layer in self.cross_layers:
            x = layer(inputs, x)
        return x

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "num_layers": self.num_layers,
            "low_rank": self.low_rank,
            "kernel_initializer": self.kernel_initializer,
            "bias_initializer": self.bias_initializer,
            "seed": self.seed,
        }


class FactorizationMachine(tf.keras.layers.Layer):
    """The second-order term of a factorization machine: ``sum_{i<j} <v_i, v_j>``.

    Computed in O(F D) as ``0.5 * sum_d ((sum_f v_fd)^2 - sum_f v_fd^2)`` (Rendle, 2010).

    Call args:
      inputs: ``[B, F, D]`` stacked feature embeddings.

    Returns:
      ``[B]``.

    Example:
      >>> FactorizationMachine()(tf.constant([[[1.0, 2.0], [3.0, 4.0]]])).numpy()
      array([11.], dtype=float32)
    """

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        square_of_sum = tf.square(tf.reduce_sum(inputs, axis=1))
        sum_of_squares = tf.reduce_sum(tf.square(inputs), axis=1)
        return 0.5 * tf.reduce_sum(square_of_sum - sum_of_squares, axis=1)


class DotInteraction(tf.keras.layers.Layer):
    """DLRM's pairwise dot-product interaction.

    Returns the upper triangle of ``X X^T`` in row-major order: pairs
    ``(0,1), (0,2), ..., (1,2), ...``, and the diagonal too when ``self_interaction``.

    Args:
      self_interaction: Include each vector's dot product with itself.

    Call args:
      inputs: ``[B, F, D]`` stacked feature vectors.

    Returns:
      ``[B, F(F-1)/2]``, or ``[B, F(F+1)/2]`` with ``self_interaction``.

    Example:
      >>> DotInteraction()(tf.constant([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]])).numpy()
      array([[11., 17., 39.]], dtype=float32)
    """

    def __init__(self, self_interaction: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        self.self_interaction = self_interaction

    def build(self, input_shape: tf.TensorShape) -> None:
        if input_shape.rank != 3 or input_shape[1] is None:
            raise ValueError(
                f"DotInteraction expects inputs of shape [B, F, D] with a known "
                f"F. Received: input_shape={input_shape}"
            )
        fields = int(input_shape[1])
        rows, cols = np.triu_indices(fields, k=0 if self.self_interaction else 1)
        self._fields = fields
        self._pairs = (rows * fields + cols).astype(np.int32)
        super().build(input_shape)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        products = tf.matmul(inputs, inputs, transpose_b=True)
        flat = tf.reshape(products, [-1, self._fields * self._fields])
        return tf.gather(flat, self._pairs, axis=1)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "self_interaction": self.self_interaction}


class MixtureOfExperts(tf.keras.layers.Layer):
    """Multi-gate mixture of experts (MMoE; Ma et al., 2018).

    ``E`` expert MLPs share the input; each of the ``T`` tasks mixes the experts'
    outputs with its own softmax gate: ``out_t = sum_e softmax(G_t x)_e * expert_e(x)``.

    Args:
      num_experts: Number of experts E (>= 1).
      expert_units: Layer widths of every expert MLP; H = ``expert_units[-1]``.
      num_tasks: Number of tasks T, one gate each (>= 1).
      activation: Activation of every expert layer (the last included).
      dropout: Dropout rate inside the experts.
      batch_norm: Batch norm inside the experts.
      kernel_initializer: Initializer of expert and gate kernels.
      bias_initializer: Initializer of expert and gate biases.
      seed: Seed for kernels and dropout; None draws fresh ones.

    Call args:
      inputs: ``[B, N]`` shared input.
      training: Whether dropout and batch statistics are active.

    Returns:
      A list of T tensors ``[B, H]``, one per task.
    """

    def __init__(
        self,
        num_experts: int,
        expert_units: list[int],
        num_tasks: int,
        activation: str = "relu",
        dropout: float = 0.0,
        batch_norm: bool = False,
        kernel_initializer: InitializerLike = "glorot_uniform",
        bias_initializer: InitializerLike = "zeros",
        seed: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        for key, value in (("num_experts", num_experts), ("num_tasks", num_tasks)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"MixtureOfExperts {key} must be a positive integer. Received: {key}={value}"
                )
        self.num_experts = num_experts
        self.expert_units = list(expert_units)
        self.num_tasks = num_tasks
        self.activation = activation
        self.dropout = dropout
        self.batch_norm = batch_norm
        self.kernel_initializer = _serialize(kernel_initializer)
        self.bias_initializer = _serialize(bias_initializer)
        self.seed = seed
        self.experts = [
            MLP(
                self.expert_units,
                activation,
                dropout,
                batch_norm,
                final_activation=activation,
                kernel_initializer=kernel_initializer,
                bias_initializer=bias_initializer,
                seed=derive_seed(seed, "expert", e),
                name=f"expert_{e}",
            )
            for e in range(num_experts)
        ]
        self.gates = [
            tf.keras.layers.Dense(
                num_experts,
                activation="softmax",
                name=f"gate_{t}",
                kernel_initializer=seeded_initializer(
                    kernel_initializer, derive_seed(seed, "gate", t)
                ),
                bias_initializer=tf.keras.initializers.get(bias_initializer),
            )
            for t in range(num_tasks)
        ]

    def call(self, inputs: tf.Tensor, training: bool | None = None) -> list[tf.Tensor]:
        experts = tf.stack(
            [expert(inputs, training=training) for expert in self.experts], axis=1
        )  # [B, E, H]
        return [tf.einsum("be,beh->bh", gate(inputs), experts) for gate in self.gates]

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "num_experts": self.num_experts,
            "expert_units": self.expert_units,
            "num_tasks": self.num_tasks,
            "activation": self.activation,
            "dropout": self.dropout,
            "batch_norm": self.batch_norm,
            "kernel_initializer": self.kernel_initializer,
            "bias_initializer": self.bias_initializer,
            "seed": self.seed,
        }
