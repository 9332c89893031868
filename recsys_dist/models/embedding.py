"""Embedding lookups for a group of features, with tables ready for parameter servers.

Shape letters: B batch size, L ids per row of a multi_categorical or sequence feature
(its ``max_length``), D a table's embedding dim, T number of outputs (labels). A batch
(:mod:`recsys_dist.features.transforms`) holds int64 ``[B]`` table rows for categorical,
cross and bucketized numeric features, float32 ``[B]`` for other numerics, and
``{"ids": int64 [B, L], "weights": float32 [B, L]}`` (weight 0: padding) for
multi_categorical and sequence features.

A layer stacks all its tables of one dim by rows into one weight, ``embedding/stack_d<D>``
(:class:`TableStack` records where each table starts), because every variable a step
touches on a parameter server costs a round trip whatever its size. Created with
``add_weight`` under ``ParameterServerStrategy.scope()``, a stack becomes a
``ShardedVariable`` read only through ``tf.nn.embedding_lookup``, never whole. See
docs/training.md#what-lives-where.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from recsys_dist.features.config import FeatureConfig
from recsys_dist.models.blocks import InitializerLike, derive_seed
from recsys_dist.models.dynamic_lookup import lookup_tables
from recsys_dist.models.dynamic_table import DynamicTable, ModelTables, ShardGroup
from recsys_dist.models.table_stack import (
    StackedTable,
    StackInitializer,
    TableStack,
    shards_of,
)
from recsys_dist.yaml_schema import did_you_mean


def _lookup(table: tf.Variable, ids: tf.Tensor) -> tf.Tensor:
    """Rows ``[N, D]`` of ``table`` for 1-D ``ids`` ``[N]``; each distinct id is read once."""
    unique_ids, index = tf.unique(ids)
    return tf.gather(tf.nn.embedding_lookup(shards_of(table), unique_ids), index)


def _present(ids: tf.Tensor, weights: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """The ``[B, L]`` ids a pooled feature reads (weight != 0), their ``[row, position]``
    and weights. Padding is never looked up (a dynamic table would admit its id)."""
    present = tf.not_equal(weights, 0.0)
    return (tf.boolean_mask(ids, present), tf.where(present), tf.boolean_mask(weights, present))


@dataclasses.dataclass(frozen=True)
class KeptSequence:
    """A sequence feature's vectors at its real positions only (ragged, no padding).

    Attributes:
      values: ``[R, D]`` the vectors of the batch's R real positions, row-major order.
      positions: ``[R, 2]`` int64 ``(row, position)`` of each.
      shape: ``[2]`` int64, the feature's ``[B, L]``.
    """

    values: tf.Tensor
    positions: tf.Tensor
    shape: tf.Tensor

    @property
    def rows(self) -> tf.Tensor:
        """``[R]`` the example of each real position."""
        return self.positions[:, 0]

    def padded(self) -> tf.Tensor:
        """``[B, L, D]``: each vector at its position, zeros at padding."""
        return scatter_padded(self.values, self.positions, self.shape)


def scatter_padded(values: tf.Tensor, positions: tf.Tensor, shape: tf.Tensor) -> tf.Tensor:
    """``[B, L, D]`` from ``values`` ``[R, D]`` at ``positions`` ``[R, 2]`` of ``shape``
    ``[B, L]``; zeros elsewhere."""
    full = tf.concat([shape, tf.shape(values, out_type=tf.int64)[1:]], 0)
    return tf.scatter_nd(positions, values, full)


def _pool(
    vectors: tf.Tensor, where: tf.Tensor, kept_weights: tf.Tensor, weights: tf.Tensor, combiner: str
) -> "tf.Tensor | KeptSequence":
    """Pools the looked-up ``vectors`` of :func:`_present` into ``[B, D]``, or with
    combiner ``keep`` keeps them at their real positions (:class:`KeptSequence`).

    ``sum``: sum_l w e; ``mean``: sum_l w e / sum_l w; ``sqrtn``: sum_l w e / sqrt(sum_l w^2);
    a row whose divisor is 0 pools to zeros.
    """
    if combiner == "keep":
        return KeptSequence(vectors, where, tf.shape(weights, out_type=tf.int64))
    total = tf.math.unsorted_segment_sum(
        vectors * kept_weights[:, None], where[:, 0], num_segments=tf.shape(weights)[0]
    )
    if combiner == "sum":
        return total
    if combiner == "mean":
        divisor = tf.reduce_sum(weights, axis=1)
    else:
        divisor = tf.sqrt(tf.reduce_sum(tf.square(weights), axis=1))
    return tf.math.divide_no_nan(total, divisor[:, None])


class FeatureEmbeddings(tf.keras.layers.Layer):
    """Pooled embeddings of a group's id-valued features, plus its dense numerics.

    The tables the features use are stacked, one weight ``embedding/stack_d<D>`` per
    embedding dim (see the module docstring); features naming the same table share its
    rows. Each call gathers all rows of a stack with one lookup. Rows of different tables
    never mix: a table's ids are offset by its first row, and the feature transforms keep
    every id below its table's ``rows``. Each feature's kind says which table it reads
    (``table_name``), how a multi-valued input is pooled (``embedding_combiner``) and which
    dense inputs it gives (``outputs``).

    Args:
      features: The feature config.
      feature_names: Features of this group, in model order.
      dim_override: Use this dim for every table instead of the table's ``dim`` (e.g.
        the per-id weights of a linear model).
      initializer: Initializer of every table; the default ``random_uniform`` is
        U(-0.05, 0.05), Keras's ``Embedding`` default. Under a
        ``variable_partitioner`` Keras initializers draw each shard separately, so
        sharded and unsharded tables start from different (still seeded) values.
      seed: Seed of the table initializers; each table gets its own derived seed.
      keep_sequences: Give each ``sequence`` feature as a :class:`KeptSequence` (its
        vectors at its real positions, position 0 the newest) instead of pooling it with
        its ``pooling``; attention models read it.
      name: Layer name; prefixes the variable names.
      tables: What the model's embedding layers share (:class:`ModelTables`: the
        placement, the dynamic tables' shard group and id indexes); default: this
        process, one shard per dynamic table, shared with no other layer.

    Call args:
      features: A batch as produced by the input pipeline (extra keys are ignored).

    Returns:
      ``(sparse, dense)``: ``sparse`` maps each id-valued feature (in
      ``feature_names`` order) to ``[B, D]`` (a :class:`KeptSequence` for a kept sequence);
      ``dense`` is ``[B, n_dense]`` stacking the non-bucketized numeric features in
      order, or None when there are none.

    Raises:
      ValueError: An unknown, repeated or missing feature name, or a bad ``dim_override``.

    Example:
      >>> layer = FeatureEmbeddings(cfg, ["ad_id", "tags", "price"], seed=0)
      >>> sparse, dense = layer(batch)
      >>> sparse["tags"].shape, dense.shape
      (TensorShape([32, 16]), TensorShape([32, 1]))
    """

    def __init__(
        self,
        features: FeatureConfig,
        feature_names: list[str],
        dim_override: int | None = None,
        initializer: InitializerLike = "random_uniform",
        seed: int | None = None,
        keep_sequences: bool = False,
        name: str = "feature_embeddings",
        tables: ModelTables | None = None,
        **kwargs: Any,
    ):
        super().__init__(name=name, **kwargs)
        self._tables = tables or ModelTables()
        self._placement = self._tables.placement  # how a replica reads the tables
        feature_names = list(feature_names)
        check_feature_names(features, feature_names)
        if dim_override is not None and (not isinstance(dim_override, int) or dim_override < 1):
            raise ValueError(
                f"dim_override must be None or a positive integer. "
                f"Received: dim_override={dim_override}"
            )
        self._feature_tables = {
            n: t for n in feature_names if (t := features.features[n].table_name) is not None
        }
        self._combiners = {
            n: c
            for n in self._feature_tables
            if (c := features.features[n].embedding_combiner(keep_sequences)) is not None
        }
        # a dense feature's inputs: its own, and e.g. a numeric's "<name>.missing"
        self._dense_names = [
            output
            for n in feature_names
            if n not in self._feature_tables
            for output in features.features[n].outputs()
        ]
        self._dims = {
            t: dim_override or features.tables[t].dim for t in self._feature_tables.values()
        }
        layouts: dict[int, dict[str, tuple[int, int]]] = {}
        dynamic = {t: d for t, d in self._dims.items() if features.tables[t].dynamic}
        for table, dim in self._dims.items():
            if table in dynamic:
                continue
            layout = layouts.setdefault(dim, {})
            first = sum(rows for _, rows in layout.values())
            layout[table] = (first, features.tables[table].rows)
        self._stacks: dict[int, TableStack] = {}
        with tf.name_scope(self.name), self._placement.creating_tables():
            for dim, layout in layouts.items():
                name = f"embedding/stack_d{dim}"
                variable = self.add_weight(
                    name=name,
                    shape=(sum(rows for _, rows in layout.values()), dim),
                    dtype=tf.float32,
                    trainable=True,
                    initializer=StackInitializer(initializer, seed, layout),
                )
                self._stacks[dim] = TableStack(f"{self.name}/{name}", variable, layout)
            self._dynamic_tables = {
                table: self._tables.dynamic_table(
                    features.tables[table],
                    dim,
                    initializer,
                    derive_seed(seed, table),
                    f"{self.name}_{table}",
                )
                for table, dim in dynamic.items()
            }

    @property
    def sparse_feature_names(self) -> list[str]:
        """Id-valued features, in order: the keys of ``sparse``."""
        return list(self._feature_tables)

    @property
    def dense_feature_names(self) -> list[str]:
        """Dense numeric features, in order: the columns of ``dense``."""
        return list(self._dense_names)

    @property
    def embedding_dims(self) -> dict[str, int]:
        """Output dim D of each id-valued feature."""
        return {n: self._dims[t] for n, t in self._feature_tables.items()}

    @property
    def stacks(self) -> list[TableStack]:
        """The stacked weights, one per embedding dim."""
        return list(self._stacks.values())

    @property
    def tables(self) -> dict[str, StackedTable]:
        """Hashed table name -> its rows inside its stack (readable and assignable)."""
        return {
            table: StackedTable(self._stacks[dim], table)
            for table, dim in self._dims.items()
            if table not in self._dynamic_tables
        }

    @property
    def dynamic_tables(self) -> dict[str, DynamicTable]:
        """Dynamic table name -> the table (``kind: dynamic``)."""
        return dict(self._dynamic_tables)

    @property
    def dynamic_tables_group(self) -> ShardGroup | None:
        """The shard group every dynamic table of this layer shares (None without one)."""
        return next(iter(self._dynamic_tables.values())).group if self._dynamic_tables else None

    def call(
        self, features: dict[str, Any], training: bool | None = None
    ) -> tuple[dict[str, tf.Tensor], tf.Tensor | None]:
        return self.lookup(features, bool(training))

    def lookup(
        self,
        features: dict[str, Any],
        training: bool = False,
        resolved: "tuple[DynamicPlan, list[tf.Tensor]] | None" = None,
    ) -> tuple[dict[str, tf.Tensor], tf.Tensor | None]:
        """The layer's output for ``features`` (see the class docstring).

        Args:
          resolved: This layer's :meth:`dynamic_plan` of ``features`` and its dynamic
            tables' vectors, when the caller resolved them with other layers' tables
            (:class:`~recsys_dist.models.collection.EmbeddingCollection`); default:
            resolved here.
        """
        missing = [n for n in (*self._feature_tables, *self._dense_names) if n not in features]
        if missing:
            raise KeyError(f"the batch has no feature(s) {missing}; it has {sorted(features)}")
        sparse = {}
        for stack in self._stacks.values():
            names = [n for n, t in self._feature_tables.items() if t in stack.layout]
            offsets = [stack.layout[self._feature_tables[n]][0] for n in names]
            sparse.update(
                self._gather(
                    features,
                    names,
                    offsets,
                    lambda ids, stack=stack: _lookup(
                        self._placement.local_copy(stack.variable), ids
                    ),
                )
            )
        if self._dynamic_tables:
            sparse.update(self._dynamic_lookup(features, training, resolved))
        sparse = {name: sparse[name] for name in self._feature_tables}
        dense = None
        if self._dense_names:
            dense = tf.stack([tf.cast(features[n], tf.float32) for n in self._dense_names], axis=1)
        return sparse, dense

    def _dynamic_lookup(
        self, features: dict[str, Any], training: bool, resolved
    ) -> dict[str, tf.Tensor]:
        """``[B, D]`` per feature of a dynamic table: every dynamic table of the layer
        resolved at once (one admission per server) unless ``resolved`` brings them, then
        pooled like the stacks' features."""
        if resolved is not None:
            plan, vectors = resolved
            if len(vectors) != len(plan.tables):
                raise ValueError(
                    f"{self.name}: {len(plan.tables)} dynamic tables, {len(vectors)} vectors"
                )
        else:
            plan = self.dynamic_plan(features)
            vectors = lookup_tables(plan.tables, plan.keys, training)
        out: dict[str, tf.Tensor] = {}
        for t, found in zip(plan.names, vectors):
            out.update(self._finish(plan.names[t], found, *plan.prepared[t][1:]))
        return out

    def dynamic_plan(self, features: dict[str, Any]) -> "DynamicPlan":
        """What resolving this layer's dynamic tables for ``features`` needs."""
        tables = list(self._dynamic_tables)
        names = {t: [n for n, u in self._feature_tables.items() if u == t] for t in tables}
        prepared = {t: self._prepare(features, names[t], [0] * len(names[t])) for t in tables}
        return DynamicPlan(
            [self._dynamic_tables[t] for t in tables],
            [prepared[t][0] for t in tables],
            names,
            prepared,
        )

    def _gather(
        self, features: dict[str, Any], names: list[str], offsets: list[int], lookup
    ) -> dict[str, tf.Tensor]:
        """``[B, D]`` per feature of one table source: the ids of ``names`` (each shifted
        by its offset) read with one ``lookup`` call, multi-valued ones pooled."""
        ids, sizes, pooling = self._prepare(features, names, offsets)
        return self._finish(names, lookup(ids), sizes, pooling)

    def _prepare(self, features: dict[str, Any], names: list[str], offsets: list[int]):
        """``(ids of all names, each one's count, pooling inputs)`` for one lookup."""
        ids, pooling = [], {}
        for name, offset in zip(names, offsets):
            value = features[name]
            if name in self._combiners:
                weights = tf.cast(value["weights"], tf.float32)
                kept_ids, rows, kept_weights = _present(value["ids"], weights)
                pooling[name] = (rows, kept_weights, weights)
                ids.append(kept_ids + offset)
            else:
                ids.append(value + offset)
        return tf.concat(ids, axis=0), [tf.shape(i)[0] for i in ids], pooling

    def _finish(
        self, names: list[str], vectors: tf.Tensor, sizes: list, pooling: dict
    ) -> dict[str, tf.Tensor]:
        """Splits one lookup's vectors back into features, pooling multi-valued ones."""
        split = tf.split(vectors, sizes, num=len(names))
        return {
            name: _pool(vector, *pooling[name], self._combiners[name])
            if name in pooling
            else vector
            for name, vector in zip(names, split)
        }


@dataclasses.dataclass(frozen=True)
class DynamicPlan:
    """One layer's dynamic-table lookups of a batch: each table, its keys (the ids of all
    its features), the features per table and their pooling inputs."""

    tables: list[DynamicTable]
    keys: list[tf.Tensor]
    names: dict[str, list[str]]
    prepared: dict[str, tuple]


def check_feature_names(features: FeatureConfig, feature_names: list[str]) -> None:
    """Raises ValueError unless ``feature_names`` is non-empty, known and without repeats."""
    if not feature_names:
        raise ValueError("a feature group needs at least one feature; got none")
    for name in feature_names:
        if name not in features.features:
            raise ValueError(
                f"unknown feature {name!r}; {features.file} defines "
                + ", ".join(features.features)
                + "."
                + did_you_mean(name, features.features)
            )
    repeated = sorted({n for n in feature_names if feature_names.count(n) > 1})
    if repeated:
        raise ValueError(f"feature(s) {repeated} listed more than once in one group")


class FeatureLinear(tf.keras.layers.Layer):
    """T linear models over a feature group: ``sum_f w_f[id_f] + dense W + b``.

    The per-id weights are a :class:`FeatureEmbeddings` of dim T (``dim_override=T``,
    zeros at the start; built by
    :meth:`~recsys_dist.models.collection.EmbeddingCollection.linear`) whose column t
    belongs to output t, so T independent linear models cost one lookup per feature.
    The dense weights and the bias start at zero too.

    Args:
      embeddings: The per-id weights.
      num_outputs: T.
      name: Layer name.

    Call args:
      sparse, dense: The lookup of ``embeddings`` (its ``(sparse, dense)`` output).

    Returns:
      ``[B, T]`` logits.
    """

    def __init__(
        self, embeddings: FeatureEmbeddings, num_outputs: int, name: str = "linear", **kwargs
    ):
        super().__init__(name=name, **kwargs)
        dims = set(embeddings.embedding_dims.values())
        if dims - {num_outputs}:
            raise ValueError(
                f"{name}: per-id weights of dim {sorted(dims)} for {num_outputs} output(s)"
            )
        self.embeddings = embeddings
        self.dense = None
        if self.embeddings.dense_feature_names:
            self.dense = tf.keras.layers.Dense(
                num_outputs, use_bias=False, kernel_initializer="zeros", name="dense"
            )
        with tf.name_scope(self.name):
            self.bias = self.add_weight(
                name="bias",
                shape=(num_outputs,),
                dtype=tf.float32,
                initializer="zeros",
                trainable=True,
            )

    def call(self, sparse: dict[str, tf.Tensor], dense: tf.Tensor | None = None) -> tf.Tensor:
        terms = list(sparse.values())
        if self.dense is not None:
            terms.append(self.dense(dense))
        return tf.add_n(terms) + self.bias


def example_features(
    features: FeatureConfig, feature_names: list[str], batch_size: int = 1
) -> dict[str, Any]:
    """A batch of zeros shaped like the input pipeline's output for ``feature_names``.

    Calling a model on it creates every variable, e.g. under ``strategy.scope()``.
    """
    batch: dict[str, Any] = {}
    for name in feature_names:
        batch.update(features.features[name].example_input(batch_size))
    return batch
