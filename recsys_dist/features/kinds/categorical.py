"""``kind: categorical``: one id per row, looked up in an embedding table.

Model input: int64 ``[N]`` table rows. An integer id hashes with splitmix64
(:func:`recsys_dist.hashing.hash_int64`), a string with Fingerprint64, into
``rows - 1`` buckets; a null reads the last row (the missing row), which no real id
hashes to. With a vocabulary, an id reads its position in the file, an unknown one an
oov bucket after it, a null the row after those.

Every integer categorical without a vocabulary is hashed in one stacked ``[K, N]`` pass
(one ``HashIntIds`` op with the fused kernels), whose hashes crosses reuse.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import field
from typing import Literal

from recsys_dist import hashing
from recsys_dist.features.kinds.base import ColumnRead, FeatureKind, register_kind
from recsys_dist.features.kinds.context import FeatureSet, IdScan, TransformContext
from recsys_dist.features.kinds.vocabulary import Vocabulary, check_vocabulary, vocabulary_rows
from recsys_dist.features.tables import TableSpec
from recsys_dist.lazy import numpy as np
from recsys_dist.lazy import tensorflow as tf
from recsys_dist.yaml_loader import LocatedYaml

IdDtype = Literal["int64", "string"]


@register_kind("categorical")
@dataclasses.dataclass(frozen=True)
class CategoricalFeature(FeatureKind):
    """A single id per row, int64 or string, looked up in an embedding table.

    Attributes:
      name: Feature name (the mapping key).
      table: Embedding table the ids index.
      dtype: ``int64`` for integer ids, ``string`` for string ids.
      column: Parquet column; defaults to ``name``.
      hash_buckets: Hash into this many rows; defaults to the table's ``rows``. The
        last of them is the missing row: a null id reads it, and no real id hashes to
        it.
      vocabulary: Text file with one id per line (relative to the feature config).
      oov_buckets: Rows for ids missing from ``vocabulary``; a null id reads one more
        row after them.
    """

    name: str
    table: str
    dtype: IdDtype
    kind: Literal["categorical"] = "categorical"
    column: str | None = None
    hash_buckets: int | None = field(default=None, metadata={"min": 1})
    vocabulary: str | None = None
    oov_buckets: int = field(default=1, metadata={"min": 1})

    # ---- the config -----------------------------------------------------------------
    def check_references(
        self,
        doc: LocatedYaml,
        path: str,
        tables: Mapping[str, TableSpec],
        features: Mapping[str, FeatureKind],
    ) -> list | None:
        return check_vocabulary(doc, path, self, self.dtype)

    def id_rows(self, config: FeatureSet) -> int:
        """The hash space, or the vocabulary + oov rows + the missing row."""
        if self.name in config.vocabularies:
            return vocabulary_rows(config.vocabularies, self) + 1
        return super().id_rows(config)

    def column_reads(self, config: FeatureSet) -> list[ColumnRead]:
        need = "integer id" if self.dtype == "int64" else "string"
        return [ColumnRead(config.column_of(self), need, f"feature {self.name!r}")]

    # ---- the transform --------------------------------------------------------------
    def hashes_ints(self, config: FeatureSet) -> bool:
        """Its ids are integers hashed without a vocabulary (stacked with the others)."""
        return self.dtype != "string" and self.name not in config.vocabularies

    def int_hash_columns(self, config: FeatureSet) -> list[str]:
        return [config.column_of(self)] if self.hashes_ints(config) else []

    def prepare(self, config: FeatureSet) -> Vocabulary | None:
        if self.name not in config.vocabularies:
            return None
        return Vocabulary.build(
            config.vocabularies[self.name], self.oov_buckets, strings=self.dtype == "string"
        )

    @classmethod
    def transform_all(
        cls, features: list[CategoricalFeature], context: TransformContext
    ) -> dict[str, tf.Tensor]:
        hashed = [f for f in features if f.hashes_ints(context.config)]
        out = _hashed_int_ids(hashed, context) if hashed else {}
        for feature in features:
            if feature.name not in out:
                out[feature.name] = feature._ids(context)
        return out

    def _ids(self, context: TransformContext) -> tf.Tensor:
        """Table rows of a string feature, or of one with a vocabulary."""
        column = context.config.column_of(self)
        raw, present = context.raw[column], context.present.get(column)
        missing_row = context.config.rows_of(self) - 1
        if self.name in context.prepared:
            ids = context.prepared[self.name].lookup(raw)
        else:
            buckets = max(missing_row, 1)
            if self.dtype == "string":
                ids = tf.strings.to_hash_bucket_fast(raw, buckets)
            else:
                ids = hashing.to_bucket(hashing.hash_int64(raw), buckets)
        return (
            ids if present is None else tf.where(present, ids, tf.constant(missing_row, tf.int64))
        )

    # ---- validate --scan ------------------------------------------------------------
    def scan_columns(self, config: FeatureSet) -> list[str]:
        return [config.column_of(self)]

    def scan_ids(self, scan: IdScan) -> tuple[np.ndarray, np.ndarray]:
        values, present = scan.column(scan.config.column_of(self))
        return scan.identity(values)[present], scan.rows(self.name)[present]


def _hashed_int_ids(
    features: list[CategoricalFeature], context: TransformContext
) -> dict[str, tf.Tensor]:
    """Table rows of integer categoricals without a vocabulary, ``[K, N]`` at once:
    ``hash_int64(id) % (rows - 1)``, and the missing row (``rows - 1``) for a null."""
    config, int_hashes, present = context.config, context.int_hashes, context.present
    columns = [config.column_of(f) for f in features]
    missing_rows = np.array([config.rows_of(f) - 1 for f in features], np.int64)
    buckets = np.maximum(missing_rows, 1).astype(np.uint64)
    if context.ops is not None:
        values = tf.stack([tf.cast(int_hashes.raw[c], tf.int64) for c in columns])
        present_ = (
            context.stacked_presence(columns, values)
            if any(c in present for c in columns)
            else None
        )
        ids, hashes = context.ops.hash_int_ids(
            values, present_, buckets.tolist(), missing_rows.tolist()
        )
        int_hashes.provide(columns, hashes)
        return dict(zip((f.name for f in features), tf.unstack(ids, num=len(features))))
    ids = tf.cast(
        tf.math.floormod(int_hashes.stacked(columns), tf.constant(buckets[:, None])), tf.int64
    )
    if any(c in present for c in columns):
        ids = tf.where(
            context.stacked_presence(columns, ids), ids, tf.constant(missing_rows[:, None])
        )
    return dict(zip((f.name for f in features), tf.unstack(ids, num=len(features))))
