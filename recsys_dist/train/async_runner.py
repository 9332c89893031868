"""The asynchronous runner (``parameter_server`` and ``mirrored``): one ``tf.function``
per work item, scheduled by the coordinator on whichever worker is free.

The data of a step never leaves its worker: the closure carries only an item's address
(file, first and last row), and the worker reads those rows in-graph with a ``tf.data``
pipeline (``InputPipeline.item_dataset``). Dense towers are read at the start of a step
(or, with ``train.dense_refresh_steps``, every that many steps: ``train/dense_cache.py``)
and their gradients sent back every step: no worker waits for another.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from recsys_dist.data.input_fn import InputPipeline
from recsys_dist.train.dense_cache import DenseWeightCache
from recsys_dist.train.step import ReplicaStep


def async_train_item(
    strategy,
    pipeline: InputPipeline,
    replica: ReplicaStep,
    global_step: tf.Variable,
    dense_refresh_steps: int | None,
):
    """``train_item(file_index, start, stop, stride, max_steps) -> (loss sum, weight,
    rows, steps, first step's end)``: trains rows ``start, start + stride, ...`` below
    ``stop`` of file ``file_index`` (a work item) on the worker it runs on, at most
    ``max_steps`` steps, and advances ``global_step``."""

    def total(value):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

    @tf.function
    def train_item(file_index, start, stop, stride, max_steps):
        loss_sum, weight, rows = tf.constant(0.0), tf.constant(0.0), tf.constant(0.0)
        steps = tf.constant(0, tf.int64)
        first_step_at = tf.constant(0.0, tf.float64)  # 0: no step
        # An explicit iterator keeps the steps in this function's own while loop; a
        # `for batch in dataset` would run them inside tf.data's reduce, which is slower.
        iterator = iter(
            pipeline.item_dataset(file_index, start, stop, training=True, stride=stride)
        )
        cache = (
            DenseWeightCache(replica.model.dense_variables, dense_refresh_steps)
            if dense_refresh_steps is not None
            else None
        )
        with cache.scope() if cache else contextlib.nullcontext([]) as dense_copies:
            for step in tf.range(max_steps):
                if cache:
                    dense_copies = cache.refresh(dense_copies, step)
                optional = iterator.get_next_as_optional()
                if not optional.has_value():
                    break
                step_loss, step_weight, step_rows = strategy.run(
                    replica.run, args=(optional.get_value(), dense_copies)
                )
                loss_sum += total(step_loss)
                weight += total(step_weight)
                rows += total(step_rows)
                steps += 1
                if step == 0:  # when this worker's first step of the item ended
                    with tf.control_dependencies([loss_sum, weight, rows]):
                        first_step_at = tf.timestamp()
        global_step.assign_add(steps)
        return loss_sum, weight, rows, steps, first_step_at

    return train_item
