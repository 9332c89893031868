"""``kind: sequence``: behaviour histories, newest first, padded.

A group is a main sequence and the sequences ``side_of`` it, read as ragged lists (or
delimited strings, split here) and aligned position by position on the main sequence's
layout. Each feature gives ``{"ids": int64 [N, L], "weights": float32 [N, L]}``, L =
``max_length``: position 0 the most recent id, weight 0 at padding (the mask downstream).
A position is dropped when any id of the group is null there; a row whose side differs in
length from its main is bad data. Ids hash as a categorical's of the same dtype.
docs/config.md (``kind: sequence``) gives the keys and the null policy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import field
from typing import Any, Literal

from recsys_dist import hashing
from recsys_dist.features.kinds.base import ColumnRead, FeatureKind, register_kind
from recsys_dist.features.kinds.categorical import CategoricalFeature, IdDtype
from recsys_dist.features.kinds.context import FeatureSet, IdScan, TransformContext
from recsys_dist.features.kinds.padding import padded, padded_zeros
from recsys_dist.features.tables import TableSpec
from recsys_dist.lazy import numpy as np
from recsys_dist.lazy import tensorflow as tf
from recsys_dist.yaml_loader import LocatedYaml
from recsys_dist.yaml_schema import did_you_mean

_INTEGER_RE = r"[-+]?[0-9]+"


@register_kind("sequence")
@dataclasses.dataclass(frozen=True)
class SequenceFeature(FeatureKind):
    """A behaviour history: the user's recent ids, in time order, compared with a candidate.

    Read from a Parquet list column (``list<int64>`` or ``list<string>``) or a delimited
    string column. The model input keeps the ``max_length`` most recent ids, newest
    first, padded after them. A null list (or null string) is an empty history; a null
    id inside a list is dropped (with ``side_of``, the whole position is dropped when
    any of the aligned ids is null). Ids hash exactly as a categorical feature's ids of
    the same ``dtype`` do, so a history that names its candidate's table shares its
    embeddings.

    Attributes:
      table: Embedding table the ids index (usually the candidate's table).
      max_length: Most recent ids kept per row; older ones are dropped.
      dtype: ``int64`` or ``string`` ids (as the candidate feature's ``dtype``).
      newest: Which end of the stored list is the most recent: ``last`` (ids appended
        as they happen, the usual layout) or ``first``.
      target: The categorical feature this history is compared with (the candidate,
        e.g. the ad's item id); it must read the same table. Attention models (``din``,
        ``bst``) need it on every sequence that is not a ``side_of``.
      side_of: Another sequence feature this one is aligned with position by position
        (e.g. the categories of the items of ``hist_item``): both lists have the same
        length in every row, and attention models concatenate each position's
        embeddings.
      pooling: How models without attention pool the history: ``mean`` or ``sum``.
      column: Parquet column; defaults to ``name``.
      separator: Separator between ids (delimited string columns).
      hash_buckets: Hash into this many rows; defaults to the table's ``rows`` (the
        last row is the missing row, as for a categorical feature).
    """

    name: str
    table: str
    max_length: int = field(metadata={"min": 1})
    kind: Literal["sequence"] = "sequence"
    dtype: IdDtype = "int64"
    newest: Literal["last", "first"] = "last"
    target: str | None = None
    side_of: str | None = None
    pooling: Literal["mean", "sum"] = "mean"
    column: str | None = None
    separator: str = "|"
    hash_buckets: int | None = field(default=None, metadata={"min": 2})

    multi_valued = True
    is_sequence = True

    # ---- the config -----------------------------------------------------------------
    def depends_on(self) -> tuple[str, ...]:
        return (self.side_of,) if self.side_of is not None else ()

    def check_references(
        self,
        doc: LocatedYaml,
        path: str,
        tables: Mapping[str, TableSpec],
        features: Mapping[str, FeatureKind],
    ) -> list | None:
        """Its target reads its table and hashes its ids the same way; a side names a
        main sequence of the same length."""
        if self.target is not None:
            self._check_target(doc, path, tables, features, self.target)
        if self.side_of is not None:
            main = features.get(self.side_of)
            if main is None:
                raise doc.error(
                    path + ".side_of",
                    f"unknown feature {self.side_of!r}." + did_you_mean(self.side_of, features),
                )
            if not isinstance(main, SequenceFeature) or main.side_of is not None:
                raise doc.error(
                    path + ".side_of",
                    f"feature {self.side_of!r} is not a main "
                    "sequence; side_of names a sequence feature without side_of",
                )
            for key in ("max_length", "newest"):
                if getattr(main, key) != getattr(self, key):
                    raise doc.error(
                        f"{path}.{key}",
                        f"got {getattr(self, key)!r} but the "
                        f"sequence it is side_of, {self.side_of!r}, has "
                        f"{getattr(main, key)!r}; aligned sequences keep the "
                        "same positions",
                    )
        return None

    def _check_target(
        self,
        doc: LocatedYaml,
        path: str,
        tables: Mapping[str, TableSpec],
        features: Mapping[str, FeatureKind],
        name: str,
    ) -> None:
        target = features.get(name)
        if target is None:
            raise doc.error(
                path + ".target",
                f"unknown feature {self.target!r}." + did_you_mean(self.target, features),
            )
        if not isinstance(target, CategoricalFeature):
            raise doc.error(
                path + ".target",
                f"feature {self.target!r} is {target.kind}; "
                "a sequence is compared with a categorical feature (the "
                "candidate's id)",
            )
        if target.table != self.table:
            dims = f"dim {tables[target.table].dim}" if target.table in tables else ""
            raise doc.error(
                path + ".target",
                f"feature {self.target!r} reads table "
                f"{target.table!r} ({dims}) but this sequence reads "
                f"{self.table!r} (dim {tables[self.table].dim}); a history and "
                "its candidate must read the same table, so that one id has one "
                "embedding in both",
            )
        if target.dtype != self.dtype:
            raise doc.error(
                path + ".dtype",
                f"got {self.dtype!r} but its target "
                f"{self.target!r} has dtype {target.dtype!r}; both must hash "
                "their ids the same way",
            )
        if target.vocabulary is not None:
            raise doc.error(
                path + ".target",
                f"feature {self.target!r} maps its ids with a "
                "vocabulary; a sequence hashes its ids, so its target must too "
                "(remove the vocabulary or compare with another feature)",
            )
        if (target.hash_buckets or None) != (self.hash_buckets or None):
            raise doc.error(
                path + ".hash_buckets",
                f"got {self.hash_buckets} but its target "
                f"{self.target!r} has hash_buckets {target.hash_buckets}; both "
                "must map an id to the same row",
            )

    def column_reads(self, config: FeatureSet) -> list[ColumnRead]:
        return [ColumnRead(config.column_of(self), "ids", f"sequence feature {self.name!r}")]

    # ---- the model input ------------------------------------------------------------
    def embedding_combiner(self, keep_sequences: bool) -> str | None:
        return "keep" if keep_sequences else self.pooling

    def example_input(self, batch_size: int) -> dict[str, Any]:
        return {self.name: padded_zeros(batch_size, self.max_length)}

    def hash_ids(self, values: tf.Tensor, rows: int) -> tuple[tf.Tensor, tf.Tensor]:
        """Table rows of ``values`` as a categorical feature of ``dtype`` hashes them, and
        which values are unparsable (a delimited integer history with a non-integer
        token)."""
        buckets = max(rows - 1, 1)
        bad = tf.zeros(tf.shape(values), tf.bool)
        if self.dtype == "string":
            if values.dtype != tf.string:
                values = tf.strings.as_string(values)
            return tf.strings.to_hash_bucket_fast(values, buckets), bad
        if values.dtype == tf.string:
            bad = tf.logical_not(tf.strings.regex_full_match(values, _INTEGER_RE))
            values = tf.strings.to_number(tf.where(bad, "0", values), tf.int64)
        return hashing.to_bucket(hashing.hash_int64(tf.cast(values, tf.int64)), buckets), bad

    @classmethod
    def transform_all(
        cls, features: list[SequenceFeature], context: TransformContext
    ) -> dict[str, dict[str, tf.Tensor]]:
        """Every group among ``features`` (a side's main sequence is transformed with it
        also when it is not among them)."""
        names = [f.name for f in features]
        needed = list(dict.fromkeys(names + [f.side_of for f in features if f.side_of is not None]))
        out = {}
        for group in context.config.sequence_groups(needed):
            values, checks = _transform_group(
                context.config,
                [n for n in group.sequences if n in needed],
                context.raw,
                context.present,
            )
            out.update(values)
            context.checks.extend(checks)
        return out

    # ---- validate --scan ------------------------------------------------------------
    def scan_columns(self, config: FeatureSet) -> list[str]:
        return [config.column_of(self)]

    def scan_ids(self, scan: IdScan) -> tuple[np.ndarray, np.ndarray]:
        """Each of a row's ``max_length`` most recent kept ids is one lookup."""
        tokens = scan.tokens(
            scan.config.column_of(self),
            self.separator,
            self.max_length,
            newest_last=self.newest == "last",
        )
        ids, _ = self.hash_ids(tokens, scan.config.rows_of(self))
        return scan.identity(tokens), ids.numpy()


class _Ragged:
    """One column of a group as flat values with its row layout and validity."""

    def __init__(self, raw, present, separator: str):
        if isinstance(raw, tf.RaggedTensor):
            self.values = raw.flat_values
            self.splits = tf.cast(raw.row_splits, tf.int64)
            self.valid = present.flat_values if present is not None else None
            self.blank = None
        else:  # a delimited string; a null string reads as "" (no ids)
            split = tf.strings.split(raw, separator)
            self.values = split.flat_values
            self.splits = tf.cast(split.row_splits, tf.int64)
            self.valid = tf.strings.length(self.values) > 0
            # "" splits into one empty token, a null id: a list of one null id, or the
            # empty list of a null or empty list column (see agrees)
            self.blank = tf.equal(raw, "")
        self.lengths = self.splits[1:] - self.splits[:-1]
        self.nrows = tf.shape(self.splits, out_type=tf.int64)[0] - 1

    def agrees(self, other: _Ragged) -> tf.Tensor:
        """``[N]``: the rows whose lengths agree with ``other``'s. A blank string (one
        null token) agrees with an empty list too: either way no position is kept."""
        same = tf.equal(self.lengths, other.lengths)
        for blank, length in ((self.blank, other.lengths), (other.blank, self.lengths)):
            if blank is not None:
                same = tf.logical_or(same, tf.logical_and(blank, tf.equal(length, 0)))
        return same


def _align_sides(
    feats: list,
    columns: list[str],
    parts: list[_Ragged],
    rowids: tf.Tensor,
    position: tf.Tensor,
    checks: list,
) -> tuple[list[tf.Tensor], tf.Tensor | None]:
    """Each side's values at its main sequence's positions, and which positions to keep
    (every id valid, lengths agreeing); appends a check per side."""
    main = parts[0]
    keep = main.valid
    aligned = [main.values]
    bad_row = tf.zeros([main.nrows], tf.bool)
    for feat, column, part in zip(feats[1:], columns[1:], parts[1:]):
        differ = tf.logical_not(part.agrees(main))
        checks.append(
            (
                differ,
                f"sequence column {column!r} (feature {feat.name!r}) differs "
                f"in length from {columns[0]!r} (feature {feat.side_of!r}), "
                "which it is side_of",
            )
        )
        bad_row = tf.logical_or(bad_row, differ)
        # element k of a row of the side is element k of the main row (where lengths agree;
        # one padding value past the end for rows where they do not)
        size = tf.size(part.values, out_type=tf.int64)
        at = tf.minimum(tf.gather(part.splits, rowids) + position, size)
        pad = tf.zeros([1], part.values.dtype)
        aligned.append(tf.gather(tf.concat([part.values, pad], 0), at))
        if part.valid is not None:
            valid = tf.gather(tf.concat([part.valid, [False]], 0), at)
            keep = valid if keep is None else tf.logical_and(keep, valid)
    if len(parts) > 1:
        row_ok = tf.gather(tf.logical_not(bad_row), rowids)
        keep = row_ok if keep is None else tf.logical_and(keep, row_ok)
    return aligned, keep


def _transform_group(
    config: FeatureSet, names: list[str], raw: dict, present: dict
) -> tuple[dict[str, dict[str, tf.Tensor]], list[tuple[tf.Tensor, str]]]:
    """Transforms one group (``names[0]`` the main sequence, then its sides).

    Args:
      config: The feature config.
      names: The main sequence, then the sequences ``side_of`` it.
      raw: Column -> ragged ``[N, None]`` (list column) or ``[N]`` string tensor.
      present: Column -> validity (ragged per element, or ``[N]``); absent: no nulls.

    Returns:
      ``(inputs per feature, [(bad rows [N], message), ...])``.
    """
    feats = [config.features[n] for n in names]
    columns = [config.column_of(f) for f in feats]
    main_feat = feats[0]
    parts = [_Ragged(raw[c], present.get(c), f.separator) for f, c in zip(feats, columns)]
    main = parts[0]
    rowids = tf.repeat(tf.range(main.nrows), main.lengths)
    position = tf.range(tf.size(main.values, out_type=tf.int64)) - tf.gather(main.splits, rowids)
    checks: list[tuple[tf.Tensor, str]] = []
    aligned, keep = _align_sides(feats, columns, parts, rowids, position, checks)
    hashed = []
    for feat, column, values in zip(feats, columns, aligned):
        ids, unparsable = feat.hash_ids(values, config.rows_of(feat))
        if values.dtype == tf.string and feat.dtype == "int64":
            unparsable = tf.logical_and(unparsable, keep) if keep is not None else unparsable
            checks.append(
                (
                    tf.math.unsorted_segment_max(tf.cast(unparsable, tf.int32), rowids, main.nrows)
                    > 0,
                    f"sequence column {column!r} (feature {feat.name!r}) has an id that is not "
                    "an integer (dtype int64)",
                )
            )
        hashed.append(ids)
    if main_feat.newest == "last":  # reverse each row: the newest id comes first
        reverse = (
            tf.gather(main.splits, rowids)
            + tf.gather(main.splits, rowids + 1)
            - 1
            - tf.range(tf.size(rowids, out_type=tf.int64))
        )
        hashed = [tf.gather(ids, reverse) for ids in hashed]
        keep = None if keep is None else tf.gather(keep, reverse)
    out = {}
    for feat, ids in zip(feats, hashed):
        out[feat.name] = padded(
            ids, None, main.nrows, rowids, main.splits, keep, main_feat.max_length
        )
    return out, checks
