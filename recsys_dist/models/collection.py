"""Every embedding table of one model, and one lookup of all of them per batch.

A model builds its embedding groups through its :class:`EmbeddingCollection`
(:meth:`~EmbeddingCollection.embeddings` for vectors, :meth:`~EmbeddingCollection.linear`
for a linear part's per-id weights, a stack of their own), each a
:class:`~recsys_dist.models.embedding.FeatureEmbeddings` placed by the placement the model
was built with. The model keeps each group in an attribute, which is where checkpoints
save its tables. Per batch, :meth:`~EmbeddingCollection.lookup` reads every group: the
hashed stacks each with one gather, and all the dynamic tables of all groups in one
resolution (one admission per server), and returns one view per group
(:class:`EmbeddedBatch`). Nothing is handed to a layer between calls.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from recsys_dist.features.config import FeatureConfig
from recsys_dist.models.blocks import InitializerLike
from recsys_dist.models.dynamic_lookup import lookup_tables
from recsys_dist.models.dynamic_table import DynamicTable, ModelTables
from recsys_dist.models.embedding import FeatureEmbeddings, FeatureLinear
from recsys_dist.models.sharding import Placement
from recsys_dist.models.table_stack import TableStack

#: One group's lookup: id-valued feature -> ``[B, D]`` (or a kept sequence), and the
#: dense numerics ``[B, n_dense]`` or None.
GroupLookup = tuple[dict[str, Any], "tf.Tensor | None"]


@dataclasses.dataclass(frozen=True)
class EmbeddedBatch:
    """Each group's lookup of one batch, by its layer (or the layer's name)."""

    groups: dict[str, GroupLookup]

    def __getitem__(self, group: "FeatureEmbeddings | str") -> GroupLookup:
        name = group if isinstance(group, str) else group.name
        if name not in self.groups:
            raise KeyError(f"no embedding group {name!r}; the model has {sorted(self.groups)}")
        return self.groups[name]


class EmbeddingCollection:
    """The embedding groups of one model, built where its tables live.

    A plain holder, not saved: each group is saved where the model keeps it.

    Args:
      features: The feature config.
      placement: Where the tables live and each dynamic table's shard count (default:
        this process, one shard).
    """

    def __init__(self, features: FeatureConfig, placement: Placement | None = None):
        self.features = features
        self.tables = ModelTables(placement)
        self._groups: dict[str, FeatureEmbeddings] = {}
        self._linear: set[str] = set()

    @property
    def placement(self) -> Placement:
        return self.tables.placement

    def embeddings(
        self,
        feature_names: list[str],
        name: str,
        seed: int | None = None,
        keep_sequences: bool = False,
        initializer: InitializerLike = "random_uniform",
    ) -> FeatureEmbeddings:
        """A new group of ``feature_names`` named ``name`` (unique in the model); see
        :class:`FeatureEmbeddings` for the arguments."""
        return self._add(
            FeatureEmbeddings(
                self.features,
                feature_names,
                initializer=initializer,
                seed=seed,
                keep_sequences=keep_sequences,
                name=name,
                tables=self.tables,
            )
        )

    def linear(self, feature_names: list[str], num_outputs: int, name: str) -> FeatureLinear:
        """T linear models over ``feature_names`` (:class:`FeatureLinear`); their per-id
        weights are the group ``<name>_embeddings``, a stack of dim T of their own."""
        weights = FeatureEmbeddings(
            self.features,
            feature_names,
            dim_override=num_outputs,
            initializer="zeros",
            name=f"{name}_embeddings",
            tables=self.tables,
        )
        self._linear.add(self._add(weights).name)
        return FeatureLinear(weights, num_outputs, name=name)

    def _add(self, layer: FeatureEmbeddings) -> FeatureEmbeddings:
        if layer.name in self._groups:
            raise ValueError(f"the model has two embedding groups named {layer.name!r}")
        self._groups[layer.name] = layer
        return layer

    @property
    def groups(self) -> list[FeatureEmbeddings]:
        """Every group, in the order they were built."""
        return list(self._groups.values())

    def is_linear(self, group: FeatureEmbeddings) -> bool:
        """The group holds a linear part's per-id weights."""
        return group.name in self._linear

    @property
    def stacks(self) -> list[TableStack]:
        """Every group's stacked hashed tables."""
        return [stack for group in self.groups for stack in group.stacks]

    @property
    def dynamic_tables(self) -> dict[str, list[DynamicTable]]:
        """Dynamic table name -> its :class:`DynamicTable` in each group that reads it."""
        found: dict[str, list[DynamicTable]] = {}
        for group in self.groups:
            for name, table in group.dynamic_tables.items():
                found.setdefault(name, []).append(table)
        return found

    def lookup(self, features: dict[str, Any], training: bool = False) -> EmbeddedBatch:
        """Every group's lookup of ``features``: the dynamic tables of all groups resolved
        together (one :func:`lookup_tables` per shard group, which the model's tables
        share), then each group pools its own."""
        plans = {g.name: g.dynamic_plan(features) for g in self.groups if g.dynamic_tables}
        together: dict[int, list[tuple[str, int]]] = {}  # shard group -> (group, table i)
        for name, plan in plans.items():
            for i, table in enumerate(plan.tables):
                together.setdefault(id(table.group), []).append((name, i))
        vectors: dict[tuple[str, int], tf.Tensor] = {}
        for members in together.values():
            found = lookup_tables(
                [plans[n].tables[i] for n, i in members],
                [plans[n].keys[i] for n, i in members],
                training,
            )
            vectors.update(zip(members, found))
        out = {}
        for group in self.groups:
            plan = plans.get(group.name)
            resolved = None
            if plan is not None:
                resolved = (plan, [vectors[group.name, i] for i in range(len(plan.tables))])
            with tf.name_scope(group.name):
                out[group.name] = group.lookup(features, training, resolved)
        return EmbeddedBatch(out)
