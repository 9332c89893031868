"""Optimizers from config: legacy tf-keras optimizers, with learning-rate scaling.

The legacy optimizers (``tf.keras.optimizers.legacy``) are what the
ParameterServerStrategy tutorial recommends: their slots are ordinary variables placed
next to (and sharded like) the variable they belong to, and sparse gradients of
embedding lookups update only the rows a batch touched.
"""

from __future__ import annotations

import math

import tensorflow as tf

from recsys_dist.checkpoint.restore import create_slots
from recsys_dist.config.sections import OptimizerSpec, TrainSpec
from recsys_dist.models.dynamic_table import has_unique_rows
from recsys_dist.models.rows_in_use import save_slots_of_rows_in_use


def scaled_learning_rate(spec: OptimizerSpec, train: TrainSpec, batch_size: int) -> float:
    """The learning rate after ``train.lr_scaling`` for a step of ``batch_size`` rows.

    One step applies the gradient of ``input.batch_size`` rows: one worker's batch under
    ``parameter_server`` (an asynchronous step), the global batch under ``mirrored`` and
    ``multi_worker_mirrored`` (a synchronous step; each replica takes ``batch_size /
    replicas`` of its rows). Scaling
    is off unless ``train.lr_scaling`` asks for it.
    """
    ratio = batch_size / train.base_batch_size
    if train.lr_scaling == "linear":
        return spec.learning_rate * ratio
    if train.lr_scaling == "sqrt":
        return spec.learning_rate * math.sqrt(ratio)
    return spec.learning_rate


_schedules = tf.keras.optimizers.schedules


@tf.keras.utils.register_keras_serializable(package="recsys_dist")
class PassDecay(_schedules.LearningRateSchedule):
    """``rate * factor ** (step / steps_per_pass)``: the learning rate falls smoothly by
    ``factor`` per pass over the training split (``train.lr_decay_per_epoch``)."""

    def __init__(self, rate: float, factor: float, steps_per_pass: int):
        self.rate, self.factor = float(rate), float(factor)
        self.steps_per_pass = int(steps_per_pass)

    def __call__(self, step):
        passes = tf.cast(step, tf.float32) / float(self.steps_per_pass)
        return self.rate * tf.pow(self.factor, passes)

    def get_config(self) -> dict:
        return {"rate": self.rate, "factor": self.factor, "steps_per_pass": self.steps_per_pass}


@tf.keras.utils.register_keras_serializable(package="recsys_dist")
class LinearWarmup(_schedules.LearningRateSchedule):
    """``rate * min(1, (step + 1) / steps)``: the learning rate ramps up linearly over the
    first ``steps`` steps of the optimizer (``train.warmup_steps``), then stays. ``rate``
    is a number or a schedule (:class:`PassDecay`) that the ramp multiplies."""

    def __init__(self, rate: "float | _schedules.LearningRateSchedule | dict", steps: int):
        if isinstance(rate, dict):
            rate = _schedules.deserialize(rate)
        self.rate = rate if callable(rate) else float(rate)
        self.steps = int(steps)

    def __call__(self, step):
        done = (tf.cast(step, tf.float32) + 1.0) / float(self.steps)
        rate = self.rate(step) if callable(self.rate) else self.rate
        return rate * tf.minimum(1.0, done)

    def get_config(self) -> dict:
        rate = _schedules.serialize(self.rate) if callable(self.rate) else self.rate
        return {"rate": rate, "steps": self.steps}


class _UniqueRowsFirst:
    """Applies a sparse gradient of a dynamic table's rows as it is: its rows never repeat
    within a step (:func:`~recsys_dist.models.dynamic_table.has_unique_rows`), so the
    legacy optimizers' de-duplication (a ``Unique`` and an ``UnsortedSegmentSum`` per
    variable and step, on its server) would only copy it. Other variables keep it."""

    def _resource_apply_sparse_duplicate_indices(self, grad, var, indices, **kwargs):
        if has_unique_rows(var):
            return self._resource_apply_sparse(grad, var, indices, **kwargs)
        return super()._resource_apply_sparse_duplicate_indices(grad, var, indices, **kwargs)


class _SparseSumsNeverEmpty:
    """Sums replicas' sparse gradients with one extra row each, index -1 and zeros, which
    is dropped from the sum. TensorFlow's collective all-gather of a sparse gradient ends
    the process (SIGSEGV in ``RingGatherer``) when every replica's gradient of a table has
    no rows in the same step, which happens under ``multi_worker_mirrored`` when a
    list feature's ids are all null in every replica's slice of a batch. With the extra
    row no gather is ever empty; the sum is unchanged."""

    def _aggregate_gradients(self, grads_and_vars):
        context = tf.distribute.get_replica_context()
        if context is None or context.num_replicas_in_sync == 1:
            return super()._aggregate_gradients(grads_and_vars)
        padded = [(_with_padding_row(g), v) for g, v in grads_and_vars]
        return [(_without_padding_rows(g), v) for g, v in super()._aggregate_gradients(padded)]


def _with_padding_row(gradient):
    if not isinstance(gradient, tf.IndexedSlices):
        return gradient
    values = gradient.values
    zeros = tf.zeros(tf.concat([[1], tf.shape(values)[1:]], 0), values.dtype)
    return tf.IndexedSlices(
        tf.concat([values, zeros], 0),
        tf.concat([gradient.indices, tf.constant([-1], gradient.indices.dtype)], 0),
        gradient.dense_shape,
    )


def _without_padding_rows(gradient):
    if not isinstance(gradient, tf.IndexedSlices):
        return gradient
    kept = tf.where(gradient.indices >= 0)[:, 0]
    return tf.IndexedSlices(
        tf.gather(gradient.values, kept), tf.gather(gradient.indices, kept), gradient.dense_shape
    )


def _optimizer_class(base: type, unique_rows: bool) -> type:
    mixins = (_SparseSumsNeverEmpty,) + ((_UniqueRowsFirst,) if unique_rows else ())
    return type(base.__name__, (*mixins, base), {"__module__": __name__})


_legacy = tf.keras.optimizers.legacy
#: The optimizer class of each name. Plain SGD applies sparse gradients with a scatter-add,
#: which needs no de-duplication, so it keeps its own.
OPTIMIZERS = {
    "adagrad": _optimizer_class(_legacy.Adagrad, unique_rows=True),
    "ftrl": _optimizer_class(_legacy.Ftrl, unique_rows=True),
    "sgd": _optimizer_class(_legacy.SGD, unique_rows=False),
    "adam": _optimizer_class(_legacy.Adam, unique_rows=True),
}


def make_optimizer(spec: OptimizerSpec, learning_rate: float | _schedules.LearningRateSchedule):
    """Builds the legacy tf-keras optimizer ``spec`` names (call under strategy.scope());
    ``learning_rate`` is a rate or a schedule of it."""
    cls = OPTIMIZERS[spec.name]
    if spec.name == "adagrad":
        return cls(learning_rate, initial_accumulator_value=spec.initial_accumulator_value)
    if spec.name == "ftrl":
        return cls(
            learning_rate,
            initial_accumulator_value=spec.initial_accumulator_value,
            l1_regularization_strength=spec.l1,
            l2_regularization_strength=spec.l2,
        )
    if spec.name == "sgd":
        return cls(learning_rate)
    return cls(learning_rate, beta_1=spec.beta_1, beta_2=spec.beta_2, epsilon=spec.epsilon)


class ModelOptimizers:
    """The optimizers of one model, each over its own group of variables.

    - ``embedding``: the embedding tables (without the linear ones when ``linear`` is set);
    - ``linear``: the per-id weights of linear parts, when ``train.linear_optimizer`` is set;
    - ``dense``: everything else (towers, heads, biases).

    Each learning rate is scaled (``train.lr_scaling``), lowered by
    ``train.lr_decay_per_epoch`` per pass (:class:`PassDecay`; ``steps_per_epoch``, the
    steps of one pass over the training split, is then required), then ramped up over the
    first ``train.warmup_steps`` steps (:class:`LinearWarmup`) when set. The groups partition
    the model's trainable variables. Build it under the strategy scope; it creates every
    slot at once (before any restore: ``checkpoint/store.py``).
    """

    def __init__(
        self, model, train: TrainSpec, batch_size: int, steps_per_epoch: int | None = None
    ):
        decay = train.lr_decay_per_epoch
        decays = decay is not None and decay < 1.0
        if decays and not steps_per_epoch:
            raise ValueError("train.lr_decay_per_epoch needs the steps of one pass")

        def build(spec: OptimizerSpec):
            rate = scaled_learning_rate(spec, train, batch_size)
            if decays:
                rate = PassDecay(rate, decay, steps_per_epoch)
            if train.warmup_steps:
                rate = LinearWarmup(rate, train.warmup_steps)
            return make_optimizer(spec, rate)

        self.embedding, self.dense = build(train.embedding_optimizer), build(train.dense_optimizer)
        self.linear = build(train.linear_optimizer) if train.linear_optimizer else None
        self.tables = model.embedding_variables
        linear = {v.ref() for v in model.linear_variables} if self.linear else set()
        #: (optimizer, indices into ``tables``) of each group of tables.
        self.table_groups = [
            (self.embedding, [i for i, v in enumerate(self.tables) if v.ref() not in linear])
        ]
        if self.linear:
            self.table_groups.append(
                (self.linear, [i for i, v in enumerate(self.tables) if v.ref() in linear])
            )
        self.dense_variables = model.dense_variables
        for optimizer, indices in self.table_groups:
            create_slots(optimizer, [self.tables[i] for i in indices])
        create_slots(self.dense, self.dense_variables)
        # a dynamic table's slots are checkpointed as its rows are: the rows in use only
        save_slots_of_rows_in_use(
            [t for tables in model.dynamic_tables.values() for t in tables], self.all
        )

    @property
    def all(self) -> list:
        """Every optimizer."""
        return [self.embedding, self.dense] + ([self.linear] if self.linear else [])

    def checkpoint_objects(self) -> dict:
        """Named optimizers for ``tf.train.Checkpoint`` (``linear_optimizer`` only when set,
        so checkpoints without it keep their layout)."""
        objects = {"embedding_optimizer": self.embedding, "dense_optimizer": self.dense}
        if self.linear:
            objects["linear_optimizer"] = self.linear
        return objects

    def apply(self, table_gradients: list, dense_gradients: list) -> None:
        """Applies the gradients of the model's ``embedding_variables`` (in that order)
        and of its ``dense_variables``, each group with its optimizer."""
        for optimizer, indices in self.table_groups:
            optimizer.apply_gradients([(table_gradients[i], self.tables[i]) for i in indices])
        self.dense.apply_gradients(zip(dense_gradients, self.dense_variables))
