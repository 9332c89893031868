"""Embedding lookups for a group of features, with tables ready for parameter servers.

Shape letters: B batch size, L ids per row of a multi_categorical feature (its
``max_length``), D a table's embedding dim, T number of outputs (labels).

A batch (see :mod:`recsys_dist.features.transforms`) holds, per feature:

- categorical, cross, numeric with ``transform: bucketize``: int64 ``[B]`` table rows.
- other numeric: float32 ``[B]``.
- multi_categorical: ``{"ids": int64 [B, L], "weights": float32 [B, L]}``, weight 0
  marking padding.

Tables on parameter servers: every table is created with ``add_weight`` when the layer
is constructed, so constructing the model under ``ParameterServerStrategy.scope()``
with a ``variable_partitioner`` turns each table into a ``ShardedVariable`` split by
rows. Rows are then only read with ``tf.nn.embedding_lookup`` over the shards, which
sends each id to the shard holding it; a table is never read whole.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from recsys_dist.config.features import FeatureConfig, MultiCategoricalFeature, NumericFeature
from recsys_dist.config.schema import did_you_mean
from recsys_dist.models.blocks import InitializerLike, derive_seed, seeded_initializer
from recsys_dist.models.sharding import embedding_tables


def table_of(feature: Any) -> str | None:
    """Returns the table an id-valued feature reads, or None for a dense numeric feature."""
    if isinstance(feature, NumericFeature):
        return feature.table if feature.transform == "bucketize" else None
    return feature.table


def _shards(table: tf.Variable) -> tf.Variable | list[tf.Variable]:
    """A ShardedVariable's shards (so lookups never concatenate the table), else the table.

    ``tf.nn.embedding_lookup`` over a list of shards uses the ``div`` layout that
    ``ParameterServerStrategy`` partitions with: shard i holds a contiguous block of rows.
    """
    if isinstance(table, tf.__internal__.distribute.ShardedVariable):
        return table.variables
    return table


def _lookup(table: tf.Variable, ids: tf.Tensor) -> tf.Tensor:
    """Rows ``[N, D]`` of ``table`` for 1-D ``ids`` ``[N]``; each distinct id is read once."""
    unique_ids, index = tf.unique(ids)
    return tf.gather(tf.nn.embedding_lookup(_shards(table), unique_ids), index)


def _pool(table: tf.Variable, ids: tf.Tensor, weights: tf.Tensor, combiner: str
          ) -> tf.Tensor:
    """Pools ``[B, L]`` ids with ``[B, L]`` weights into ``[B, D]``; padding is not read.

    ``sum``: sum_l w e; ``mean``: sum_l w e / sum_l w; ``sqrtn``: sum_l w e / sqrt(sum_l w^2);
    a row whose divisor is 0 pools to zeros.
    """
    present = tf.not_equal(weights, 0.0)
    rows = tf.where(present)[:, 0]
    kept_weights = tf.boolean_mask(weights, present)
    vectors = _lookup(table, tf.boolean_mask(ids, present)) * kept_weights[:, None]
    total = tf.math.unsorted_segment_sum(vectors, rows, num_segments=tf.shape(ids)[0])
    if combiner == "sum":
        return total
    if combiner == "mean":
        divisor = tf.reduce_sum(weights, axis=1)
    else:
        divisor = tf.sqrt(tf.reduce_sum(tf.square(weights), axis=1))
    return tf.math.divide_no_nan(total, divisor[:, None])


class FeatureEmbeddings(tf.keras.layers.Layer):
    """Pooled embeddings of a group's id-valued features, plus its dense numerics.

    One weight ``embedding/<table>`` of shape ``[rows, D]`` is created per table the
    features use; features naming the same table share it.

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
      name: Layer name; prefixes the variable names.

    Call args:
      features: A batch as produced by the input pipeline (extra keys are ignored).

    Returns:
      ``(sparse, dense)``: ``sparse`` maps each id-valued feature (in
      ``feature_names`` order) to ``[B, D]``; ``dense`` is ``[B, n_dense]`` stacking the
      non-bucketized numeric features in order, or None when there are none.

    Raises:
      ValueError: An unknown, repeated or missing feature name, or a bad ``dim_override``.

    Example:
      >>> layer = FeatureEmbeddings(cfg, ["ad_id", "tags", "price"], seed=0)
      >>> sparse, dense = layer(batch)
      >>> sparse["tags"].shape, dense.shape
      (TensorShape([32, 16]), TensorShape([32, 1]))
    """

    def __init__(self, features: FeatureConfig, feature_names: list[str],
                 dim_override: int | None = None,
                 initializer: InitializerLike = "random_uniform",
                 seed: int | None = None, name: str = "feature_embeddings", **kwargs: Any):
        super().__init__(name=name, **kwargs)
        feature_names = list(feature_names)
        check_feature_names(features, feature_names)
        if dim_override is not None and (not isinstance(dim_override, int) or dim_override < 1):
            raise ValueError(f"dim_override must be None or a positive integer. "
                             f"Received: dim_override={dim_override}")
        self._feature_tables = {n: t for n in feature_names
                                if (t := table_of(features.features[n])) is not None}
        self._combiners = {n: features.features[n].combiner for n in self._feature_tables
                           if isinstance(features.features[n], MultiCategoricalFeature)}
        self._dense_names = [n for n in feature_names if n not in self._feature_tables]
        self._dims = {t: dim_override or features.tables[t].dim
                      for t in self._feature_tables.values()}
        self._tables: dict[str, tf.Variable] = {}
        with tf.name_scope(self.name), embedding_tables():
            for table, dim in self._dims.items():
                self._tables[table] = self.add_weight(
                    name=f"embedding/{table}", shape=(features.tables[table].rows, dim),
                    dtype=tf.float32, trainable=True,
                    initializer=seeded_initializer(initializer, derive_seed(seed, table)))

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
    def feature_tables(self) -> dict[str, str]:
        """Table each id-valued feature reads."""
        return dict(self._feature_tables)

    @property
    def tables(self) -> dict[str, tf.Variable]:
        """Table name -> its weight (a ``ShardedVariable`` when partitioned)."""
        return dict(self._tables)

    def call(self, features: dict[str, Any]) -> tuple[dict[str, tf.Tensor], tf.Tensor | None]:
        missing = [n for n in (*self._feature_tables, *self._dense_names) if n not in features]
        if missing:
            raise KeyError(f"the batch has no feature(s) {missing}; it has {sorted(features)}")
        sparse = {}
        for name, table in self._feature_tables.items():
            value = features[name]
            if name in self._combiners:
                sparse[name] = _pool(self._tables[table], value["ids"],
                                     tf.cast(value["weights"], tf.float32),
                                     self._combiners[name])
            else:
                sparse[name] = _lookup(self._tables[table], value)
        dense = None
        if self._dense_names:
            dense = tf.stack([tf.cast(features[n], tf.float32) for n in self._dense_names],
                             axis=1)
        return sparse, dense


def check_feature_names(features: FeatureConfig, feature_names: list[str]) -> None:
    """Raises ValueError unless ``feature_names`` is non-empty, known and without repeats."""
    if not feature_names:
        raise ValueError("a feature group needs at least one feature; got none")
    for name in feature_names:
        if name not in features.features:
            raise ValueError(f"unknown feature {name!r}; {features.file} defines "
                             + ", ".join(features.features) + "."
                             + did_you_mean(name, features.features))
    repeated = sorted({n for n in feature_names if feature_names.count(n) > 1})
    if repeated:
        raise ValueError(f"feature(s) {repeated} listed more than once in one group")


class FeatureLinear(tf.keras.layers.Layer):
    """T linear models over a feature group: ``sum_f w_f[id_f] + dense W + b``.

    Every table gets a ``[rows, T]`` per-id weight (a :class:`FeatureEmbeddings` with
    ``dim_override=T``) whose column t belongs to output t, so T independent linear models
    cost one lookup per feature. All weights start at zero.

    Args:
      features: The feature config.
      feature_names: Features of the linear model.
      num_outputs: T.
      name: Layer name.

    Call args:
      features: A batch as produced by the input pipeline.

    Returns:
      ``[B, T]`` logits.
    """

    def __init__(self, features: FeatureConfig, feature_names: list[str], num_outputs: int,
                 name: str = "linear", **kwargs: Any):
        super().__init__(name=name, **kwargs)
        self.embeddings = FeatureEmbeddings(features, feature_names, dim_override=num_outputs,
                                            initializer="zeros", name=f"{name}_embeddings")
        self.dense = None
        if self.embeddings.dense_feature_names:
            self.dense = tf.keras.layers.Dense(num_outputs, use_bias=False,
                                               kernel_initializer="zeros", name="dense")
        with tf.name_scope(self.name):
            self.bias = self.add_weight(name="bias", shape=(num_outputs,), dtype=tf.float32,
                                        initializer="zeros", trainable=True)

    def call(self, features: dict[str, Any]) -> tf.Tensor:
        sparse, dense = self.embeddings(features)
        terms = list(sparse.values())
        if self.dense is not None:
            terms.append(self.dense(dense))
        return tf.add_n(terms) + self.bias


def example_features(features: FeatureConfig, feature_names: list[str],
                     batch_size: int = 1) -> dict[str, Any]:
    """A batch of zeros shaped like the input pipeline's output for ``feature_names``.

    Calling a model on it creates every variable, e.g. under ``strategy.scope()``.
    """
    batch: dict[str, Any] = {}
    for name in feature_names:
        feature = features.features[name]
        if isinstance(feature, MultiCategoricalFeature):
            shape = [batch_size, feature.max_length]
            batch[name] = {"ids": tf.zeros(shape, tf.int64), "weights": tf.zeros(shape)}
        elif table_of(feature) is None:
            batch[name] = tf.zeros([batch_size], tf.float32)
        else:
            batch[name] = tf.zeros([batch_size], tf.int64)
    return batch
