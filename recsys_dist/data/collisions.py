"""How many distinct ids each embedding table sees, and how often hashed ids share a row.

``recsys-dist validate --scan`` reports it per table (:func:`table_ids`). An id is a raw
value of a feature, as its kind says (``scan_ids`` in :mod:`recsys_dist.features.kinds`): a
categorical's column value, each element of a multi_categorical's list (or each token of
its delimited string, the part before the weight separator of a weighted one), a cross's
tuple of input values, each of a sequence's ``max_length`` most recent ids. One value
read by two features of a table (a history and its candidate) is one id. Its row is what
:class:`~recsys_dist.features.transforms.FeatureTransform` maps it to, so hashing,
vocabularies and their OOV buckets count exactly as in training. Nulls (which read the
feature's missing row) are no ids; bucketized numerics are not counted.

The share counts lookups: a row of a single-valued feature is one lookup, a
multi-valued row one per id it keeps (a multi_categorical's first ``max_length``, a
sequence's most recent ones). A lookup is shared when its id's table row holds more than
one distinct id of the scanned data.

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

from recsys_dist import hashing, storage_io
from recsys_dist.data.schema_check import split_read_dtype
from recsys_dist.features.config import FeatureConfig
from recsys_dist.features.transforms import FeatureTransform

#: A hashed table whose shared lookups are above this share gets a suggestion.
SHARED_WARN = 0.01
#: ``validate`` and a model dir's first ``train`` warn about a hashed table whose lookups
#: share a row at least this often in a sample (:func:`collision_warnings`).
SHARED_ALERT = 0.05
#: Rows the sample of :func:`collision_warnings` reads (the first planned rows).
SAMPLE_ROWS = 100_000


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
            lines = [
                head + f"dynamic, {self.distinct_ids:,} distinct ids (capacity {self.capacity:,})"
            ]
            if self.distinct_ids > self.capacity:
                lines.append(
                    f"warning  dynamic table {self.table} would be full: "
                    f"{self.distinct_ids:,} distinct ids > capacity "
                    f"{self.capacity:,}; raise its capacity_per_shard"
                )
            return lines
        text = head + f"{self.distinct_ids:,} distinct ids in {self.rows:,} rows"
        if self.lookups != self.rows:
            text += f" ({self.lookups:,} lookups)"
        # (compared as printed, so "1.0%" never comes with a suggestion)
        if round(self.shared * 100, 1) > SHARED_WARN * 100:
            advice = (
                "extend the vocabulary or raise oov_buckets"
                if self.vocabulary
                else f"consider kind: dynamic or rows >= {_suggested_rows(self.distinct_ids):,}"
            )
            return [text + f"; {self.shared:.1%} of lookups share a row with another id: " + advice]
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
        self._pending.append((keys.astype(np.int64, copy=False), rows.astype(np.int64, copy=False)))
        self._pending_size += len(keys)
        if self._pending_size >= self._flush_at:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        keys = np.concatenate([self.keys] + [k for k, _ in self._pending])
        rows = np.concatenate([self.rows] + [r for _, r in self._pending])
        counts = np.concatenate(
            [self.counts] + [np.ones(len(k), np.int64) for k, _ in self._pending]
        )
        self._pending, self._pending_size = [], 0
        self.keys, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        self.rows = rows[first]
        self.counts = np.bincount(
            inverse.reshape(-1), weights=counts, minlength=len(self.keys)
        ).astype(np.int64)


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


def planned_batches(plan, columns: list[str], batch_rows: int):
    """Record batches (only planned rows) of ``columns`` over the plan's files."""
    for file_index, spans in _row_ranges(plan).items():
        path = plan.files[file_index]
        with storage_io.open_file(path) as handle:
            offset = 0
            for batch in pq.ParquetFile(handle).iter_batches(
                batch_size=batch_rows, columns=columns
            ):
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


def _tokens(
    array: pa.Array,
    read_dtype: str,
    separator: str,
    max_length: int,
    newest_last: bool,
    weight_separator: str | None,
) -> tf.Tensor:
    """The ids a multi-valued feature looks up in a batch, nulls and empty tokens dropped,
    the first ``max_length`` of each row kept (the last ones with ``newest_last``)."""
    dtype, is_list = split_read_dtype(read_dtype)
    if is_list:
        lengths = pc.list_value_length(array).fill_null(0).to_numpy(zero_copy_only=False)
        flat = array.flatten()
        rowids = np.repeat(np.arange(len(array)), lengths)
        keep = flat.is_valid().to_numpy(zero_copy_only=False)
        tokens, _ = _scalar(flat, dtype)
    else:
        text, _ = _scalar(array, "string")
        split = tf.strings.split(text, separator)
        tokens = split.flat_values
        rowids = split.value_rowids().numpy()
        keep = tf.strings.length(tokens).numpy() > 0
        if weight_separator is not None:
            tokens = tf.strings.split(tokens, weight_separator, maxsplit=1)
            tokens = tokens.to_tensor(default_value="", shape=[None, 2])[:, 0]
    kept_rows = rowids[keep]
    # position of each kept id among its row's kept ids (rowids are sorted)
    first = np.searchsorted(kept_rows, kept_rows, side="left")
    within = np.arange(len(kept_rows)) - first < max_length
    if newest_last:  # a history keeps its last ids
        last = np.searchsorted(kept_rows, kept_rows, side="right")
        within = last - np.arange(len(kept_rows)) <= max_length
    return tf.gather(tokens, np.flatnonzero(keep)[within])


class _Batch:
    """One record batch as a feature kind's ``scan_ids`` reads it
    (:class:`~recsys_dist.features.kinds.IdScan`)."""

    def __init__(self, scanner: _Scanner, batch: pa.RecordBatch):
        self.config = scanner.config
        self._scanner, self._batch = scanner, batch
        self._columns: dict[str, tuple[tf.Tensor, np.ndarray]] = {}
        self._rows: dict[str, tf.Tensor] | None = None

    def column(self, column: str) -> tuple[tf.Tensor, np.ndarray]:
        if column not in self._columns:
            self._columns[column] = _scalar(
                self._batch.column(column), self._scanner.dtypes[column]
            )
        return self._columns[column]

    def tokens(
        self,
        column: str,
        separator: str,
        max_length: int,
        newest_last: bool = False,
        weight_separator: str | None = None,
    ) -> tf.Tensor:
        return _tokens(
            self._batch.column(column),
            self._scanner.dtypes[column],
            separator,
            max_length,
            newest_last,
            weight_separator,
        )

    def rows(self, name: str) -> np.ndarray:
        if self._rows is None:
            single = self._scanner.single
            if single is None:
                raise ValueError(f"feature {name!r} is multi-valued; its rows are its own")
            raw, present = {}, {}
            for column in single.columns:
                raw[column], valid = self.column(column)
                present[column] = tf.constant(valid)
            self._rows = single(raw, tf.constant("scan"), tf.constant(0, tf.int64), present)[0]
        return self._rows[name].numpy()

    def prepared(self, name: str):
        return self._scanner.prepared.get(name)

    def identity(self, values: tf.Tensor) -> np.ndarray:
        return _identity(values)


class _Scanner:
    """Maps one batch's raw columns to (identity keys, table rows) per feature, as each
    feature's kind counts them (``scan_ids``)."""

    def __init__(self, transform: FeatureTransform):
        self.config: FeatureConfig = transform.config
        self.dtypes = transform.column_dtypes
        features = self.config.features
        self.features = [
            n for n in transform.feature_names if features[n].scan_columns(self.config)
        ]
        # single-valued features read the rows the transform gives them
        single = [n for n in self.features if not features[n].multi_valued]
        self.single = (
            FeatureTransform(self.config, [], self.dtypes, "skip", single) if single else None
        )
        self.prepared = {
            n: p for n in self.features if (p := features[n].prepare(self.config)) is not None
        }
        self.columns = list(
            dict.fromkeys(c for n in self.features for c in features[n].scan_columns(self.config))
        )

    def __call__(self, batch: pa.RecordBatch) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        view = _Batch(self, batch)
        return {name: self.config.features[name].scan_ids(view) for name in self.features}


def table_ids(
    pipeline, shards: int, batch_rows: int = 65536, max_rows: int | None = None
) -> list[TableIds]:
    """Counts the ids of every table over the planned rows of ``pipeline``.

    Args:
      pipeline: A planned split (:func:`recsys_dist.data.input_fn.prepare_input`); its
        features, column types and planned rows are read.
      shards: Parameter servers (a dynamic table's capacity is per shard).
      batch_rows: Rows read and transformed at once.
      max_rows: Read only the first this many planned rows (in file order); None: all.

    Returns:
      One :class:`TableIds` per table with ids (bucketized numerics alone are not ids),
      in the feature config's table order.
    """
    scanner = _Scanner(pipeline.transform)
    seen = {name: _Distinct() for name in scanner.features}
    rows = 0
    if scanner.features:
        for batch in planned_batches(pipeline.plan, scanner.columns, batch_rows):
            if max_rows is not None and rows + batch.num_rows > max_rows:
                batch = batch.slice(0, max_rows - rows)
            rows += batch.num_rows
            for name, (keys, ids) in scanner(batch).items():
                seen[name].add(keys, ids)
            if max_rows is not None and rows >= max_rows:
                break
    else:
        rows = pipeline.plan.total_rows
    config = scanner.config
    report = []
    for table, spec in config.tables.items():
        names = [n for n in scanner.features if config.features[n].table_name == table]
        if not names:
            continue
        for name in names:
            seen[name].flush()
        lookups = sum(int(seen[n].counts.sum()) for n in names)
        # an id read by several features of the table (a history and its candidate) is
        # one id in one row
        keys, first, inverse = np.unique(
            np.concatenate([seen[n].keys for n in names]), return_index=True, return_inverse=True
        )
        distinct = len(keys)
        if spec.dynamic:
            report.append(
                TableIds(
                    table,
                    True,
                    rows,
                    lookups,
                    distinct,
                    distinct,
                    0,
                    capacity=spec.capacity_per_shard * shards,
                )
            )
            continue
        table_rows = np.concatenate([seen[n].rows for n in names])[first]
        counts = np.bincount(
            inverse.reshape(-1),
            weights=np.concatenate([seen[n].counts for n in names]),
            minlength=distinct,
        ).astype(np.int64)
        used, inverse, ids_per_row = np.unique(table_rows, return_inverse=True, return_counts=True)
        shared = int(counts[ids_per_row[inverse.reshape(-1)] > 1].sum())
        report.append(
            TableIds(
                table,
                False,
                rows,
                lookups,
                distinct,
                len(used),
                shared,
                table_rows=spec.rows,
                vocabulary=all(n in config.vocabularies for n in names),
            )
        )
    return report


#: Tables a summary line names before it says how many more there are.
NAMED_TABLES = 5
#: Where a collision warning points: the page of ``validate`` and its ``--scan``.
SCAN_DOC = "docs/cli.md#recsys-dist-validate"


def collision_warnings(
    pipeline, shards: int, max_rows: int = SAMPLE_ROWS, alert: float = SHARED_ALERT
) -> list[str]:
    """At most two ``warning`` lines for the tables of ``pipeline`` that a sample of its
    first ``max_rows`` rows shows too small: one naming every hashed table whose lookups
    share a row with another id at least ``alert`` of the time (with its share, the most
    shared first), one naming every dynamic table the sample alone would fill. Each line
    points to ``validate --scan``, whose ``ids`` line per table gives the fix.

    A sample sees fewer distinct ids than the whole split, so its shares are lower
    bounds: a table named here is at least that shared (``validate --scan`` counts every
    row).

    Example::

        for line in collision_warnings(prepare_input(config, "train", 1), config.cluster.ps):
            print(line)
    """
    tables = table_ids(pipeline, shards, max_rows=max_rows)
    if not tables:
        return []
    rows = tables[0].rows
    sample = f"the first {rows:,} rows" if rows < pipeline.plan.total_rows else f"all {rows:,} rows"
    crowded = sorted(
        (t for t in tables if not t.dynamic and t.shared >= alert), key=lambda t: -t.shared
    )
    full = sorted(
        (t for t in tables if t.dynamic and t.distinct_ids > t.capacity),
        key=lambda t: -t.distinct_ids / t.capacity,
    )
    lines = []
    if crowded:
        named = _named([f"{t.table} {t.shared:.1%}" for t in crowded])
        lines.append(
            f"warning  {_count(len(crowded), 'hashed table')}: {alert:.0%} or more of "
            f"{'its' if len(crowded) == 1 else 'their'} lookups in {sample} share a row "
            f"with another id ({named}), which costs quality; recsys-dist validate --scan "
            f"gives each table's fix ({SCAN_DOC})"
        )
    if full:
        named = _named(
            [f"{t.table} {t.distinct_ids:,} ids > capacity {t.capacity:,}" for t in full]
        )
        lines.append(
            f"warning  {_count(len(full), 'dynamic table')} would be full with the ids of "
            f"{sample} alone ({named}): raise capacity_per_shard; recsys-dist validate "
            f"--scan counts every row ({SCAN_DOC})"
        )
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("s" if n != 1 else "")


def _named(items: list[str]) -> str:
    """The first :data:`NAMED_TABLES` of ``items``, and how many more."""
    shown = ", ".join(items[:NAMED_TABLES])
    more = len(items) - NAMED_TABLES
    return shown + (f" and {more} more" if more > 0 else "")
