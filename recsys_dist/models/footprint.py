"""What a config's model keeps on the parameter servers and what one example looks up.

The capacity planner (``recsys_dist/cluster/capacity.py``) needs the model's variables
as the parameter-server strategy sees them: each stacked embedding weight with the tables
inside it, each dynamic table, and every other variable with its size, in the order the
model creates them (that order decides which server a whole variable lands on). Only the
model's own code knows its dense towers, so :func:`model_footprint` builds the model once
in this process, with every table cut to one row (dense sizes never depend on a table's
rows) and without any cluster, and reads that off it. This module's dataclasses import
no TensorFlow; :func:`model_footprint` does.

Example:
  >>> footprint = model_footprint(load_config("configs/demo.yaml"))
  >>> footprint.stacks[0].dim, footprint.dense_parameters
  (16, 303867)
"""

from __future__ import annotations

import dataclasses

from recsys_dist.config.experiment import ExperimentConfig


@dataclasses.dataclass(frozen=True)
class TableUse:
    """One table inside a stacked weight (or one dynamic table) of one embedding layer.

    Attributes:
      name: The table (a key of the feature config's ``tables``).
      rows: Its rows in the stack: the config's ``rows``; for a dynamic table its
        ``capacity_per_shard`` (on every server).
      ids_per_example: Ids one example looks up in it, over every feature of the layer
        that reads it (a multi-valued feature counts its ``max_length``: an upper bound).
      id_span: Rows its ids can reach (a feature's ``hash_buckets`` may be fewer than the
        table's rows); None for a dynamic table (every id its own row).
    """

    name: str
    rows: int
    ids_per_example: int
    id_span: int | None


@dataclasses.dataclass(frozen=True)
class StackFootprint:
    """One stacked weight of an embedding layer: every hashed table of one dim, by rows.

    Attributes:
      name: The layer and weight, e.g. ``embeddings/stack_d16``.
      dim: Embedding dim (a linear part's per-id weights: the number of labels).
      tables: Its tables in stacking order (the first starts at row 0).
      linear: Updated by ``train.linear_optimizer`` (per-id weights of a linear part).
    """

    name: str
    dim: int
    tables: tuple[TableUse, ...]
    linear: bool = False

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)


@dataclasses.dataclass(frozen=True)
class DynamicFootprint:
    """One dynamic table of an embedding layer: one shard on every parameter server.

    Attributes:
      name: The layer and table, e.g. ``embeddings/user``.
      dim: Embedding dim.
      table: Its use: ``rows`` is the capacity of each shard.
      linear: Updated by ``train.linear_optimizer``.
    """

    name: str
    dim: int
    table: TableUse
    linear: bool = False


@dataclasses.dataclass(frozen=True)
class PlacedVariable:
    """A variable that the strategy places whole, round-robin over the servers.

    Attributes:
      name: Variable name.
      parameters: Its number of float32 values.
      trainable: A dense weight (read and updated every step); else model state such
        as a batch-norm moving average or Keras's step counters.
    """

    name: str
    parameters: int
    trainable: bool


@dataclasses.dataclass(frozen=True)
class ModelFootprint:
    """What the parameter servers hold for a model and what one example looks up.

    Attributes:
      stacks: The stacked weights (sharded by rows over the servers).
      dynamic: The dynamic tables.
      created: Every variable in creation order, stacks included: a stack as a
        :class:`PlacedVariable` named like its :class:`StackFootprint` (it takes one
        turn of the round robin per shard), the others placed whole.
    """

    stacks: tuple[StackFootprint, ...]
    dynamic: tuple[DynamicFootprint, ...]
    created: tuple[PlacedVariable, ...]

    @property
    def dense(self) -> tuple[PlacedVariable, ...]:
        """The dense weights: trainable variables that are not tables."""
        stacks = {s.name for s in self.stacks}
        return tuple(v for v in self.created if v.trainable and v.name not in stacks)

    @property
    def dense_parameters(self) -> int:
        return sum(v.parameters for v in self.dense)


def model_footprint(config: ExperimentConfig) -> ModelFootprint:
    """Builds ``config``'s model with one-row tables in this process and returns its
    :class:`ModelFootprint` with the config's real table sizes. Loads TensorFlow."""
    import tensorflow as tf

    from recsys_dist.models.sharding import Placement
    from recsys_dist.models.zoo import build_from_config

    tiny = {
        name: dataclasses.replace(
            t, rows=None if t.dynamic else 1, capacity_per_shard=1 if t.dynamic else None
        )
        for name, t in config.features.tables.items()
    }
    small = dataclasses.replace(config, features=dataclasses.replace(config.features, tables=tiny))
    created: list = []

    def record(next_creator, **kwargs):
        variable = next_creator(**kwargs)
        created.append(variable)
        return variable

    with tf.device("/cpu:0"), tf.variable_creator_scope(record):
        model = build_from_config(small, Placement(dynamic_shards=1))
    collection = model.embedding_collection
    layers = collection.groups
    linear = {id(layer) for layer in layers if collection.is_linear(layer)}
    stacks, dynamic, stack_of = [], [], {}
    for layer in layers:
        uses = _table_uses(config, layer)
        for stack in layer.stacks:
            name = f"{layer.name}/stack_d{int(stack.variable.shape[1])}"
            stacks.append(
                StackFootprint(
                    name,
                    int(stack.variable.shape[1]),
                    tuple(uses[t] for t in stack.layout),
                    id(layer) in linear,
                )
            )
            stack_of[stack.variable.ref()] = name
        for table_name, table in layer.dynamic_tables.items():
            dynamic.append(
                DynamicFootprint(
                    f"{layer.name}/{table_name}", table.dim, uses[table_name], id(layer) in linear
                )
            )
    shards = [
        shard
        for tables in model.dynamic_tables.values()
        for table in tables
        for shard in table.shards
    ]
    colocated = {v.ref() for shard in shards for v in shard.variables}
    # a shard's admission switch is held outside its tracked variables: known by its name
    prefixes = tuple(f"{shard.name}_" for shard in shards)
    dense = {v.ref() for v in model.dense_variables}
    placed = []
    for variable in created:
        if variable.ref() in colocated or variable.name.split(":")[0].rsplit("/", 1)[-1].startswith(
            prefixes
        ):
            continue
        if variable.ref() in stack_of:
            placed.append(PlacedVariable(stack_of[variable.ref()], 0, True))
        else:
            placed.append(
                PlacedVariable(
                    variable.name.split(":")[0],
                    int(variable.shape.num_elements()),
                    variable.ref() in dense,
                )
            )
    stack_rows = {s.name: s.rows * s.dim for s in stacks}
    placed = [
        dataclasses.replace(v, parameters=stack_rows[v.name]) if v.name in stack_rows else v
        for v in placed
    ]
    return ModelFootprint(tuple(stacks), tuple(dynamic), tuple(placed))


def _table_uses(config: ExperimentConfig, layer) -> dict[str, TableUse]:
    """Each table ``layer`` reads: its rows, ids per example and the rows ids reach."""
    ids: dict[str, int] = {}
    span: dict[str, int] = {}
    for name in layer.sparse_feature_names:
        feature = config.features.features[name]
        table = feature.table_name
        example = feature.example_input(1)[name]
        per_row = int(example["ids"].shape[-1]) if isinstance(example, dict) else 1
        ids[table] = ids.get(table, 0) + per_row
        span[table] = max(span.get(table, 0), config.features.rows_of(feature))
    uses = {}
    for table, count in ids.items():
        spec = config.features.tables[table]
        if spec.dynamic:
            uses[table] = TableUse(table, spec.capacity_per_shard, count, None)
        else:
            uses[table] = TableUse(table, spec.rows, count, min(span[table], spec.rows))
    return uses
