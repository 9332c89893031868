"""Feature transforms: raw Parquet columns -> model inputs, labels and row validity.

Everything here is TensorFlow ops, vectorised over a chunk of N rows, so the same
code runs inside the workers' ``tf.data`` pipeline and inside an exported SavedModel.
No Python runs per row or per batch. The input pipeline runs it with fused kernels
(:meth:`FeatureTransform.with_fused_kernels`: hashed integer ids, bucketizing and
multi-valued features each in one op of :mod:`recsys_dist.ops`, the same values bit for
bit); an export keeps the stock ops, so serving needs no custom op.

Inputs: each column as read (:mod:`recsys_dist.ops`): a ``[N]`` tensor, or a
``[N, None]`` ragged tensor for a list column, and optionally its validity (false for
a null; for a list column, per element). Nulls follow each feature's policy:

- categorical: the feature's missing row (the last row of its id space), which no
  real id hashes to; a cross with a missing input reads the cross's missing row.
- numeric: ``fill_value`` (and ``<name>.missing`` = 1 with ``missing_indicator``).
- multi_categorical: a null list is empty; a null id (or its null weight) is dropped.
- label: bad data (``on_bad_row``).

Outputs for a chunk of N rows (B in a batch):

- categorical, cross, bucketized numeric: int64 ``[N]`` table rows.
- numeric: float32 ``[N]``; with ``missing_indicator`` also ``<name>.missing``
  float32 ``[N]`` in {0, 1}.
- multi_categorical: ``{"ids": int64 [N, L], "weights": float32 [N, L]}``, padded
  with weight 0 past each row's ids (L = ``max_length``).
- labels: float32 ``[N]`` in {0, 1}.
- valid: float32 ``[N]``: 1 for a good row, 0 for a row skipped under
  ``on_bad_row: skip`` (its values are replaced by safe ones so they cannot poison a
  step; train with it as the example weight).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Literal

import numpy as np
import tensorflow as tf

from recsys_dist import ops
from recsys_dist.config.features import (CategoricalFeature, CrossFeature, FeatureConfig,
                                         MultiCategoricalFeature, NumericFeature,
                                         SequenceFeature)
from recsys_dist.features import hashing, sequences

_NUMBER_RE = r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?"


@dataclasses.dataclass(frozen=True)
class _Vocabulary:
    """A vocabulary as sorted int64 keys (ids, or fingerprints of strings) + positions."""

    keys: np.ndarray
    positions: np.ndarray
    oov_buckets: int
    strings: bool

    @classmethod
    def build(cls, entries: list, oov_buckets: int, strings: bool) -> "_Vocabulary":
        if strings:
            keys = tf.strings.to_hash_bucket_fast(tf.constant(entries, tf.string),
                                                  2**63 - 1).numpy()
            if len(np.unique(keys)) != len(keys):
                raise ValueError("two vocabulary strings share a 63-bit fingerprint")
        else:
            keys = np.asarray(entries, np.int64)
        order = np.argsort(keys, kind="stable")
        return cls(keys[order], order.astype(np.int64), oov_buckets, strings)

    def lookup(self, values: tf.Tensor) -> tf.Tensor:
        """Rows for ``values`` (1-D): position in the file, or size + hash % oov_buckets."""
        if self.strings:
            hashed = hashing.hash_string(values)
            keys_in = tf.bitcast(hashed, tf.int64)
        else:
            keys_in = tf.cast(values, tf.int64)
            hashed = hashing.hash_int64(keys_in)
        keys = tf.constant(self.keys)
        index = tf.minimum(tf.searchsorted(keys, keys_in), len(self.keys) - 1)
        found = tf.equal(tf.gather(keys, index), keys_in)
        oov = len(self.keys) + hashing.to_bucket(hashed, self.oov_buckets)
        return tf.where(found, tf.gather(tf.constant(self.positions), index), oov)


def missing_indicator_name(feature: str) -> str:
    """The dense input that flags a numeric feature's missing values."""
    return f"{feature}.missing"


class FeatureTransform:
    """Builds model inputs from the raw columns of one chunk of rows.

    Args:
      features: The feature config.
      labels: Label names to produce.
      column_dtypes: TensorFlow dtype name each column is read as (from the schema check).
      on_bad_row: ``fail`` raises on a bad value naming the column and file;
        ``skip`` marks the row invalid and counts it.
      feature_names: Features to produce (default: all).
      fused: Use the fused kernels of :mod:`recsys_dist.ops` where they apply (same
        values; the op library must be loaded where the graph runs).

    Example:
      >>> transform = FeatureTransform(cfg, ["click"], {"C1": "int64", "click": "int64"}, "fail")
      >>> features, labels, valid = transform(raw_columns, source=tf.constant("f.parquet"),
      ...                                     first_row=tf.constant(0, tf.int64))
    """

    def __init__(self, features: FeatureConfig, labels: list[str],
                 column_dtypes: dict[str, str], on_bad_row: Literal["fail", "skip"],
                 feature_names: list[str] | None = None, fused: bool = False):
        self.config = features
        self.fused = fused
        self.labels = list(labels)
        self.feature_names = list(feature_names or features.features)
        self.on_bad_row = on_bad_row
        self.column_dtypes = dict(column_dtypes)
        self._vocab = {
            name: _Vocabulary.build(entries, features.features[name].oov_buckets,
                                    strings=getattr(features.features[name], "dtype",
                                                    "string") == "string")
            for name, entries in features.vocabularies.items() if name in self.feature_names}
        needed = self._needed_features()
        self.columns = list(dict.fromkeys(
            [features.column_of(features.features[n]) for n in needed
             if not isinstance(features.features[n], CrossFeature)]
            + [features.features[n].weights_column for n in needed
               if getattr(features.features[n], "weights_column", None)]
            + [features.column_of(features.labels[n]) for n in self.labels]))
        missing = [c for c in self.columns if c not in self.column_dtypes]
        if missing:
            raise ValueError(f"no read dtype for column(s) {missing}")

    def with_fused_kernels(self) -> "FeatureTransform":
        """The same transform on the fused kernels (for the workers' input pipeline)."""
        fused = copy.copy(self)
        fused.fused = True
        return fused

    def _needed_features(self) -> list[str]:
        names = list(self.feature_names)
        for name in self.feature_names:
            feat = self.config.features[name]
            if isinstance(feat, CrossFeature):
                names.extend(i for i in feat.inputs if i not in names)
            if isinstance(feat, SequenceFeature) and feat.side_of and feat.side_of not in names:
                names.append(feat.side_of)
        return names

    # ---- per kind -------------------------------------------------------------------
    def _categorical(self, feat: CategoricalFeature, raw: tf.Tensor,
                     present: tf.Tensor | None) -> tf.Tensor:
        missing_row = self.config.rows_of(feat) - 1
        if feat.name in self._vocab:
            ids = self._vocab[feat.name].lookup(raw)
        else:
            buckets = max(missing_row, 1)
            if feat.dtype == "string":
                ids = tf.strings.to_hash_bucket_fast(raw, buckets)
            else:
                ids = hashing.to_bucket(hashing.hash_int64(raw), buckets)
        return ids if present is None else tf.where(present, ids, tf.constant(missing_row,
                                                                              tf.int64))

    def _cross(self, feat: CrossFeature, raws: dict[str, tf.Tensor],
               presents: dict[str, tf.Tensor], int_hashes: "_IntHashes") -> tf.Tensor:
        hashed, present = None, None
        for name in feat.inputs:
            part = self.config.features[name]
            column = self.config.column_of(part)
            h = (hashing.hash_string(raws[column]) if part.dtype == "string"
                 else int_hashes[column])
            hashed = h if hashed is None else hashing.combine(hashed, h)
            if column in presents:
                present = presents[column] if present is None else tf.logical_and(
                    present, presents[column])
        missing_row = self.config.rows_of(feat) - 1
        ids = hashing.to_bucket(hashed, max(missing_row, 1))
        return ids if present is None else tf.where(present, ids, tf.constant(missing_row,
                                                                              tf.int64))

    def _hashed_int_categoricals(self, feats: list[CategoricalFeature],
                                 int_hashes: "_IntHashes", present: dict) -> dict:
        """Table rows of integer categoricals without a vocabulary, ``[K, N]`` at once:
        ``hash_int64(id) % (rows - 1)``, and the missing row (``rows - 1``) for a null."""
        columns = [self.config.column_of(f) for f in feats]
        missing_rows = np.array([self.config.rows_of(f) - 1 for f in feats], np.int64)
        buckets = np.maximum(missing_rows, 1).astype(np.uint64)
        if self.fused:
            values = tf.stack([tf.cast(int_hashes.raw[c], tf.int64) for c in columns])
            present_ = (_stacked_presence(columns, present, values)
                        if any(c in present for c in columns) else None)
            ids, hashes = ops.hash_int_ids(values, present_, buckets.tolist(),
                                           missing_rows.tolist())
            int_hashes.provide(columns, hashes)
            return dict(zip((f.name for f in feats), tf.unstack(ids, num=len(feats))))
        ids = tf.cast(tf.math.floormod(int_hashes.stacked(columns),
                                       tf.constant(buckets[:, None])), tf.int64)
        if any(c in present for c in columns):
            ids = tf.where(_stacked_presence(columns, present, ids), ids,
                           tf.constant(missing_rows[:, None]))
        return dict(zip((f.name for f in feats), tf.unstack(ids, num=len(feats))))

    def _numerics(self, feats: list[NumericFeature], raw: dict, present: dict,
                  checks: list) -> dict:
        """Every numeric feature at once, stacked ``[K, N]``: nulls (and NaN under
        ``nan_means_missing``) read ``fill_value``; a value still not finite is bad (it
        reads ``fill_value`` too); then each feature's transform; ``<name>.missing``
        where asked. Appends one ``([K, N] bad, K messages)`` check."""
        columns = [self.config.column_of(f) for f in feats]
        x = tf.stack([tf.cast(raw[c], tf.float32) for c in columns])
        if any(c in present for c in columns):
            missing = tf.logical_not(_stacked_presence(columns, present, x))
        else:
            missing = tf.zeros(tf.shape(x), tf.bool)
        nan_missing = np.array([[f.nan_means_missing] for f in feats])
        if nan_missing.any():
            missing = tf.logical_or(missing, tf.logical_and(tf.math.is_nan(x), nan_missing))
        fill = tf.constant([[f.fill_value] for f in feats], tf.float32)
        x = tf.where(missing, fill, x)
        bad = tf.logical_not(tf.math.is_finite(x))
        x = tf.where(bad, fill, x)
        checks.append((bad, [
            f"numeric column {column!r} (feature {f.name!r}) has " + (
                "an infinite value" if f.nan_means_missing else
                "a NaN or infinite value (set nan_means_missing: true if NaN means missing)")
            for f, column in zip(feats, columns)]))
        values = {}
        for kind in dict.fromkeys(f.transform for f in feats):
            picked = [k for k, f in enumerate(feats) if f.transform == kind]
            rows = x if len(picked) == len(feats) else tf.gather(x, picked)
            if self.fused and kind == "bucketize":
                part = ops.bucketize_rows(rows, _bucket_edges([feats[k] for k in picked]))
            else:
                part = _NUMERIC_TRANSFORMS[kind](rows, [feats[k] for k in picked])
            values.update(zip(picked, tf.unstack(part, num=len(picked))))
        out = {f.name: values[k] for k, f in enumerate(feats)}
        indicated = [k for k, f in enumerate(feats) if f.missing_indicator]
        if indicated:
            flags = tf.unstack(tf.cast(tf.gather(missing, indicated), tf.float32),
                               num=len(indicated))
            out.update((missing_indicator_name(feats[k].name), flag)
                       for k, flag in zip(indicated, flags))
        return out

    def _multi(self, feat: MultiCategoricalFeature, raw: tf.Tensor | tf.RaggedTensor,
               present=None, weights=None, weights_present=None
               ) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
        """Ids and weights of a multi-valued feature, ``[N, max_length]`` each.

        Works on flat values with their row ids (a few ops per feature, whatever the
        list lengths): hash every value, then sum each kept value into its slot of the
        padded result (nulls and empty tokens are dropped, each row keeps its first
        ``max_length``)."""
        if self.fused and feat.name not in self._vocab and not (
                isinstance(raw, tf.RaggedTensor) and feat.weighted):
            return self._multi_fused(feat, raw, present, weights, weights_present)
        if isinstance(raw, tf.RaggedTensor):
            nrows, rowids, splits = raw.nrows(), raw.value_rowids(), raw.row_splits
            tokens = raw.flat_values
            keep, bad_rows, weight_values = _list_weights(raw, present, weights,
                                                          weights_present)
        else:  # a delimited string; a null string reads as "" (no ids)
            split = tf.strings.split(raw, feat.separator)
            nrows, rowids, splits = tf.shape(raw, tf.int64)[0], split.value_rowids(), \
                split.row_splits
            tokens = split.flat_values
            keep = tf.strings.length(tokens) > 0
            bad_rows = tf.zeros(tf.shape(raw), tf.bool)
            weight_values = None
        if tokens.dtype != tf.string and feat.name in self._vocab:
            tokens = tf.strings.as_string(tokens)  # vocabulary files hold text
        if feat.weighted:
            pairs = tf.strings.split(tokens, feat.weight_separator, maxsplit=1)
            pairs = pairs.to_tensor(default_value="", shape=[None, 2])
            tokens, weight_text = pairs[:, 0], pairs[:, 1]
            unparsable = tf.logical_not(tf.strings.regex_full_match(weight_text, _NUMBER_RE))
            weight_values = tf.strings.to_number(tf.where(unparsable, "0", weight_text),
                                                 tf.float32)
            weight_values = tf.where(unparsable, 0.0, weight_values)
            # (an empty token, which is dropped anyway, is no bad entry)
            bad_token = unparsable if keep is None else tf.logical_and(unparsable, keep)
            bad_rows = tf.math.unsorted_segment_max(
                tf.cast(bad_token, tf.int32), rowids, tf.cast(nrows, tf.int64)) > 0
        elif weight_values is None:
            weight_values = tf.ones(tf.shape(tokens), tf.float32)
        if feat.name in self._vocab:
            ids = self._vocab[feat.name].lookup(tokens)
        elif tokens.dtype == tf.string:
            ids = tf.strings.to_hash_bucket_fast(tokens, self.config.rows_of(feat))
        else:  # integer ids hash as a categorical feature's integer ids do
            ids = hashing.to_bucket(hashing.hash_int64(tokens), self.config.rows_of(feat))
        return sequences.padded(ids, weight_values, nrows, rowids, splits, keep,
                                feat.max_length), bad_rows

    def _multi_fused(self, feat: MultiCategoricalFeature, raw, present, weights,
                     weights_present) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
        """:meth:`_multi` in one op (:func:`ops.list_ids` or :func:`ops.delimited_ids`)."""
        rows = self.config.rows_of(feat)
        if isinstance(raw, tf.RaggedTensor):
            values = raw.flat_values
            if values.dtype != tf.string:
                values = tf.cast(values, tf.int64)
            if weights is not None:
                weights = tf.RaggedTensor.from_row_splits(
                    tf.cast(weights.flat_values, tf.float32), weights.row_splits,
                    validate=False)
            ids, weight_values, bad = ops.list_ids(
                values, raw.row_splits, present.flat_values if present is not None else None,
                weights, weights_present.flat_values if weights_present is not None else None,
                rows, feat.max_length)
        else:
            ids, weight_values, bad = ops.delimited_ids(
                raw, feat.separator, feat.weight_separator if feat.weighted else None, rows,
                feat.max_length)
        return {"ids": ids, "weights": weight_values}, bad

    # ---- the transform --------------------------------------------------------------
    def __call__(self, raw: dict, source: tf.Tensor, first_row: tf.Tensor,
                 present: dict | None = None) -> tuple[dict, dict[str, tf.Tensor], tf.Tensor]:
        """Transforms one chunk.

        Args:
          raw: Column name -> ``[N]`` tensor, or ``[N, None]`` ragged tensor for a list
            column, as read from Parquet (nulls as 0 / "").
          source: Scalar string naming where the rows come from (for error messages).
          first_row: Scalar int64, the file row of the chunk's first row (for messages).
          present: Column name -> validity of ``raw`` (``[N]`` bool, or ragged bool per
            list element); a column not in it has no nulls.

        Returns:
          ``(features, labels, valid)`` as described in the module docstring.
        """
        present = present or {}
        checks: list[tuple[tf.Tensor, str]] = []
        out = self._features(raw, present, checks)
        labels = self._labels(raw, present, checks)
        return out, labels, self._valid(raw, checks, source, first_row)

    def _features(self, raw: dict, present: dict, checks: list) -> dict:
        """The model inputs of a chunk; appends each feature's ``(bad rows, message)`` to
        ``checks``.

        Features of the same kind are transformed together, stacked ``[K, N]``: every
        numeric feature, and every hashed integer categorical (whose hashes crosses
        reuse). A few ops over K columns cost less than the same ops per column, to run
        and to trace, and give the same values bit for bit."""
        out: dict = {}
        int_hashes = _IntHashes(self, raw)
        numerics = [n for n in self.feature_names
                    if isinstance(self.config.features[n], NumericFeature)]
        if numerics:
            out.update(self._numerics([self.config.features[n] for n in numerics], raw,
                                      present, checks))
        hashed_ints = [n for n in self.feature_names if self._is_hashed_int(n)]
        if hashed_ints:
            out.update(self._hashed_int_categoricals(
                [self.config.features[n] for n in hashed_ints], int_hashes, present))
        for group in self.config.sequence_groups(self._needed_features()):
            names = [n for n in group.sequences if n in self._needed_features()]
            values, group_checks = sequences.transform_group(self.config, names, raw, present)
            out.update(values)
            checks.extend(group_checks)
        for name in self.feature_names:
            feat = self.config.features[name]
            if name in out or isinstance(feat, NumericFeature):
                continue
            if isinstance(feat, CrossFeature):
                out[name] = self._cross(feat, raw, present, int_hashes)
                continue
            column = self.config.column_of(feat)
            if isinstance(feat, CategoricalFeature):
                out[name] = self._categorical(feat, raw[column], present.get(column))
            else:
                wcol = feat.weights_column
                out[name], bad = self._multi(feat, raw[column], present.get(column),
                                             raw.get(wcol) if wcol else None,
                                             present.get(wcol) if wcol else None)
                if feat.weighted:
                    checks.append((bad, f"column {column!r} (feature {name!r}) has an entry "
                                   f"whose weight after {feat.weight_separator!r} is not a number"))
                elif wcol:
                    checks.append((bad, f"list column {column!r} (feature {name!r}) and its "
                                   f"weights_column {wcol!r} differ in length"))
        ordered = {}
        for name in self.feature_names:
            ordered[name] = out[name]
            indicator = missing_indicator_name(name)
            if indicator in out:
                ordered[indicator] = out[indicator]
        return ordered

    def _is_hashed_int(self, name: str) -> bool:
        feat = self.config.features[name]
        return (isinstance(feat, CategoricalFeature) and feat.dtype != "string"
                and name not in self._vocab)

    def _labels(self, raw: dict, present: dict, checks: list) -> dict[str, tf.Tensor]:
        """The labels of a chunk as float 0/1 (a bad one reads 0); appends their checks."""
        labels: dict[str, tf.Tensor] = {}
        for name in self.labels:
            column = self.config.column_of(self.config.labels[name])
            y = tf.cast(raw[column], tf.float32)
            bad = tf.logical_not(tf.logical_or(tf.equal(y, 0.0), tf.equal(y, 1.0)))
            if column in present:
                bad = tf.logical_or(bad, tf.logical_not(present[column]))
            checks.append((bad, f"label column {column!r} has a null or a value other than "
                           "0 or 1"))
            labels[name] = tf.where(bad, 0.0, y)
        return labels

    def _valid(self, raw: dict, checks: list, source: tf.Tensor,
               first_row: tf.Tensor) -> tf.Tensor:
        """The float row weight (0 for a skipped bad row) under ``on_bad_row: skip``;
        under ``fail``, all ones behind one assertion that names the first bad check's
        message and its first bad row.

        ``checks`` holds ``(bad [N], message)`` and ``(bad [K, N], K messages)``."""
        first = next(iter(raw.values()))
        rows = first.nrows() if isinstance(first, tf.RaggedTensor) else tf.shape(first)[0]
        if not checks:
            return tf.ones([rows], tf.float32)
        bad = tf.concat([b if b.shape.rank == 2 else b[tf.newaxis] for b, _ in checks], 0)
        if self.on_bad_row == "skip":
            return tf.cast(tf.logical_not(tf.reduce_any(bad, axis=0)), tf.float32)
        messages = [m for _, message in checks
                    for m in (message if isinstance(message, list) else [message])]
        check_bad = tf.reduce_any(bad, axis=1)
        which = tf.argmax(tf.cast(check_bad, tf.int32), output_type=tf.int32)
        first_bad = first_row + tf.argmax(tf.cast(bad[which], tf.int32), output_type=tf.int64)
        text = tf.strings.join(["bad data: ", tf.gather(tf.constant(messages), which), " in ",
                                source, " at row ", tf.strings.as_string(first_bad),
                                " (set data.on_bad_row: skip to skip such rows)"])
        ok = tf.debugging.Assert(tf.logical_not(tf.reduce_any(check_bad)), [text])
        with tf.control_dependencies([ok]):
            return tf.ones([rows], tf.float32)

    def features_only(self, raw: dict, source: tf.Tensor, first_row: tf.Tensor,
                      present: dict | None = None) -> dict:
        """Transforms one chunk into model inputs only: no label columns needed.

        For serving, where requests carry the feature columns but no labels. Under
        ``on_bad_row: fail`` every returned tensor depends on the in-graph checks, so a
        bad value (e.g. an infinite numeric) raises the same error as in training rather
        than producing a prediction. Under ``skip`` a bad row gets the same safe
        replacement values as in training (use :meth:`__call__` to see ``valid``).

        Args:
          raw: Column name -> 1-D tensor for every column the features read (label
            columns are not needed; extra columns are ignored).
          source: Scalar string naming where the rows come from (for error messages).
          first_row: Scalar int64 row number of the chunk's first row (for messages).
          present: Validity per column, as for :meth:`__call__`.

        Returns:
          The ``features`` of :meth:`__call__`.
        """
        unlabeled = copy.copy(self)
        unlabeled.labels = []
        features, _, valid = unlabeled(raw, source, first_row, present)
        with tf.control_dependencies([valid]):
            return tf.nest.map_structure(tf.identity, features)


class _IntHashes:
    """``hash_int64`` of integer columns, computed once for every user, stacked (or, with
    the fused kernels, the hashes ``HashIntIds`` gave, see :meth:`provide`)."""

    def __init__(self, transform: FeatureTransform, raw: dict):
        config = transform.config
        wanted = [config.column_of(config.features[n]) for n in transform.feature_names
                  if transform._is_hashed_int(n)]
        for name in transform.feature_names:
            feat = config.features[name]
            if isinstance(feat, CrossFeature):
                wanted += [config.column_of(config.features[i]) for i in feat.inputs
                           if config.features[i].dtype != "string"]
        self._columns = list(dict.fromkeys(wanted))
        self.raw = raw
        self._hashes: tf.Tensor | None = None
        self._provided: dict[str, tf.Tensor] = {}

    def provide(self, columns: list[str], hashes: tf.Tensor) -> None:
        """Takes ``[len(columns), N]`` hashes computed elsewhere (a fused kernel)."""
        for k, column in enumerate(columns):
            self._provided.setdefault(column, hashes[k])

    def _all(self) -> tf.Tensor:
        if self._hashes is None:
            self._hashes = hashing.hash_int64(tf.stack(
                [tf.cast(self.raw[c], tf.int64) for c in self._columns]))
        return self._hashes

    def stacked(self, columns: list[str]) -> tf.Tensor:
        """``[len(columns), N]`` uint64 hashes of ``columns``, in that order."""
        if columns == self._columns:
            return self._all()
        return tf.gather(self._all(), [self._columns.index(c) for c in columns])

    def __getitem__(self, column: str) -> tf.Tensor:
        if column in self._provided:
            return self._provided[column]
        return self._all()[self._columns.index(column)]


def _stacked_presence(columns: list[str], present: dict, like: tf.Tensor) -> tf.Tensor:
    """``[K, N]`` validity of ``columns`` (true where a column has no validity)."""
    everywhere = None
    rows = []
    for column in columns:
        if column in present:
            rows.append(present[column])
        else:
            if everywhere is None:
                everywhere = tf.ones(tf.shape(like)[1:], tf.bool)
            rows.append(everywhere)
    return tf.stack(rows)


def _log1p(x: tf.Tensor, feats: list[NumericFeature]) -> tf.Tensor:
    return tf.sign(x) * tf.math.log1p(tf.abs(x))


def _standardize(x: tf.Tensor, feats: list[NumericFeature]) -> tf.Tensor:
    mean = tf.constant([[f.mean] for f in feats], tf.float32)
    std = tf.constant([[f.std] for f in feats], tf.float32)
    return (x - mean) / std


def _bucket_edges(feats: list[NumericFeature]) -> np.ndarray:
    """``[K, W]`` float32 boundaries of each feature, padded with +inf."""
    width = max(len(f.boundaries) for f in feats)
    edges = np.full([len(feats), width], np.inf, np.float32)
    for k, f in enumerate(feats):
        edges[k, :len(f.boundaries)] = f.boundaries
    return edges


def _bucketize(x: tf.Tensor, feats: list[NumericFeature]) -> tf.Tensor:
    """``Bucketize`` of each row by its feature's boundaries: the number of boundaries
    <= x (boundaries padded with +inf, which no finite x reaches), as int64."""
    return tf.searchsorted(tf.constant(_bucket_edges(feats)), x, side="right",
                           out_type=tf.int64)


#: Each numeric ``transform`` of the feature config, applied to its features' rows stacked.
_NUMERIC_TRANSFORMS = {"none": lambda x, feats: x, "log1p": _log1p,
                       "standardize": _standardize, "bucketize": _bucketize}


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
    weight_values = tf.gather(tf.concat(
        [tf.cast(weights.flat_values, tf.float32), [0.0]], 0), at)
    if weights_present is not None:
        keep = tf.logical_and(keep, tf.gather(tf.concat(
            [weights_present.flat_values, [False]], 0), at))
    return keep, bad_rows, weight_values
