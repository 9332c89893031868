"""recsys_dist's TensorFlow ops: ``ParquetReadRows``, Parquet read in-graph on Arrow C++,
and the fused feature transforms the input pipeline runs (``HashIntIds``,
``BucketizeRows``, ``DelimitedIds``, ``ListIds``: the same values as the stock ops of
:mod:`recsys_dist.features.transforms`, in one pass each), and the dynamic tables' kernels
(:mod:`recsys_dist.models.dynamic_table`): the admission of ids on a parameter server
(``AdmitIds``), and the keys and vectors of a step between worker and servers
(``RouteKeys``, ``UnrouteRows``, ``RouteRowGrads`` on the worker; ``LiveRows``,
``PackRows``, ``UnpackRowGrads`` on a server).

:func:`load` builds the op library on first use (see :mod:`recsys_dist.ops.build`) and
registers the ops in this process. Every server process loads it before it serves, so a
dataset graph the coordinator sends can run the ops on a worker.

Example:
  >>> cols = read_rows("day.parquet", 0, 1000, {"ad": tf.int64, "tags": tf.int64},
  ...                  ragged={"tags"})
  >>> cols["ad"].values, cols["ad"].valid          # [1000] int64, [1000] bool
  >>> cols["tags"].values, cols["tags"].row_splits  # flat elements, [1001]
"""

from __future__ import annotations

import dataclasses
import threading

import tensorflow as tf

_lock = threading.Lock()
_module = None

OP_NAME = "ParquetReadRows"


def load():
    """Loads (building first if needed) the op library; returns its generated module.

    Raises:
      OpBuildError: no C++ compiler, or the build failed.
    """
    global _module
    with _lock:
        if _module is None:
            from recsys_dist.ops.build import library_path

            _module = tf.load_op_library(library_path(quiet=False))
        return _module


@dataclasses.dataclass(frozen=True)
class Column:
    """One column of a row range, as the op returns it.

    Attributes:
      values: Scalar column: ``[rows]``, nulls as 0 / "" / false. List column: the flat
        elements, null elements as 0 / "".
      valid: One flag per entry of ``values``; false for a null.
      row_splits: List column: ``[rows + 1]`` (a null list is empty); scalar: ``None``.
    """

    values: tf.Tensor
    valid: tf.Tensor
    row_splits: tf.Tensor | None = None

    def ragged(self) -> tf.RaggedTensor:
        """The list column as a ``[rows, None]`` ragged tensor (null elements kept)."""
        return tf.RaggedTensor.from_row_splits(self.values, self.row_splits, validate=False)


# Plain TensorFlow: AutoGraph must not convert it (nor the library loading it calls).
@tf.autograph.experimental.do_not_convert
def read_rows(
    path,
    start,
    stop,
    dtypes: dict[str, tf.DType],
    ragged: set[str] | frozenset[str] = frozenset(),
    stride=1,
) -> dict[str, Column]:
    """Rows ``start, start + stride, ...`` below ``stop`` of the named columns of one
    Parquet file (stride 1: rows ``[start, stop)``).

    Args:
      path: Scalar string tensor or str: local path, ``s3://bucket/key`` or ``hdfs://...``.
      start, stop: Scalar int64 row bounds; ``stop`` past the end is clamped.
      stride: Scalar int64 >= 1, the step between rows read.
      dtypes: Column name -> dtype to read it as (int32, int64, float32, float64, bool,
        string). Integer columns of any width read as int32/int64 (or as floats).
      ragged: Names of ``list<...>`` columns, read as values + row splits.

    Returns:
      Column name -> :class:`Column`.

    Raises:
      tf.errors.InvalidArgumentError: (when run) the file is not Parquet, a column is
        missing or of another type, or a list column is read as a scalar (or the
        reverse); the message names the file and column.
      tf.errors.NotFoundError: (when run) no such file.
    """
    module = load()
    names = list(dtypes)
    values, valid, splits = module.parquet_read_rows(
        path=path,
        start=tf.cast(start, tf.int64),
        stop=tf.cast(stop, tf.int64),
        stride=tf.cast(stride, tf.int64),
        columns=names,
        dtypes=[tf.as_dtype(dtypes[n]) for n in names],
        ragged=[n in ragged for n in names],
        N=len(names),
    )
    # The generated wrapper returns a namedtuple, which tf.data would not unpack.
    return {
        n: Column(values[i], valid[i], splits[i] if n in ragged else None)
        for i, n in enumerate(names)
    }


# ---- fused feature transforms (see feature_transforms.cc) ------------------------------
def hash_int_ids(
    values: tf.Tensor, present: tf.Tensor | None, buckets: list[int], missing_rows: list[int]
) -> tuple[tf.Tensor, tf.Tensor]:
    """``(ids, hashes)`` of ``[K, N]`` int64 ids: ``mix64(id) % buckets[k]``, or
    ``missing_rows[k]`` where ``present`` (``[K, N]`` bool, or None) is false; the
    uint64 ``mix64`` hashes."""
    if present is None:
        present = tf.zeros([0, 0], tf.bool)
    return tuple(
        load().hash_int_ids(
            values=values, present=present, buckets=list(buckets), missing_rows=list(missing_rows)
        )
    )


def bucketize_rows(x: tf.Tensor, edges) -> tf.Tensor:
    """int64 ``[K, N]``: how many of row k's ``edges`` (``[K, W]``, ascending) are <= x."""
    return load().bucketize_rows(x=x, edges=tf.constant(edges, tf.float32))


def delimited_ids(
    strings: tf.Tensor, separator: str, weight_separator: str | None, buckets: int, max_length: int
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """``(ids [N, L], weights [N, L], bad [N])`` of delimited strings such as
    ``"3:0.7|15:0.3"``: the first ``max_length`` non-empty tokens, ids hashed as
    ``tf.strings.to_hash_bucket_fast(id, buckets)``, weight 1 when ``weight_separator``
    is None; ``bad``: a row with a weight that is not a number (it reads 0)."""
    return tuple(
        load().delimited_ids(
            strings=strings,
            separator=separator,
            weight_separator=weight_separator or "",
            buckets=buckets,
            max_length=max_length,
        )
    )


def list_ids(
    values: tf.Tensor,
    row_splits: tf.Tensor,
    valid: tf.Tensor | None,
    weights: tf.RaggedTensor | None,
    weights_valid: tf.Tensor | None,
    buckets: int,
    max_length: int,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """``(ids [N, L], weights [N, L], bad [N])`` of a list column (int64 or string
    values, ``[N + 1]`` row splits): the first ``max_length`` non-null elements, hashed as
    a categorical feature's ids; with a ``weights`` list column (float32 values), each
    element's weight, dropping a null weight, and ``bad`` rows whose two lists differ in
    length (they read no ids)."""
    empty_bool, empty_float = tf.zeros([0], tf.bool), tf.zeros([0], tf.float32)
    empty_splits = tf.zeros([0], tf.int64)
    return tuple(
        load().list_ids(
            values=values,
            row_splits=row_splits,
            valid=valid if valid is not None else empty_bool,
            weights=weights.flat_values if weights is not None else empty_float,
            weights_splits=weights.row_splits if weights is not None else empty_splits,
            weights_valid=weights_valid if weights_valid is not None else empty_bool,
            buckets=buckets,
            max_length=max_length,
        )
    )
