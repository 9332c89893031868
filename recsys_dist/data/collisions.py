"""How many distinct ids each embedding table sees, and how often hashed ids share a row.

``recsys-dist validate --scan`` reports it per table (:func:`table_ids`). An id is a raw
value of a feature: a categorical's column value, each element of a multi_categorical's
list (or each token of its delimited string, the part before the weight separator of a
weighted one), a cross's tuple of input values. Ids of different features are different
ids, also when the features share a table. Its row is what
:class:`~recsys_dist.features.transforms.FeatureTransform` maps it to, so hashing,
vocabularies and their OOV buckets count exactly as in training. Nulls (which read the
feature's missing row) are no ids; bucketized numerics are not counted.

The share counts lookups: a row of a single-valued feature is one lookup, a
multi_categorical row one per id it keeps (the first ``max_length``). A lookup is shared
when its id's table row holds more than one distinct id of the scanned data.

The Parquet files are read with pyarrow on this machine, one record batch at a time,
and transformed eagerly; memory grows with the distinct ids, not the rows. String
values and cross tuples are told apart by their 63/64-bit fingerprints.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import tensorflow as tf

from recsys_dist import storage_io
from recsys_dist.config.features import (CategoricalFeature, CrossFeature, MultiCategoricalFeature,
                                         SequenceFeature)
from recsys_dist.data.schema_check import split_read_dtype
from recsys_dist.features import hashing, sequences
from recsys_dist.features.transforms import FeatureTransform

#: A hashed table whose shared lookups are above this share gets a suggestion.
SHARED_WARN = 0.01


@dataclasses.dataclass(frozen=True)
class TableIds:
    """The ids one table saw in a scan.

    Attributes:
      table: Table name.
      dynamic: ``kind: dynamic`` (no hashing: only distinct ids are counted).
      rows: Data rows scanned.
      lookups: Id occurrences (see the module docstring).
      distinct_ids: Distinct (feature, value) pairs.
      rows_used: Table rows holding at least one id (hashed tables).
      shared_lookups: Lookups whose row holds more than one distinct id.
      table_rows: ``rows`` of a hashed table.
      capacity: Rows of a dynamic table over all its shards.
      vocabulary: Every feature of the table has a vocabulary (ids share only its OOV
        rows).
    """

    table: str
    dynamic: bool
    rows: int
    lookups: int
    distinct_ids: int
    rows_used: int
    shared_lookups: int
    table_rows: int | None = None
    capacity: int | None = None
    vocabulary: bool = False

    @property
    def shared(self) -> float:
        """The share of lookups whose row holds another id too."""
        return self.shared_lookups / self.lookups if self.lookups else 0.0

    def lines(self) -> list[str]:
        """The report lines (``ids      table ...``, and a ``warning`` if any)."""
        head = f"ids      table {self.table}: "
        if self.dynamic:
            lines = [head + f"dynamic, {self.distinct_ids:,} distinct ids (capacity "
                     f"{self.capacity:,})"]
            if self.distinct_ids > self.capacity:
                lines.append(f"warning  dynamic table {self.table} would be full: "
                             f"{self.distinct_ids:,} distinct ids > capacity "
                             f"{self.capacity:,}; raise its capacity_per_shard")
            return lines
        text = head + f"{self.distinct_ids:,} distinct ids in {self.rows:,} rows"
        if self.lookups != self.rows:
            text += f" ({self.lookups:,} lookups)"
        # (compared as printed, so "1.0%" never comes with a suggestion)
        if round(self.shared * 100, 1) > SHARED_WARN * 100:
            advice = ("extend the vocabulary or raise oov_buckets" if self.vocabulary else
                      f"consider kind: dynamic or rows >= {_suggested_rows(self.distinct_ids):,}")
            return [text + f"; {self.shared:.1%} of lookups share a row with another id: "
                    + advice]
        return [text + f"; {self.shared:.1%} share a row (fine)"]


def _suggested_rows(distinct: int) -> int:
    """Rows that bring the expected shared share under :data:`SHARED_WARN`, rounded up
    to two significant digits. With uniform hashing an id's row holds another of ``d``
    ids with probability ``1 - (1 - 1/rows)^(d-1)``, whatever the id's frequency: about
    ``d / rows``, so about 100 rows per distinct id."""
    target = math.ceil(max(distinct - 1, 1) / -math.log1p(-SHARED_WARN))
    step = 10 ** max(int(math.log10(target)) - 1, 0)
    return -(-target // step) * step


class _Distinct:
    """Distinct int64 keys with their table row and count, merged in bounded chunks."""

    def __init__(self, flush_at: int = 1 << 21):
        self.keys = np.zeros([0], np.int64)
        self.rows = np.zeros([0], np.int64)
        self.counts = np.zeros([0], np.int64)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending_size = 0
        self._flush_at = flush_at

    def add(self, keys: np.ndarray, rows: np.ndarray) -> None:
        self._pending.append((keys.astype(np.int64, copy=False), rows.astype(np.int64,
                                                                             copy=False)))
        self._pending_size += len(keys)
        if self._pending_size >= self._flush_at:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        keys = np.concatenate([self.keys] + [k for k, _ in self._pending])
        rows = np.concatenate([self.rows] + [r for _, r in self._pending])
        counts = np.concatenate([self.counts] + [np.ones(len(k), np.int64)
                                                 for k, _ in self._pending])
        self._pending, self._pending_size = [], 0
        self.keys, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        self.rows = rows[first]
        self.counts = np.bincount(inverse.reshape(-1), weights=counts,
                                  minlength=len(self.keys)).astype(np.int64)


def _id_features(transform: FeatureTransform) -> list[str]:
    """The features of ``transform`` whose values are table ids."""
    return [n for n in transform.feature_names
            if isinstance(transform.config.features[n],
                          (CategoricalFeature, MultiCategoricalFeature, CrossFeature,
                           SequenceFeature))]


def _row_ranges(plan) -> dict[int, list[tuple[int, int]]]:
    """Planned ``[start, stop)`` row ranges of each file, merged and in order."""
    ranges: dict[int, list[tuple[int, int]]] = {}
    for unit in sorted(plan.units, key=lambda u: (u.file, u.start)):
        spans = ranges.setdefault(unit.file, [])
        if spans and spans[-1][1] == unit.start:
            spans[-1] = (spans[-1][0], unit.stop)
        else:
            spans.append((unit.start, unit.stop))
    return ranges


def _planned_batches(plan, columns: list[str], batch_rows: int):
    """Record batches (only planned rows) of ``columns`` over the plan's files."""
    for file_index, spans in _row_ranges(plan).items():
        path = plan.files[file_index]
        with storage_io.open_file(path) as handle:
            offset = 0
            for batch in pq.ParquetFile(handle).iter_batches(batch_size=batch_rows,
                                                             columns=columns):
                end = offset + batch.num_rows
                for start, stop in spans:
                    lo, hi = max(start, offset), min(stop, end)
                    if lo < hi:
                        yield batch.slice(lo - offset, hi - lo)
                offset = end


def _scalar(array: pa.Array, read_dtype: str) -> tuple[tf.Tensor, np.ndarray]:
    """A scalar column as read by the input function (nulls as 0 / "") and its validity."""
    present = array.is_valid().to_numpy(zero_copy_only=False)
    dtype = tf.as_dtype(read_dtype)
    if dtype == tf.string:
        values = array.cast(pa.string()).fill_null("").to_numpy(zero_copy_only=False)
        return tf.constant(values.astype(object), tf.string), present
    values = array.fill_null(0).to_numpy(zero_copy_only=False)
    return tf.constant(values.astype(dtype.as_numpy_dtype)), present


def _identity(values: tf.Tensor) -> np.ndarray:
    """int64 keys telling ids apart: the value itself, or a string's fingerprint."""
    if values.dtype == tf.string:
        return tf.bitcast(hashing.hash_string(values), tf.int64).numpy()
    return tf.cast(values, tf.int64).numpy()


def _tokens(feat: MultiCategoricalFeature | SequenceFeature, array: pa.Array, read_dtype: str
            ) -> tuple[tf.Tensor, np.ndarray]:
    """The ids a multi_categorical or sequence feature looks up in a batch: ``(tokens, row
    of each)``, nulls and empty tokens dropped, the first ``max_length`` of each row kept
    (a sequence's most recent ones)."""
    dtype, is_list = split_read_dtype(read_dtype)
    if is_list:
        lengths = pc.list_value_length(array).fill_null(0).to_numpy(zero_copy_only=False)
        flat = array.flatten()
        rowids = np.repeat(np.arange(len(array)), lengths)
        keep = flat.is_valid().to_numpy(zero_copy_only=False)
        tokens, _ = _scalar(flat, dtype)
    else:
        text, _ = _scalar(array, "string")
        split = tf.strings.split(text, feat.separator)
        tokens = split.flat_values
        rowids = split.value_rowids().numpy()
        keep = tf.strings.length(tokens).numpy() > 0
        if getattr(feat, "weighted", False):
            tokens = tf.strings.split(tokens, feat.weight_separator, maxsplit=1)
            tokens = tokens.to_tensor(default_value="", shape=[None, 2])[:, 0]
    kept_rows = rowids[keep]
    # position of each kept id among its row's kept ids (rowids are sorted)
    first = np.searchsorted(kept_rows, kept_rows, side="left")
    within = np.arange(len(kept_rows)) - first < feat.max_length
    if getattr(feat, "newest", "first") == "last":  # a history keeps its last ids
        last = np.searchsorted(kept_rows, kept_rows, side="right")
        within = last - np.arange(len(kept_rows)) <= feat.max_length
    index = np.flatnonzero(keep)[within]
    return tf.gather(tokens, index), kept_rows[within]


class _Scanner:
    """Maps one batch's raw columns to (identity keys, table rows) per feature."""

    def __init__(self, transform: FeatureTransform):
        self.config = transform.config
        self.dtypes = transform.column_dtypes
        self.features = _id_features(transform)
        single = [n for n in self.features
                  if not isinstance(self.config.features[n],
                                    (MultiCategoricalFeature, SequenceFeature))]
        self.single = FeatureTransform(self.config, [], self.dtypes, "skip", single) \
            if single else None
        # A multi_categorical feature is transformed one id per row: its rows are then
        # exactly the rows of those ids (weights play no part in which row an id reads).
        self.multi = {}
        for name in self.features:
            feat = self.config.features[name]
            if isinstance(feat, MultiCategoricalFeature):
                alone = dataclasses.replace(feat, weighted=False, weights_column=None,
                                            max_length=1)
                config = dataclasses.replace(
                    self.config, features={**self.config.features, name: alone})
                self.multi[name] = FeatureTransform(config, [], self.dtypes, "skip", [name])
        columns = []
        for name in self.features:
            feat = self.config.features[name]
            inputs = feat.inputs if isinstance(feat, CrossFeature) else [name]
            columns += [self.config.column_of(self.config.features[i]) for i in inputs]
        self.columns = list(dict.fromkeys(columns))

    def __call__(self, batch: pa.RecordBatch) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        source, first = tf.constant("scan"), tf.constant(0, tf.int64)
        out = {}
        raw, present = {}, {}
        for column in self.columns:
            read_dtype = self.dtypes[column]
            if not split_read_dtype(read_dtype)[1]:
                raw[column], present[column] = _scalar(batch.column(column), read_dtype)
        if self.single is not None:
            rows = self.single(raw, source, first, {c: tf.constant(p)
                                                    for c, p in present.items()})[0]
        for name in self.features:
            feat = self.config.features[name]
            if isinstance(feat, SequenceFeature):
                column = self.config.column_of(feat)
                tokens, _ = _tokens(feat, batch.column(column), self.dtypes[column])
                ids, _ = sequences.hash_ids(feat, tokens, self.config.rows_of(feat))
                out[name] = (_identity(tokens), ids.numpy())
            elif isinstance(feat, MultiCategoricalFeature):
                column = self.config.column_of(feat)
                tokens, _ = _tokens(feat, batch.column(column), self.dtypes[column])
                one_each = tokens
                if split_read_dtype(self.dtypes[column])[1]:
                    one_each = tf.RaggedTensor.from_row_lengths(
                        tokens, tf.ones(tf.shape(tokens, tf.int64), tf.int64))
                ids = self.multi[name]({column: one_each}, source, first)[0][name]["ids"]
                out[name] = (_identity(tokens), ids.numpy()[:, 0])
            elif isinstance(feat, CrossFeature):
                hashed, ok = None, np.ones(batch.num_rows, bool)
                for part in feat.inputs:
                    column = self.config.column_of(self.config.features[part])
                    values = raw[column]
                    h = hashing.hash_string(values) if values.dtype == tf.string \
                        else hashing.hash_int64(values)
                    hashed = h if hashed is None else hashing.combine(hashed, h)
                    ok &= present[column]
                keys = tf.bitcast(hashed, tf.int64).numpy()
                out[name] = (keys[ok], rows[name].numpy()[ok])
            else:
                column = self.config.column_of(feat)
                ok = present[column]
                out[name] = (_identity(raw[column])[ok], rows[name].numpy()[ok])
        return out


def table_ids(pipeline, shards: int, batch_rows: int = 65536) -> list[TableIds]:
    """Counts the ids of every table over the planned rows of ``pipeline``.

    Args:
      pipeline: A planned split (:func:`recsys_dist.data.input_fn.prepare_input`); its
        features, column types and planned rows are read.
      shards: Parameter servers (a dynamic table's capacity is per shard).
      batch_rows: Rows read and transformed at once.

    Returns:
      One :class:`TableIds` per table with ids (bucketized numerics alone are not ids),
      in the feature config's table order.
    """
    scanner = _Scanner(pipeline.transform)
    seen = {name: _Distinct() for name in scanner.features}
    rows = 0
    if scanner.features:
        for batch in _planned_batches(pipeline.plan, scanner.columns, batch_rows):
            rows += batch.num_rows
            for name, (keys, ids) in scanner(batch).items():
                seen[name].add(keys, ids)
    else:
        rows = pipeline.plan.total_rows
    config = scanner.config
    report = []
    for table, spec in config.tables.items():
        names = [n for n in scanner.features if config.features[n].table == table]
        if not names:
            continue
        for name in names:
            seen[name].flush()
        lookups = sum(int(seen[n].counts.sum()) for n in names)
        # an id read by several features of the table (a history and its candidate) is
        # one id in one row
        keys, first, inverse = np.unique(np.concatenate([seen[n].keys for n in names]),
                                         return_index=True, return_inverse=True)
        distinct = len(keys)
        if spec.dynamic:
            report.append(TableIds(table, True, rows, lookups, distinct, distinct, 0,
                                   capacity=spec.capacity_per_shard * shards))
            continue
        table_rows = np.concatenate([seen[n].rows for n in names])[first]
        counts = np.bincount(inverse.reshape(-1), weights=np.concatenate(
            [seen[n].counts for n in names]), minlength=distinct).astype(np.int64)
        used, inverse, ids_per_row = np.unique(table_rows, return_inverse=True,
                                               return_counts=True)
        shared = int(counts[ids_per_row[inverse.reshape(-1)] > 1].sum())
        report.append(TableIds(table, False, rows, lookups, distinct, len(used), shared,
                               table_rows=spec.rows,
                               vocabulary=all(n in config.vocabularies for n in names)))
    return report
