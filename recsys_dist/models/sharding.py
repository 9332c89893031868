"""Where a model's variables go: which the parameter-server strategy may shard (embedding
tables only), how many shards a dynamic table has, and the :class:`Placement` the cluster
layer gives a model it builds. The models themselves know no strategy: they ask this
module, which the cluster fills in (``cluster/placement.py``).

Only tables are sharded. ``ParameterServerStrategy`` asks its ``variable_partitioner``
about every variable, dense kernels included, but sharding a small dense kernel buys
nothing and changes training: tf-keras initialisers draw each shard on its own, so a
kernel's initial scale would depend on the number of parameter servers (see
docs/training.md). :class:`TablePartitioner` therefore shards only variables created
inside :func:`embedding_tables`, which the embedding layers use.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import tensorflow as tf

_scope = threading.local()


@contextlib.contextmanager
def embedding_tables() -> Iterator[None]:
    """Variables created inside may be sharded by :class:`TablePartitioner`."""
    _scope.depth = getattr(_scope, "depth", 0) + 1
    try:
        yield
    finally:
        _scope.depth -= 1


class TablePartitioner:
    """A ``MinSizePartitioner`` for embedding tables; every other variable stays whole.

    Args:
      min_shard_bytes: Minimum bytes of one shard.
      max_shards: At most this many shards (the number of parameter servers).
    """

    def __init__(self, min_shard_bytes: int, max_shards: int):
        self._tables = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=min_shard_bytes, max_shards=max_shards
        )

    def __call__(self, shape, dtype, axis: int = 0) -> list[int]:
        if getattr(_scope, "depth", 0) == 0:
            return [1] * len(shape)
        return self._tables(shape, dtype, axis)


@contextlib.contextmanager
def dynamic_table_shards(count: int) -> Iterator[None]:
    """Dynamic tables built inside have ``count`` shards (under
    ``ParameterServerStrategy`` placed round-robin on the parameter servers)."""
    previous = dynamic_shards()
    _scope.dynamic_shards = count
    try:
        yield
    finally:
        _scope.dynamic_shards = previous


def dynamic_shards() -> int:
    """The shard count :func:`dynamic_table_shards` set (default 1)."""
    return getattr(_scope, "dynamic_shards", 1)


class Placement:
    """Where a model's variables live and how a replica reads them. This one, the
    default, keeps everything in this process; the cluster layer gives a model built
    under a distribution strategy its own (``cluster/placement.py``), through
    :func:`placed`. Layers take the placement in force when they are built.
    """

    def server_count(self) -> int | None:
        """Parameter servers the variables are spread over (None: no servers)."""
        return None

    def shard_devices(self, count: int) -> list[str | None]:
        """The device of each of ``count`` shards of a dynamic table (None: this
        process's device)."""
        return [None] * count

    def variables_on(self, device: str | None, name: str):
        """A scope whose variables are created on ``device``."""
        return tf.device(device) if device is not None else contextlib.nullcontext()

    def local_copy(self, table: tf.Variable) -> tf.Variable:
        """The variable a replica reads a table through (a replica's own copy of a
        mirrored table; else the table)."""
        return table


_DEFAULT_PLACEMENT = Placement()


@contextlib.contextmanager
def placed(placement: Placement) -> Iterator[None]:
    """Models built inside place their variables by ``placement``."""
    previous = current_placement()
    _scope.placement = placement
    try:
        yield
    finally:
        _scope.placement = previous


def current_placement() -> Placement:
    """The placement :func:`placed` set (default: everything in this process)."""
    return getattr(_scope, "placement", _DEFAULT_PLACEMENT)
