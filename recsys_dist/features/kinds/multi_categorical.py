"""``kind: multi_categorical``: several ids per row, pooled into one embedding.

Model input: ``{"ids": int64 [N, L], "weights": float32 [N, L]}``, L = ``max_length``:
each row's first ``max_length`` kept ids from the left, padded with weight 0. A null list
(or null string) is empty; a null id (or an id whose weight is null) is dropped. Integer
ids of a list column hash as a categorical feature's integer ids do (splitmix64); string
ids, and the tokens of a delimited string, with Fingerprint64.

The transform works on flat values with their row ids (a few ops per feature, whatever
the list lengths), or in one ``ListIds`` / ``DelimitedIds`` op with the fused kernels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import field
from typing import Any, Literal

from recsys_dist import hashing
from recsys_dist.features.kinds.base import ColumnRead, FeatureKind, register_kind
from recsys_dist.features.kinds.context import FeatureSet, IdScan, TransformContext
from recsys_dist.features.kinds.padding import padded, padded_zeros
from recsys_dist.features.kinds.vocabulary import Vocabulary, check_vocabulary, vocabulary_rows
from recsys_dist.features.tables import TableSpec
from recsys_dist.lazy import numpy as np
from recsys_dist.lazy import tensorflow as tf
from recsys_dist.yaml_loader import LocatedYaml

_NUMBER_RE = r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?"


@register_kind("multi_categorical")
@dataclasses.dataclass(frozen=True)
class MultiCategoricalFeature(FeatureKind):
    """Several ids per row: a Parquet list column (``list<int64>`` or ``list<string>``)
    or a delimited string column, e.g. ``"12|907|33"``.

    A null list (or null string) is an empty list; null ids inside a list are dropped.
    Integer ids of a list column hash as a categorical feature's integer ids do
    (splitmix64); string ids, and the tokens of a delimited string, with Fingerprint64.

    Attributes:
      table: Embedding table the ids index.
      max_length: Ids kept per row (the first ones); the rest are dropped.
      separator: Separator between ids (delimited string columns).
      combiner: How a row's embeddings are pooled: ``sum``, ``mean`` or ``sqrtn``.
      weighted: Entries of a delimited string are ``id:weight``; the weight scales the
        embedding.
      weight_separator: Separator between id and weight when ``weighted``.
      weights_column: A ``list<float>`` column parallel to a list column of ids: one
        weight per id (an id whose weight is null is dropped).
    """

    name: str
    table: str
    max_length: int = field(metadata={"min": 1})
    kind: Literal["multi_categorical"] = "multi_categorical"
    column: str | None = None
    separator: str = "|"
    combiner: Literal["sum", "mean", "sqrtn"] = "mean"
    weighted: bool = False
    weight_separator: str = ":"
    weights_column: str | None = None
    hash_buckets: int | None = field(default=None, metadata={"min": 1})
    vocabulary: str | None = None
    oov_buckets: int = field(default=1, metadata={"min": 1})

    multi_valued = True

    # ---- the config -----------------------------------------------------------------
    def check_references(
        self,
        doc: LocatedYaml,
        path: str,
        tables: Mapping[str, TableSpec],
        features: Mapping[str, FeatureKind],
    ) -> list | None:
        vocabulary = check_vocabulary(doc, path, self, "string")
        if self.weights_column is not None:
            if self.weighted:
                raise doc.error(
                    path + ".weights_column",
                    "set either 'weighted' (id:weight "
                    "entries in a delimited string) or 'weights_column' (a "
                    "parallel list<float> column), not both",
                )
            if self.weights_column == (self.column or self.name):
                raise doc.error(
                    path + ".weights_column",
                    "names the ids column itself; expected a separate list<float> column",
                )
        return vocabulary

    def id_rows(self, config: FeatureSet) -> int:
        """The hash space, or the vocabulary + oov rows."""
        if self.name in config.vocabularies:
            return vocabulary_rows(config.vocabularies, self)
        return super().id_rows(config)

    def column_reads(self, config: FeatureSet) -> list[ColumnRead]:
        reads = [ColumnRead(config.column_of(self), "ids", f"feature {self.name!r}")]
        if self.weights_column is not None:
            reads.append(
                ColumnRead(
                    self.weights_column, "weights", f"feature {self.name!r} (weights_column)"
                )
            )
        return reads

    # ---- the model input ------------------------------------------------------------
    def embedding_combiner(self, keep_sequences: bool) -> str | None:
        return self.combiner

    def example_input(self, batch_size: int) -> dict[str, Any]:
        return {self.name: padded_zeros(batch_size, self.max_length)}

    def prepare(self, config: FeatureSet) -> Vocabulary | None:
        if self.name not in config.vocabularies:
            return None
        return Vocabulary.build(config.vocabularies[self.name], self.oov_buckets, strings=True)

    @classmethod
    def transform_all(
        cls, features: list[MultiCategoricalFeature], context: TransformContext
    ) -> dict[str, dict[str, tf.Tensor]]:
        out = {}
        for feature in features:
            column, wcol = context.config.column_of(feature), feature.weights_column
            out[feature.name], bad = feature._padded(
                context,
                context.raw[column],
                context.present.get(column),
                context.raw.get(wcol) if wcol else None,
                context.present.get(wcol) if wcol else None,
            )
            if feature.weighted:
                context.checks.append(
                    (
                        bad,
                        f"column {column!r} (feature {feature.name!r}) "
                        "has an entry whose weight after "
                        f"{feature.weight_separator!r} is not a number",
                    )
                )
            elif wcol:
                context.checks.append(
                    (
                        bad,
                        f"list column {column!r} (feature "
                        f"{feature.name!r}) and its weights_column {wcol!r} "
                        "differ in length",
                    )
                )
        return out

    def _padded(
        self,
        context: TransformContext,
        raw: tf.Tensor | tf.RaggedTensor,
        present=None,
        weights=None,
        weights_present=None,
    ) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
        """Ids and weights, ``[N, max_length]`` each, and the bad rows.

        Hashes every flat value, then sums each kept value into its slot of the padded
        result (nulls and empty tokens are dropped, each row keeps its first
        ``max_length``)."""
        vocabulary = context.prepared.get(self.name)
        if (
            context.ops is not None
            and vocabulary is None
            and not (isinstance(raw, tf.RaggedTensor) and self.weighted)
        ):
            return self._padded_fused(context, raw, present, weights, weights_present)
        if isinstance(raw, tf.RaggedTensor):
            nrows, rowids, splits = raw.nrows(), raw.value_rowids(), raw.row_splits
            tokens = raw.flat_values
            keep, bad_rows, weight_values = _list_weights(raw, present, weights, weights_present)
        else:  # a delimited string; a null string reads as "" (no ids)
            split = tf.strings.split(raw, self.separator)
            nrows, rowids, splits = (
                tf.shape(raw, tf.int64)[0],
                split.value_rowids(),
                split.row_splits,
            )
            tokens = split.flat_values
            keep = tf.strings.length(tokens) > 0
            bad_rows = tf.zeros(tf.shape(raw), tf.bool)
            weight_values = None
        if tokens.dtype != tf.string and vocabulary is not None:
            tokens = tf.strings.as_string(tokens)  # vocabulary files hold text
        if self.weighted:
            pairs = tf.strings.split(tokens, self.weight_separator, maxsplit=1)
            pairs = pairs.to_tensor(default_value="", shape=[None, 2])
            tokens, weight_text = pairs[:, 0], pairs[:, 1]
            unparsable = tf.logical_not(tf.strings.regex_full_match(weight_text, _NUMBER_RE))
            weight_values = tf.strings.to_number(tf.where(unparsable, "0", weight_text), tf.float32)
            weight_values = tf.where(unparsable, 0.0, weight_values)
            # (an empty token, which is dropped anyway, is no bad entry)
            bad_token = unparsable if keep is None else tf.logical_and(unparsable, keep)
            bad_rows = (
                tf.math.unsorted_segment_max(
                    tf.cast(bad_token, tf.int32), rowids, tf.cast(nrows, tf.int64)
                )
                > 0
            )
        elif weight_values is None:
            weight_values = tf.ones(tf.shape(tokens), tf.float32)
        ids = self._token_rows(tokens, vocabulary, context.config.rows_of(self))
        return padded(ids, weight_values, nrows, rowids, splits, keep, self.max_length), bad_rows

    @staticmethod
    def _token_rows(tokens: tf.Tensor, vocabulary: Vocabulary | None, rows: int) -> tf.Tensor:
        """The table row of each id (1-D): its vocabulary position, or its hash."""
        if vocabulary is not None:
            if tokens.dtype != tf.string:
                tokens = tf.strings.as_string(tokens)  # vocabulary files hold text
            return vocabulary.lookup(tokens)
        if tokens.dtype == tf.string:
            return tf.strings.to_hash_bucket_fast(tokens, rows)
        # integer ids hash as a categorical feature's integer ids do
        return hashing.to_bucket(hashing.hash_int64(tokens), rows)

    def _padded_fused(
        self, context: TransformContext, raw, present, weights, weights_present
    ) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
        """:meth:`_padded` in one op (``ListIds`` or ``DelimitedIds``)."""
        rows = context.config.rows_of(self)
        if isinstance(raw, tf.RaggedTensor):
            values = raw.flat_values
            if values.dtype != tf.string:
                values = tf.cast(values, tf.int64)
            if weights is not None:
                weights = tf.RaggedTensor.from_row_splits(
                    tf.cast(weights.flat_values, tf.float32), weights.row_splits, validate=False
                )
            ids, weight_values, bad = context.ops.list_ids(
                values,
                raw.row_splits,
                present.flat_values if present is not None else None,
                weights,
                weights_present.flat_values if weights_present is not None else None,
                rows,
                self.max_length,
            )
        else:
            ids, weight_values, bad = context.ops.delimited_ids(
                raw,
                self.separator,
                self.weight_separator if self.weighted else None,
                rows,
                self.max_length,
            )
        return {"ids": ids, "weights": weight_values}, bad

    # ---- validate --scan ------------------------------------------------------------
    def scan_columns(self, config: FeatureSet) -> list[str]:
        return [config.column_of(self)]

    def scan_ids(self, scan: IdScan) -> tuple[np.ndarray, np.ndarray]:
        """Each kept id of a row is one lookup; its row is the row the transform gives it
        (weights play no part in which row an id reads)."""
        tokens = scan.tokens(
            scan.config.column_of(self),
            self.separator,
            self.max_length,
            weight_separator=self.weight_separator if self.weighted else None,
        )
        rows = self._token_rows(tokens, scan.prepared(self.name), scan.config.rows_of(self))
        return scan.identity(tokens), rows.numpy()


def _list_weights(raw: tf.RaggedTensor, present, weights, weights_present):
    """``(keep, bad rows, weight per value)`` of a list column's flat values.

    ``keep`` (None: keep all) drops nulls and, with a weights column, the values of rows
    whose weights list is not as long as their ids list (bad rows: the two lists are only
    aligned when their lengths agree) and values whose weight is null."""
    rowids, splits, tokens = raw.value_rowids(), raw.row_splits, raw.flat_values
    keep = present.flat_values if present is not None else None
    if weights is None:
        return keep, tf.zeros([raw.nrows()], tf.bool), None
    bad_rows = tf.not_equal(raw.row_lengths(), weights.row_lengths())
    row_ok = tf.gather(tf.logical_not(bad_rows), rowids)
    keep = row_ok if keep is None else tf.logical_and(keep, row_ok)
    # Where lengths agree, element k of the ids is element k of the weights.
    position = tf.range(tf.size(tokens, tf.int64)) - tf.gather(splits, rowids)
    # (one padding weight past the end, for rows whose lengths disagree)
    size = tf.size(weights.flat_values, tf.int64)
    at = tf.minimum(tf.gather(weights.row_splits, rowids) + position, size)
    weight_values = tf.gather(tf.concat([tf.cast(weights.flat_values, tf.float32), [0.0]], 0), at)
    if weights_present is not None:
        keep = tf.logical_and(
            keep, tf.gather(tf.concat([weights_present.flat_values, [False]], 0), at)
        )
    return keep, bad_rows, weight_values
