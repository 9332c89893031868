"""Activations of DIN's attention unit and MLP: :class:`Dice` (DIN's data-adaptive
activation) and :func:`activation_layer`, which names the choices."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from recsys_dist.models.masking import bool_mask, check_choice

#: Activation names accepted by :func:`activation_layer` (and TargetAttention).
ACTIVATIONS = ("dice", "prelu", "relu", "sigmoid")


class Dice(tf.keras.layers.Layer):
    """DIN's data-adaptive activation (Zhou et al., 2018, "Deep Interest Network").

    ``p = sigmoid((x - E[x]) / sqrt(Var[x] + epsilon))`` and
    ``f(x) = p * x + (1 - p) * alpha * x``, per unit (last axis), with a learned
    ``alpha`` initialised to 0 (as in DeepCTR and the authors' code).

    ``E[x]`` and ``Var[x]`` are the (biased) mean and variance over every axis but the
    last, taken over real positions only, when ``training=True``; each training call also
    moves ``moving_mean`` / ``moving_variance`` towards them by ``1 - momentum`` (not when
    the batch has no real position). Otherwise the moving statistics are used. This is
    BatchNormalization without scale and shift (``center=False, scale=False``), as in
    DeepCTR's ``Dice``, plus a mask.

    Args:
      epsilon: Added to the variance (> 0); the paper's 1e-8.
      momentum: Momentum of the moving statistics, in [0, 1); Keras
        BatchNormalization's 0.99.

    Call args:
      inputs: ``[..., N]`` float tensor, e.g. ``[B, N]`` or ``[B, L, N]``.
      training: Batch statistics (True) or moving statistics (False / None).
      mask: Optional ``inputs.shape[:-1]`` mask; padding rows do not enter the batch
        statistics. Taken from a Keras mask on ``inputs`` when not given.

    Returns:
      ``f(inputs)``, same shape.

    Example:
      >>> dice = Dice()
      >>> dice(tf.constant([[0.0], [2.0]]), training=True).numpy()  # p = sigmoid(-1), sigmoid(1)
      array([[0.       ],
             [1.4621172]], dtype=float32)
    """

    def __init__(self, epsilon: float = 1e-8, momentum: float = 0.99, **kwargs: Any):
        super().__init__(**kwargs)
        if not isinstance(epsilon, (int, float)) or isinstance(epsilon, bool) or epsilon <= 0:
            raise ValueError(
                f"Dice epsilon must be a positive number. Received: epsilon={epsilon!r}"
            )
        if not isinstance(momentum, (int, float)) or not 0.0 <= momentum < 1.0:
            raise ValueError(f"Dice momentum must be in [0, 1). Received: momentum={momentum!r}")
        self.epsilon = float(epsilon)
        self.momentum = float(momentum)
        self.supports_masking = True

    def build(self, input_shape: tf.TensorShape) -> None:
        units = tf.TensorShape(input_shape)[-1]
        if units is None:
            raise ValueError(
                f"Dice needs a known last dimension. Received: input_shape={input_shape}"
            )
        units = int(units)
        self.alpha = self.add_weight(name="alpha", shape=[units], initializer="zeros")
        # The variables Keras BatchNormalization makes for its moving statistics.
        stat_kwargs = dict(
            shape=[units],
            trainable=False,
            experimental_autocast=False,
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.MEAN,
        )
        self.moving_mean = self.add_weight(name="moving_mean", initializer="zeros", **stat_kwargs)
        self.moving_variance = self.add_weight(
            name="moving_variance", initializer="ones", **stat_kwargs
        )
        super().build(input_shape)

    def _batch_moments(
        self, inputs: tf.Tensor, mask: tf.Tensor | None
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        axes = list(range(inputs.shape.rank - 1))
        weight = tf.cast(bool_mask(mask, inputs), inputs.dtype)[..., tf.newaxis]
        count = tf.reduce_sum(weight * tf.ones_like(inputs), axis=axes)
        real = tf.where(weight > 0, inputs, tf.zeros_like(inputs))
        mean = tf.math.divide_no_nan(tf.reduce_sum(real, axis=axes), count)
        variance = tf.math.divide_no_nan(
            tf.reduce_sum(weight * tf.square(real - mean), axis=axes), count
        )
        return mean, variance, count

    def call(
        self, inputs: tf.Tensor, training: bool | None = None, mask: tf.Tensor | None = None
    ) -> tf.Tensor:
        def batch_statistics() -> tuple[tf.Tensor, tf.Tensor]:
            mean, variance, count = self._batch_moments(inputs, mask)
            decay = (1.0 - self.momentum) * tf.cast(count > 0, inputs.dtype)
            self.moving_mean.assign_sub((self.moving_mean - mean) * decay)
            self.moving_variance.assign_sub((self.moving_variance - variance) * decay)
            return mean, variance

        def moving_statistics() -> tuple[tf.Tensor, tf.Tensor]:
            return (
                tf.convert_to_tensor(self.moving_mean),
                tf.convert_to_tensor(self.moving_variance),
            )

        mean, variance = tf.__internal__.smart_cond.smart_cond(
            False if training is None else training, batch_statistics, moving_statistics
        )
        p = tf.sigmoid((inputs - mean) * tf.math.rsqrt(variance + self.epsilon))
        return p * inputs + (1.0 - p) * self.alpha * inputs

    def compute_output_shape(self, input_shape: tf.TensorShape) -> tf.TensorShape:
        return tf.TensorShape(input_shape)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "epsilon": self.epsilon, "momentum": self.momentum}


def activation_layer(activation: str, name: str | None = None) -> tf.keras.layers.Layer:
    """Returns a new layer for the activation called ``activation``.

    - ``"dice"``: :class:`Dice`.
    - ``"prelu"``: ``tf.keras.layers.PReLU`` with ``alpha`` initialised to 0 (Keras's
      default and the DIN authors' code; so it starts as a ReLU). One ``alpha`` per unit
      of a ``[B, N]`` input.
    - ``"relu"``, ``"sigmoid"``: ``tf.keras.layers.Activation``.

    Args:
      activation: One of :data:`ACTIVATIONS`.
      name: Name of the layer.

    Example:
      >>> activation_layer("prelu")(tf.constant([[-1.0, 2.0]])).numpy()
      array([[0., 2.]], dtype=float32)
    """
    check_choice("", "activation", activation, ACTIVATIONS)
    if activation == "dice":
        return Dice(name=name)
    if activation == "prelu":
        return tf.keras.layers.PReLU(alpha_initializer="zeros", name=name)
    return tf.keras.layers.Activation(activation, name=name)  # relu, sigmoid
