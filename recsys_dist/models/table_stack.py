"""Tables stacked by embedding dim: one weight per dim, each table a block of its rows.

A layer keeps all its tables of one embedding dim in one weight (:class:`TableStack`
records where each table starts), so a step gathers every feature's rows with one lookup
and sends one sparse update per stack shard. Under ``ParameterServerStrategy`` with a
partitioner the weight is a ``ShardedVariable`` split by rows into contiguous blocks;
:func:`shard_rows` says which rows each shard holds, :class:`StackedTable` reads or
writes one table's rows touching only the shards that hold them, and
:class:`StackInitializer` draws each table from its own seed however the shards cut it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from recsys_dist.models.blocks import InitializerLike, derive_seed, seeded_initializer


def shards_of(table: tf.Variable) -> tf.Variable | list[tf.Variable]:
    """A ShardedVariable's shards (so lookups never concatenate the table), else the table.

    ``tf.nn.embedding_lookup`` over a list of shards uses the ``div`` layout that
    ``ParameterServerStrategy`` partitions with: shard i holds a contiguous block of rows.
    """
    if isinstance(table, tf.__internal__.distribute.ShardedVariable):
        return table.variables
    return table


def shard_rows(variable: tf.Variable) -> list[tuple[tf.Variable, int, int]]:
    """``(shard, first row, end row)`` of each shard of ``variable`` (one for a plain one)."""
    out, first = [], 0
    for shard in _as_list(shards_of(variable)):
        rows = int(shard.shape[0])
        out.append((shard, first, first + rows))
        first += rows
    return out


def assign_shard_rows(shard: tf.Variable, first: int, value: tf.Tensor) -> None:
    """Writes ``value`` into rows ``[first, first + len(value))`` of one shard.

    A scatter, not a sliced assign: under ``ParameterServerStrategy`` a shard is an
    ``AggregatingVariable``, whose slices are plain tensors.
    """
    rows = tf.range(first, first + tf.shape(value, out_type=tf.int64)[0])
    shard.scatter_update(tf.IndexedSlices(value, rows))


def _as_list(shards) -> list:
    return list(shards) if isinstance(shards, (list, tuple)) else [shards]


@dataclasses.dataclass(frozen=True)
class TableStack:
    """Every table of one embedding dim in a layer, stacked by rows into one weight.

    Attributes:
      key: Stable name of the stack, ``<layer>/embedding/stack_d<D>``; checkpoints
        record each stack's layout under it (``checkpoint/warm_start.py`` reads it).
      variable: The ``[sum of rows, D]`` weight (a ``ShardedVariable`` when partitioned).
      layout: Table -> ``(first row, rows)`` inside the stack, in stacking order.
    """

    key: str
    variable: tf.Variable
    layout: dict[str, tuple[int, int]]


class StackedTable:
    """One table's rows inside its :class:`TableStack`: read or assigned as ``[rows, D]``.

    Reads and writes touch only the shards holding the table's rows.
    """

    def __init__(self, stack: TableStack, table: str):
        self.stack = stack
        self.first_row, self.rows = stack.layout[table]

    @property
    def shape(self) -> tf.TensorShape:
        return tf.TensorShape([self.rows, self.stack.variable.shape[1]])

    def _pieces(self):
        end = self.first_row + self.rows
        for shard, start, stop in shard_rows(self.stack.variable):
            a, b = max(start, self.first_row), min(stop, end)
            if a < b:
                yield shard, a - start, b - start, a - self.first_row, b - self.first_row

    def read_value(self) -> tf.Tensor:
        return tf.concat([shard[a:b] for shard, a, b, _, _ in self._pieces()], axis=0)

    def numpy(self) -> np.ndarray:
        return self.read_value().numpy()

    def assign(self, value) -> None:
        value = tf.convert_to_tensor(value, self.stack.variable.dtype)
        if value.shape != self.shape:
            raise ValueError(
                f"table of shape {self.shape} cannot take a value of shape {value.shape}"
            )
        for shard, a, _, i, j in self._pieces():
            assign_shard_rows(shard, a, value[i:j])


class StackInitializer(tf.keras.initializers.Initializer):
    """Initialises a stack table by table, each table from its own seed.

    Called for a whole stack or, under a partitioner, for one shard's rows
    (``partition_offset`` / ``partition_shape``); a table cut by a shard boundary draws
    each part from a seed derived from where the part starts.
    """

    def __init__(
        self, initializer: InitializerLike, seed: int | None, layout: dict[str, tuple[int, int]]
    ):
        self._initializer, self._seed, self._layout = initializer, seed, layout

    def __call__(self, shape, dtype=None, **kwargs):
        first = kwargs.get("partition_offset", (0,))[0]
        rows = kwargs.get("partition_shape", shape)[0]
        pieces = []
        for table, (start, count) in self._layout.items():
            a, b = max(first, start), min(first + rows, start + count)
            if a < b:
                seed = derive_seed(self._seed, table, *([a - start] if a > start else []))
                pieces.append(
                    seeded_initializer(self._initializer, seed)((b - a, shape[1]), dtype=dtype)
                )
        return tf.concat(pieces, axis=0)
