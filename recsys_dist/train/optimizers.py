"""Optimizers from config: legacy tf-keras optimizers, with learning-rate scaling.

The legacy optimizers (``tf.keras.optimizers.legacy``) are what the
ParameterServerStrategy tutorial recommends: their slots are ordinary variables placed
next to (and sharded like) the variable they belong to, and sparse gradients of
embedding lookups update only the rows a batch touched.
"""

from __future__ import annotations

import math

import tensorflow as tf

from recsys_dist.config.experiment import OptimizerSpec, TrainSpec


def scaled_learning_rate(spec: OptimizerSpec, train: TrainSpec, batch_size: int,
                         replicas_per_worker: int) -> float:
    """The learning rate after ``train.lr_scaling`` for one worker step's batch.

    One asynchronous step applies the gradient of one worker's batch (``batch_size``
    rows on each of its replicas), so that is the batch the rate scales with.
    """
    ratio = batch_size * replicas_per_worker / train.base_batch_size
    if train.lr_scaling == "linear":
        return spec.learning_rate * ratio
    if train.lr_scaling == "sqrt":
        return spec.learning_rate * math.sqrt(ratio)
    return spec.learning_rate


def make_optimizer(spec: OptimizerSpec, learning_rate: float):
    """Builds the legacy tf-keras optimizer ``spec`` names (call under strategy.scope())."""
    legacy = tf.keras.optimizers.legacy
    if spec.name == "adagrad":
        return legacy.Adagrad(learning_rate,
                              initial_accumulator_value=spec.initial_accumulator_value)
    if spec.name == "ftrl":
        return legacy.Ftrl(learning_rate,
                           initial_accumulator_value=spec.initial_accumulator_value,
                           l1_regularization_strength=spec.l1,
                           l2_regularization_strength=spec.l2)
    if spec.name == "sgd":
        return legacy.SGD(learning_rate)
    return legacy.Adam(learning_rate, beta_1=spec.beta_1, beta_2=spec.beta_2,
                       epsilon=spec.epsilon)
