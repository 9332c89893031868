"""Where a model's variables go: the :class:`Placement` a model is built with.

A model takes its placement as an argument (``build_model(..., placement=...)``) and hands
it to the layers that create tables. The default keeps everything in this process; the
caller builds the placement of a distribution strategy from its runtime
(``cluster/placement.py``), so no model module asks which strategy runs.
"""

from __future__ import annotations

import contextlib
import dataclasses

import tensorflow as tf


@dataclasses.dataclass(frozen=True, kw_only=True)
class Placement:
    """Where a model's embedding tables live and how a replica reads them. This one, the
    default, keeps everything in this process; ``cluster/placement.py`` defines the
    placement of each strategy.

    Attributes:
      dynamic_shards: Shards of each dynamic table. An id's shard is its hash modulo this
        count, so restoring a checkpoint needs the count it was saved with.
      stock_lookups: Dynamic-table lookups in stock TensorFlow ops only, not the package's
        row kernels: a model whose export plain TensorFlow serves. Such a model looks
        up only; it does not train.

    Raises:
      ValueError: ``dynamic_shards`` is not a positive integer.
    """

    dynamic_shards: int = 1
    stock_lookups: bool = False

    def __post_init__(self) -> None:
        shards = self.dynamic_shards
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise ValueError(
                f"Placement.dynamic_shards must be a positive integer. "
                f"Received: dynamic_shards={shards!r}"
            )

    def with_dynamic_shards(self, count: int) -> "Placement":
        """This placement with ``count`` shards per dynamic table."""
        return dataclasses.replace(self, dynamic_shards=count)

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

    def creating_tables(self):
        """The scope the embedding layers create their stacked tables in: nothing here;
        under ``ParameterServerStrategy`` the one whose tables its partitioner shards."""
        return contextlib.nullcontext()

    def local_copy(self, table: tf.Variable) -> tf.Variable:
        """The variable a replica reads a table through (a replica's own copy of a
        mirrored table; else the table)."""
        return table
