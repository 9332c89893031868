"""Checkpoints and exports of a dynamic table hold its rows in use only.

A dynamic shard hands out rows in order (``next_row``) and eviction moves the kept rows
to the front, so the rows in use are always the first ``next_row``. Checkpoints of a
shard's rows, last-seen days and optimizer slots hold those rows only
(:func:`save_rows_in_use`), and an export keeps only them (:func:`keep_live_rows_only`):
both grow with the live ids, not with the capacity.
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.checkpoint import tensor_callable
from tensorflow.python.trackable.base import VARIABLE_VALUE_KEY

from recsys_dist.models.dynamic_lookup import on_server

#: Set on the variables whose checkpoints hold only the rows in use (a dynamic shard's
#: ``emb``, ``last_seen`` and the optimizer slots of ``emb``): the shard's ``next_row``.
ROWS_IN_USE = "_recsys_dist_rows_in_use"


class RowsBeyondCapacity(ValueError):
    """A checkpoint holds more rows in use on a shard than the table's capacity now."""


def save_rows_in_use(variable: tf.Variable, in_use: tf.Variable, table: str, shard: int) -> None:
    """Makes checkpoints of ``variable`` (``[capacity_per_shard, ...]``) hold only its first
    ``in_use`` rows, the rows that have an id (rows are handed out in order, and eviction
    moves the kept ones to the front): a checkpoint grows with the live ids, not with the
    capacity. Restoring writes the saved rows back to the front and leaves the others as
    they are (in a new process, their initial values; the saved index points at none of
    them), so the capacity may differ from the saving run's as long as the rows in use fit
    (else :class:`RowsBeyondCapacity`, naming ``table`` and ``shard``). A checkpoint that
    holds every row (from earlier versions) restores the same way.

    It overrides the variable's own ``_serialize_to_tensors`` and
    ``_restore_from_tensors`` (TensorFlow's checkpoint hooks, which look at the instance
    first); the key stays ``VARIABLE_VALUE``, so warm starts read the rows by key as
    before."""
    key = VARIABLE_VALUE_KEY

    def read() -> tf.Tensor:
        with tf.device(variable.device):
            rows = variable.sparse_read(tf.range(in_use.read_value()))
        with tf.device("/device:CPU:0"):
            return tf.identity(rows)

    def serialize() -> dict:
        return {key: tensor_callable.Callable(read, dtype=variable.dtype, device=variable.device)}

    def restore(restored: dict):
        saved = restored[key]
        held, capacity = saved.shape[0], variable.shape[0]
        if held is not None and capacity is not None and held > capacity:
            raise RowsBeyondCapacity(
                f"dynamic table {table!r} holds {held:,} rows in use on shard {shard} in the "
                f"checkpoint, more than its capacity_per_shard {capacity:,} now; raise "
                f"tables.{table}.capacity_per_shard to at least {held:,}"
            )
        with tf.device(variable.device):
            rows = tf.range(tf.shape(saved, out_type=tf.int64)[0])
            return variable.scatter_update(tf.IndexedSlices(tf.identity(saved), rows))

    variable._serialize_to_tensors = serialize  # noqa: SLF001
    variable._restore_from_tensors = restore  # noqa: SLF001
    setattr(variable, ROWS_IN_USE, in_use)


def rows_in_use(variable) -> tf.Variable | None:
    """The ``next_row`` whose rows checkpoints of ``variable`` hold (see
    :func:`save_rows_in_use`), or None for a variable saved whole."""
    return getattr(variable, ROWS_IN_USE, None)


def save_slots_of_rows_in_use(tables: list, optimizers: list) -> None:
    """:func:`save_rows_in_use` for every optimizer slot of the tables' rows (call once
    the slots exist)."""
    for table in tables:
        for index, shard in enumerate(table.shards):
            for slot, _ in row_slots(shard.emb, optimizers):
                save_rows_in_use(slot, shard.next_row, table.spec.name, index)


def keep_live_rows_only(tables: list) -> None:
    """For an export: gives every shard of ``tables`` a new ``emb`` that holds only its
    rows in use (at least one row), so a SavedModel carries the live ids' rows, not the
    capacity. The tables still look ids up (every row in the index is below ``next_row``)
    but must not train or admit ids any more."""
    for table in tables:
        for shard in table.shards:
            count = max(int(shard.next_row.numpy()), 1)
            with on_server(shard.device):
                live = shard.emb.sparse_read(tf.range(count))
            shard.emb = tf.Variable(live, trainable=False, name=shard.emb.name.split(":")[0])


def row_slots(rows: tf.Variable, optimizers: list) -> list[tuple[tf.Variable, float]]:
    """``(slot, the value a fresh row's slot starts from)`` of every optimizer slot of
    ``rows``: Adagrad's and FTRL's accumulators start at ``initial_accumulator_value``,
    every other slot (FTRL's linear, Adam's moments, momentum) at 0."""
    found = []
    for optimizer in optimizers:
        start = float(optimizer.get_config().get("initial_accumulator_value", 0.0))
        for name in optimizer.get_slot_names():
            try:
                slot = optimizer.get_slot(rows, name)
            except KeyError:
                continue
            found.append((slot, start if name == "accumulator" else 0.0))
    return found
