"""Behaviour histories (``kind: sequence``): raw list columns -> newest-first padded ids.

A group is a main sequence and the sequences ``side_of`` it (e.g. the categories of the
items of ``hist_item``). Its columns are read as ragged lists (or delimited strings, split
here), aligned position by position on the main sequence's layout, and turned into
``{"ids": int64 [N, L], "weights": float32 [N, L]}`` per feature, L = ``max_length``:

- position 0 is the most recent id (``newest: last`` lists are reversed first), and
  the ``max_length`` most recent kept ids fill the row from the left;
- ``weights`` is 1 at a real position and 0 at padding: the mask of every attention,
  pooling and statistic downstream;
- a null list (or string) is an empty history; a position is dropped when any id of
  the group is null there (an empty token of a delimited string counts as null);
- a row whose side list differs in length from its main list is bad data
  (``data.on_bad_row``), and none of its positions is kept;
- ids hash exactly as a categorical feature's ids of the same dtype, into
  ``rows - 1`` buckets (the last row is the missing row, which no id reads).
"""

from __future__ import annotations

import tensorflow as tf

from recsys_dist.config.features import FeatureConfig, SequenceFeature
from recsys_dist.features import hashing

_INTEGER_RE = r"[-+]?[0-9]+"


class _Ragged:
    """One column of a group as flat values with its row layout and validity."""

    def __init__(self, raw, present, separator: str):
        if isinstance(raw, tf.RaggedTensor):
            self.values = raw.flat_values
            self.splits = tf.cast(raw.row_splits, tf.int64)
            self.valid = present.flat_values if present is not None else None
        else:  # a delimited string; a null string reads as "" (no ids)
            split = tf.strings.split(raw, separator)
            self.values = split.flat_values
            self.splits = tf.cast(split.row_splits, tf.int64)
            self.valid = tf.strings.length(self.values) > 0
        self.lengths = self.splits[1:] - self.splits[:-1]
        self.nrows = tf.shape(self.splits, out_type=tf.int64)[0] - 1


def hash_ids(feat: SequenceFeature, values: tf.Tensor, rows: int
             ) -> tuple[tf.Tensor, tf.Tensor]:
    """Table rows of ``values`` as a categorical feature of ``feat.dtype`` hashes them, and
    which values are unparsable (a delimited integer history with a non-integer token)."""
    buckets = max(rows - 1, 1)
    bad = tf.zeros(tf.shape(values), tf.bool)
    if feat.dtype == "string":
        if values.dtype != tf.string:
            values = tf.strings.as_string(values)
        return tf.strings.to_hash_bucket_fast(values, buckets), bad
    if values.dtype == tf.string:
        bad = tf.logical_not(tf.strings.regex_full_match(values, _INTEGER_RE))
        values = tf.strings.to_number(tf.where(bad, "0", values), tf.int64)
    return hashing.to_bucket(hashing.hash_int64(tf.cast(values, tf.int64)), buckets), bad


def transform_group(config: FeatureConfig, names: list[str], raw: dict, present: dict
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
    position = tf.range(tf.size(main.values, out_type=tf.int64)) - tf.gather(main.splits,
                                                                               rowids)
    checks: list[tuple[tf.Tensor, str]] = []
    keep = main.valid
    aligned = [main.values]
    bad_row = tf.zeros([main.nrows], tf.bool)
    for feat, column, part in zip(feats[1:], columns[1:], parts[1:]):
        differ = tf.not_equal(part.lengths, main.lengths)
        checks.append((differ, f"sequence column {column!r} (feature {feat.name!r}) differs "
                               f"in length from {columns[0]!r} (feature {feat.side_of!r}), "
                               "which it is side_of"))
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
    hashed = []
    for feat, column, values in zip(feats, columns, aligned):
        ids, unparsable = hash_ids(feat, values, config.rows_of(feat))
        if values.dtype == tf.string and feat.dtype == "int64":
            unparsable = tf.logical_and(unparsable, keep) if keep is not None else unparsable
            checks.append((tf.math.unsorted_segment_max(
                tf.cast(unparsable, tf.int32), rowids, main.nrows) > 0,
                f"sequence column {column!r} (feature {feat.name!r}) has an id that is not "
                "an integer (dtype int64)"))
        hashed.append(ids)
    if main_feat.newest == "last":  # reverse each row: the newest id comes first
        reverse = tf.gather(main.splits, rowids) + tf.gather(main.splits, rowids + 1) - 1 \
            - tf.range(tf.size(rowids, out_type=tf.int64))
        hashed = [tf.gather(ids, reverse) for ids in hashed]
        keep = None if keep is None else tf.gather(keep, reverse)
    out = {}
    for feat, ids in zip(feats, hashed):
        out[feat.name] = padded(ids, None, main.nrows, rowids, main.splits, keep,
                                main_feat.max_length)
    return out, checks


def padded(ids: tf.Tensor, weight_values: tf.Tensor | None, nrows: tf.Tensor,
           rowids: tf.Tensor, splits: tf.Tensor, keep: tf.Tensor | None, max_length: int
           ) -> dict[str, tf.Tensor]:
    """``{"ids", "weights"}``, ``[N, max_length]`` each, from flat ids and row ids: each
    row's first ``max_length`` kept ids from the left with their weights (``None``: 1);
    padding id 0, weight 0. (Multi-valued features pad the same way.)

    The slot of each id is its position among its row's kept ids; dropped ids (``keep``
    false, or past ``max_length``) get slot -1, which the segment sums leave out."""
    nrows = tf.cast(nrows, tf.int64)
    kept = tf.ones(tf.shape(rowids), tf.int64) if keep is None else tf.cast(keep, tf.int64)
    before = tf.cumsum(kept, exclusive=True)
    position = before - tf.gather(before, tf.gather(splits, rowids))
    slot = rowids * max_length + position
    if keep is not None:
        slot = tf.where(keep, slot, -1)
    slot = tf.where(position < max_length, slot, -1)
    cells = nrows * max_length
    dense_ids = tf.reshape(tf.math.unsorted_segment_sum(ids, slot, cells), [-1, max_length])
    if weight_values is None:
        weight_values = tf.ones(tf.shape(ids), tf.float32)
    weights = tf.reshape(tf.math.unsorted_segment_sum(weight_values, slot, cells),
                         [-1, max_length])
    dense_ids.set_shape([None, max_length])
    weights.set_shape([None, max_length])
    return {"ids": dense_ids, "weights": weights}
