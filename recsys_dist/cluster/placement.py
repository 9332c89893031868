"""Where a model's variables live under each strategy: the :class:`Placement` the
cluster gives the models it builds (``models/sharding.py`` defines the interface; the
models never ask which strategy is running).

- ``ParameterServerStrategy``: a dynamic table's shards go round-robin on the parameter
  servers (one each when there are as many servers as shards); hashed tables are sharded
  by the strategy's partitioner (``cluster/runtime.py``).
- ``MirroredStrategy`` (one process or several): a replica reads a table through its own
  copy: a gather through the ``MirroredVariable`` itself reads the whole table, and the
  step's sparse update of a table that is still referenced copies all of it first
  (gradients and updates are the same; ``cluster/mirrored.py``).
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from recsys_dist.models.sharding import Placement, current_placement, placed


class ParameterServerPlacement(Placement):
    """Variables on the parameter servers of the connected cluster.

    Args:
      servers: The parameter servers' CPU devices, by task index.
    """

    def __init__(self, servers: list[str]):
        self.servers = servers

    @classmethod
    def connected(cls) -> "ParameterServerPlacement":
        """The parameter servers this coordinator is connected to (its logical devices
        are the servers')."""
        tasks = sorted(
            {
                int(d.name.split("/task:")[1].split("/")[0])
                for d in tf.config.list_logical_devices("CPU")
                if "/job:ps/" in d.name
            }
        )
        return cls([f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in tasks])

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


class MirroredPlacement(Placement):
    """Variables mirrored on every replica; a replica reads its own copy."""

    def local_copy(self, table: tf.Variable) -> tf.Variable:
        if hasattr(table, "_get_on_device_or_primary"):
            return table._get_on_device_or_primary()  # noqa: SLF001  pylint: disable=protected-access
        return table


def placement_for(strategy: tf.distribute.Strategy) -> Placement:
    """The placement of models built under ``strategy``."""
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        return ParameterServerPlacement.connected()
    if isinstance(
        strategy, (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
    ):
        return MirroredPlacement()
    return Placement()


@contextlib.contextmanager
def building_under(strategy: tf.distribute.Strategy):
    """``strategy.scope()`` with the strategy's placement in force: build models inside."""
    with strategy.scope(), placed(placement_for(strategy)):
        yield


def new_run_dynamic_shards(ps: int) -> int:
    """The shards a new run gives each dynamic table: one per parameter server of the
    placement in force (``cluster.ps``, or the ``TF_CONFIG``'s ps tasks), else ``ps``
    (``cluster.ps``)."""
    return current_placement().server_count() or ps
