"""Feature transforms: raw Parquet columns -> model inputs, labels and row validity.

Everything here is TensorFlow ops, vectorised over a chunk of N rows, so the same
code runs inside the workers' ``tf.data`` pipeline and inside an exported SavedModel.
No Python runs per row or per batch. The input pipeline runs it with fused kernels
(:meth:`FeatureTransform.with_fused_kernels`: hashed integer ids, bucketizing and
multi-valued features each in one op of :mod:`recsys_dist.ops`, the same values bit for
bit); an export keeps the stock ops, so serving needs no custom op.

:class:`FeatureTransform` orchestrates: it groups the features by kind, each kind after
the kinds its features depend on (:func:`group_by_kind`), and hands each kind all its
features at once (``transform_all`` of its class in :mod:`recsys_dist.features.kinds`,
where each kind's transform lives), with a
:class:`~recsys_dist.features.kinds.TransformContext` of the chunk. It keeps the labels
and the row checks.

The null policies and the output shapes are given on :class:`FeatureTransform` and in
docs/data.md.
"""

from __future__ import annotations

import copy
from typing import Literal

import tensorflow as tf

from recsys_dist import ops
from recsys_dist.features.config import FeatureConfig
from recsys_dist.features.kinds import (
    FEATURE_KINDS,
    FeatureKind,
    TransformContext,
)
from recsys_dist.features.kinds import (
    missing_indicator_name as missing_indicator_name,
)
from recsys_dist.features.kinds.context import IntHashes


class FeatureTransform:
    """Builds model inputs from the raw columns of one chunk of rows.

    Inputs: each column as read (:mod:`recsys_dist.ops`): a ``[N]`` tensor, or a
    ``[N, None]`` ragged tensor for a list column, and optionally its validity (false for
    a null; for a list column, per element). Nulls follow each feature's policy:

    - categorical: the feature's missing row (the last row of its id space), which no
      real id hashes to; a cross with a missing input reads the cross's missing row.
    - numeric: ``fill_value`` (and ``<name>.missing`` = 1 with ``missing_indicator``).
    - multi_categorical: a null list is empty; a null id (or its null weight) is dropped.
    - sequence: a null list is an empty history; a position with a null id is dropped.
    - label: bad data (``on_bad_row``).

    Outputs for a chunk of N rows (B in a batch):

    - categorical, cross, bucketized numeric: int64 ``[N]`` table rows.
    - numeric: float32 ``[N]``; with ``missing_indicator`` also ``<name>.missing``
      float32 ``[N]`` in {0, 1}.
    - multi_categorical, sequence: ``{"ids": int64 [N, L], "weights": float32 [N, L]}``,
      padded with weight 0 past each row's ids (L = ``max_length``; a sequence's newest
      id first).
    - labels: float32 ``[N]`` in {0, 1}.
    - valid: float32 ``[N]``: 1 for a good row, 0 for a row skipped under
      ``on_bad_row: skip`` (its values are replaced by safe ones so they cannot poison a
      step; train with it as the example weight).

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

    def __init__(
        self,
        features: FeatureConfig,
        labels: list[str],
        column_dtypes: dict[str, str],
        on_bad_row: Literal["fail", "skip"],
        feature_names: list[str] | None = None,
        fused: bool = False,
    ):
        self.config = features
        self.fused = fused
        self.labels = list(labels)
        self.feature_names = list(feature_names or features.features)
        self.on_bad_row = on_bad_row
        self.column_dtypes = dict(column_dtypes)
        self._by_kind = group_by_kind([features.features[n] for n in self.feature_names], features)
        # (built eagerly here: a vocabulary lookup is made of numpy arrays)
        self._prepared = {
            f.name: p
            for kind in self._by_kind.values()
            for f in kind
            if (p := f.prepare(features)) is not None
        }
        self._int_hash_columns = [
            c for kind in self._by_kind.values() for f in kind for c in f.int_hash_columns(features)
        ]
        reads = [features.features[n].column_reads(features) for n in self._needed_features()]
        # each feature's own column, then the extra ones (weights), then the labels
        self.columns = list(
            dict.fromkeys(
                [r[0].column for r in reads if r]
                + [c.column for r in reads for c in r[1:]]
                + [features.column_of(features.labels[n]) for n in self.labels]
            )
        )
        missing = [c for c in self.columns if c not in self.column_dtypes]
        if missing:
            raise ValueError(f"no read dtype for column(s) {missing}")

    def with_fused_kernels(self) -> "FeatureTransform":
        """The same transform on the fused kernels (for the workers' input pipeline)."""
        fused = copy.copy(self)
        fused.fused = True
        return fused

    def _needed_features(self) -> list[str]:
        """The features produced, then those whose columns they read too (a cross's
        inputs, a side sequence's main)."""
        names = list(self.feature_names)
        for name in self.feature_names:
            names.extend(n for n in self.config.features[name].depends_on() if n not in names)
        return names

    # ---- the transform --------------------------------------------------------------
    def __call__(
        self,
        raw: dict,
        source: tf.Tensor,
        first_row: tf.Tensor,
        present: dict | None = None,
        row_stride: tf.Tensor | int = 1,
    ) -> tuple[dict, dict[str, tf.Tensor], tf.Tensor]:
        """Transforms one chunk.

        Args:
          raw: Column name -> ``[N]`` tensor, or ``[N, None]`` ragged tensor for a list
            column, as read from Parquet (nulls as 0 / "").
          source: Scalar string naming where the rows come from (for error messages).
          first_row: Scalar int64, the file row of the chunk's first row (for messages).
          present: Column name -> validity of ``raw`` (``[N]`` bool, or ragged bool per
            list element); a column not in it has no nulls.
          row_stride: Scalar int64, file rows from one row of the chunk to the next (for
            messages; a strided work item reads every ``row_stride``-th row).

        Returns:
          ``(features, labels, valid)`` as described in the module docstring.
        """
        present = present or {}
        checks: list[tuple[tf.Tensor, str]] = []
        out = self._features(raw, present, checks)
        labels = self._labels(raw, present, checks)
        return out, labels, self._valid(raw, checks, source, first_row, row_stride)

    def _features(self, raw: dict, present: dict, checks: list) -> dict:
        """The model inputs of a chunk; appends each feature's ``(bad rows, message)`` to
        ``checks``.

        Each kind transforms all its features at once: numeric features stacked
        ``[K, N]``, hashed integer categoricals stacked (whose hashes crosses reuse). A
        few ops over K columns cost less than the same ops per column, to run and to
        trace, and give the same values bit for bit."""
        context = TransformContext(
            self.config,
            raw,
            present,
            checks,
            IntHashes(raw, self._int_hash_columns),
            self._prepared,
            ops if self.fused else None,
        )
        out: dict = {}
        for kind, features in self._by_kind.items():
            out.update(FEATURE_KINDS[kind].transform_all(features, context))
        ordered = {}
        for name in self.feature_names:
            for output in self.config.features[name].outputs():
                if output not in out:
                    raise ValueError(
                        f"feature kind {self.config.features[name].kind!r} "
                        f"gave no model input {output!r}"
                    )
                ordered[output] = out[output]
        return ordered

    def _labels(self, raw: dict, present: dict, checks: list) -> dict[str, tf.Tensor]:
        """The labels of a chunk as float 0/1 (a bad one reads 0); appends their checks."""
        labels: dict[str, tf.Tensor] = {}
        for name in self.labels:
            column = self.config.column_of(self.config.labels[name])
            y = tf.cast(raw[column], tf.float32)
            bad = tf.logical_not(tf.logical_or(tf.equal(y, 0.0), tf.equal(y, 1.0)))
            if column in present:
                bad = tf.logical_or(bad, tf.logical_not(present[column]))
            checks.append((bad, f"label column {column!r} has a null or a value other than 0 or 1"))
            labels[name] = tf.where(bad, 0.0, y)
        return labels

    def _valid(
        self,
        raw: dict,
        checks: list,
        source: tf.Tensor,
        first_row: tf.Tensor,
        row_stride: tf.Tensor | int,
    ) -> tf.Tensor:
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
        messages = [
            m
            for _, message in checks
            for m in (message if isinstance(message, list) else [message])
        ]
        check_bad = tf.reduce_any(bad, axis=1)
        which = tf.argmax(tf.cast(check_bad, tf.int32), output_type=tf.int32)
        first_bad = first_row + tf.cast(row_stride, tf.int64) * tf.argmax(
            tf.cast(bad[which], tf.int32), output_type=tf.int64
        )
        text = tf.strings.join(
            [
                "bad data: ",
                tf.gather(tf.constant(messages), which),
                " in ",
                source,
                " at row ",
                tf.strings.as_string(first_bad),
                " (set data.on_bad_row: skip to skip such rows)",
            ]
        )
        ok = tf.debugging.Assert(tf.logical_not(tf.reduce_any(check_bad)), [text])
        with tf.control_dependencies([ok]):
            return tf.ones([rows], tf.float32)

    def features_only(
        self, raw: dict, source: tf.Tensor, first_row: tf.Tensor, present: dict | None = None
    ) -> dict:
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


def group_by_kind(
    features: list[FeatureKind], config: FeatureConfig
) -> dict[str, list[FeatureKind]]:
    """``features`` by kind name. A kind comes after the kinds of the features its
    features name in ``depends_on``; otherwise kinds keep the order of their first
    feature. Each kind's features keep the order given.

    Raises:
      ValueError: A feature's class is not the registered class of its kind, a feature
        depends on one ``config`` does not define, or kinds depend on each other in a
        cycle.
    """
    groups: dict[str, list[FeatureKind]] = {}
    for feature in features:
        if FEATURE_KINDS.get(feature.kind) is not type(feature):
            raise ValueError(
                f"feature {feature.name!r} has kind {feature.kind!r} "
                f"({type(feature).__qualname__}), which is not registered; "
                "registered kinds: " + ", ".join(FEATURE_KINDS)
            )
        groups.setdefault(feature.kind, []).append(feature)
    # kind -> {kind it runs after: the feature and the dependency that say so}
    after: dict[str, dict[str, str]] = {kind: {} for kind in groups}
    for kind, members in groups.items():
        for feature in members:
            for name in feature.depends_on():
                if name not in config.features:
                    raise ValueError(
                        f"feature {feature.name!r} (kind {kind!r}) depends on {name!r}, "
                        "which the feature config does not define; defined features: "
                        + ", ".join(config.features)
                    )
                other = config.features[name].kind
                if other != kind and other in groups:
                    after[kind].setdefault(other, f"{feature.name!r} on {name!r}")
    order: list[str] = []
    while len(order) < len(groups):
        ready = [k for k in groups if k not in order and all(o in order for o in after[k])]
        if not ready:
            left = [k for k in groups if k not in order]
            raise ValueError(
                "feature kinds depend on each other in a cycle: "
                + "; ".join(
                    f"{kind!r} after {other!r} (feature {why})"
                    for kind in left
                    for other, why in after[kind].items()
                    if other in left
                )
            )
        order.append(ready[0])
    return {kind: groups[kind] for kind in order}
