"""Where a model's variables live under each strategy: the :class:`Placement` a caller
builds from its runtime (:func:`placement_for`) and passes to the model it builds
(``models/sharding.py`` defines the interface; the models never ask which strategy runs).

- ``ParameterServerStrategy``: a dynamic table's shards go round-robin on the parameter
  servers (one each when there are as many servers as shards); stacked tables are sharded
  by the strategy's partitioner (:class:`TablePartitioner`), dense variables never.
- ``MirroredStrategy`` (one process or several): a replica reads a table through its own
  copy: a gather through the ``MirroredVariable`` itself reads the whole table, and the
  step's sparse update of a table that is still referenced copies all of it first
  (gradients and updates are the same; ``cluster/mirrored.py``).

Only tables are sharded: sharding a small dense kernel buys nothing and changes training,
since tf-keras initialisers draw each shard on its own, so a kernel's initial scale would
depend on the number of parameter servers (see docs/training.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator

import tensorflow as tf

from recsys_dist.models.sharding import Placement

# TensorFlow calls a strategy's ``variable_partitioner`` with a variable's shape and dtype
# only, so which variables are tables cannot reach it as an argument. This thread-local,
# set by ParameterServerPlacement.creating_tables() around the layers' table weights, is
# the one channel to the partitioner that stays implicit.
_partitioned = threading.local()


@contextlib.contextmanager
def partitioned_tables() -> Iterator[None]:
    """Variables created inside may be sharded by :class:`TablePartitioner`."""
    _partitioned.depth = getattr(_partitioned, "depth", 0) + 1
    try:
        yield
    finally:
        _partitioned.depth -= 1


class TablePartitioner:
    """A ``MinSizePartitioner`` for embedding tables (the variables created inside
    :func:`partitioned_tables`); every other variable stays whole.

    Args:
      min_shard_bytes: Minimum bytes of one shard.
      max_shards: At most this many shards (the number of parameter servers).
    """

    def __init__(self, min_shard_bytes: int, max_shards: int):
        self._tables = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=min_shard_bytes, max_shards=max_shards
        )

    def __call__(self, shape, dtype, axis: int = 0) -> list[int]:
        if getattr(_partitioned, "depth", 0) == 0:
            return [1] * len(shape)
        return self._tables(shape, dtype, axis)


@dataclasses.dataclass(frozen=True)
class ParameterServerPlacement(Placement):
    """Variables on the parameter servers of the connected cluster.

    Args:
      servers: The parameter servers' CPU devices, by task index.
    """

    servers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "servers", tuple(self.servers))

    @classmethod
    def connected(cls, dynamic_shards: int | None = None) -> "ParameterServerPlacement":
        """The parameter servers this coordinator is connected to (its logical devices
        are the servers'); ``dynamic_shards`` by default one per server."""
        tasks = sorted(
            {
                int(d.name.split("/task:")[1].split("/")[0])
                for d in tf.config.list_logical_devices("CPU")
                if "/job:ps/" in d.name
            }
        )
        servers = tuple(f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in tasks)
        return cls(servers, dynamic_shards=dynamic_shards or len(servers) or 1)

    def server_count(self) -> int | None:
        return len(self.servers) or None

    def shard_devices(self, count: int) -> list[str | None]:
        servers = self.servers
        return [servers[i % len(servers)] if servers else None for i in range(count)]

    def variables_on(self, device: str | None, name: str):
        """Inside the strategy's scope ``tf.device`` is ignored for variables (it places
        them round-robin); its variable creator follows ``colocate_with``."""
        if device is None:
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        stack.enter_context(tf.device(device))
        stack.enter_context(tf.variable_creator_scope(_creator_on(device, name)))
        return stack

    def creating_tables(self):
        return partitioned_tables()


class _Place:
    """What ``ParameterServerStrategy``'s variable creator needs from ``colocate_with``
    to put a variable on a given server."""

    def __init__(self, device: str, name: str):
        self.device, self.name = device, name


def _creator_on(device: str, name: str):
    def creator(next_creator, **kwargs):
        if tf.distribute.has_strategy():
            kwargs["colocate_with"] = _Place(device, name)
        return next_creator(**kwargs)

    return creator


@dataclasses.dataclass(frozen=True)
class MirroredPlacement(Placement):
    """Variables mirrored on every replica; a replica reads its own copy."""

    def local_copy(self, table: tf.Variable) -> tf.Variable:
        if hasattr(table, "_get_on_device_or_primary"):
            return table._get_on_device_or_primary()  # noqa: SLF001  pylint: disable=protected-access
        return table


def placement_for(strategy: tf.distribute.Strategy, dynamic_shards: int | None = None) -> Placement:
    """The placement of models built under ``strategy``, with ``dynamic_shards`` shards
    per dynamic table (by default one per parameter server, else 1). Build the model
    inside ``strategy.scope()`` too."""
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        return ParameterServerPlacement.connected(dynamic_shards)
    shards = dynamic_shards or 1
    if isinstance(
        strategy, (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
    ):
        return MirroredPlacement(dynamic_shards=shards)
    return Placement(dynamic_shards=shards)


def new_run_dynamic_shards(placement: Placement, ps: int) -> int:
    """The shards a new run gives each dynamic table: one per parameter server of
    ``placement`` (``cluster.ps``, or the ``TF_CONFIG``'s ps tasks), else ``ps``
    (``cluster.ps``)."""
    return placement.server_count() or ps
