"""Reading a planned split, and what its reads must add up to.

:func:`read_pass_local` reads every row of a plan in this process, through the reader a
worker runs (``validate --scan``). On a cluster, ``data read`` hands the same work items
as training to the workers (``cluster/read_check.py``). Both report a
:class:`ReadPassResult`, checked by :func:`check_exactly_once`; a worker's failure on bad
data or storage becomes a clear error naming the file (:func:`worker_errors_as_data_errors`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

import numpy as np
import tensorflow as tf

from recsys_dist.data import hashed_rows
from recsys_dist.data.input_fn import ROW_FILE_SHIFT, InputPipeline
from recsys_dist.data.shard_plan import ShardPlan
from recsys_dist.errors import DataError, RecsysError, op_error_reason
from recsys_dist.ops import OP_NAME
from recsys_dist.storage_io import StorageError


@dataclasses.dataclass(frozen=True)
class ReadPassResult:
    """What one pass read.

    Attributes:
      rows: Rows read (valid and skipped).
      skipped_rows: Rows marked invalid under ``on_bad_row: skip``.
      rows_per_worker: Rows read by each worker (one entry, this process, for a local
        read).
      seconds: Wall time of the pass.
      row_ids: Every row id read, when collected (see ``input_fn.row_id``).
    """

    rows: int
    skipped_rows: int
    rows_per_worker: list[int]
    seconds: float
    row_ids: np.ndarray | None = None

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("nan")


def read_pass_local(pipeline: InputPipeline, *, collect_rows: bool = False) -> ReadPassResult:
    """Reads every unit of ``pipeline``'s plan in this process (no cluster).

    Raises:
      DataError: bad data (the message names the file and column, or row).
      StorageError: storage failed the read.
    """
    dataset = pipeline.local_dataset(training=False)
    rows = skipped = 0
    collected = []
    start = time.perf_counter()
    with worker_errors_as_data_errors():
        for batch in dataset:
            rows += int(batch["row"].shape[0])
            skipped += int(round(float(tf.reduce_sum(1.0 - batch["valid"]))))
            if collect_rows:
                collected.append(batch["row"].numpy())
    seconds = time.perf_counter() - start
    ids = np.concatenate(collected) if collected else np.zeros([0], np.int64)
    return ReadPassResult(rows, skipped, [rows], seconds, ids if collect_rows else None)


@contextlib.contextmanager
def worker_errors_as_data_errors():
    """Re-raises a bad-data or storage failure from a worker closure as a clear
    :class:`DataError` or :class:`StorageError` naming the file.

    ClusterCoordinator raises a failed closure's error from ``fetch``, or from the next
    ``schedule`` or ``join``; wrap the whole loop so every path gets the same message.
    """
    try:
        yield
    except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError) as exc:
        raise bad_data_error(exc) from None
    except tf.errors.FailedPreconditionError as exc:
        if STORAGE_FAILURE not in exc.message:
            raise
        raise bad_data_error(exc) from None


#: What the Parquet op says when storage failed it (``<uri>: cannot read from storage: ...``).
STORAGE_FAILURE = ": cannot read from storage: "


def bad_data_error(exc: tf.errors.OpError) -> RecsysError:
    """Turns an in-graph bad-data assertion or reader failure into a clear error naming the
    file and the reader's own reason: :class:`DataError` for bad data,
    :class:`StorageError` when storage failed the read (denied, or a transient error
    still there after every retry); a worker that never loaded the Parquet op into a
    clear error saying so."""
    message = exc.message
    if f"Op type not registered '{OP_NAME}'" in message:
        return RecsysError(
            f"a worker cannot run the {OP_NAME} op: its process never loaded recsys_dist's "
            "Parquet op library. Start every worker and parameter server with "
            "`recsys-dist server` (or python -m recsys_dist.cluster.server), which loads it "
            "before serving, or call recsys_dist.ops.load() before starting a "
            "tf.distribute.Server yourself"
        )
    marker = message.find("bad data:")
    if marker >= 0:
        text = message[marker:].split("\n")[0].replace("\\'", "'")
        # (a graph's assertion ends the line with "]", an eager one with '"')
        return DataError(text.removeprefix("bad data: ").rstrip('"] ').strip())
    reason = op_error_reason(message, type(exc).__name__)
    if STORAGE_FAILURE in reason:
        uri, cause = reason.split(STORAGE_FAILURE, 1)
        return StorageError(f"{uri}: cannot read it on a worker: {cause}", cause)
    return DataError(f"reading Parquet failed on a worker: {reason}")


def check_exactly_once(
    plan: ShardPlan, row_ids: np.ndarray, hash_share: tuple[float, float] | None = None
) -> None:
    """Checks that ``row_ids`` holds every row of ``plan`` exactly once (every row that
    ``hash_share`` keeps, when the split has one).

    Raises:
      DataError: naming how many rows were missed or read twice, with examples.
    """
    keys = hashed_rows.file_keys(plan.files) if hash_share is not None else ()
    pieces = []
    for u in plan.units:
        rows = np.arange(u.start, u.stop, dtype=np.int64)
        if hash_share is not None:
            rows = rows[hashed_rows.kept(keys[u.file], rows, hash_share)]
        pieces.append((np.int64(u.file) << ROW_FILE_SHIFT) | rows)
    expected = np.concatenate(pieces) if pieces else np.zeros([0], np.int64)
    got, counts = np.unique(row_ids, return_counts=True)
    twice = got[counts > 1]
    missing = np.setdiff1d(expected, got, assume_unique=True)
    extra = np.setdiff1d(got, expected, assume_unique=True)

    def show(ids: np.ndarray) -> str:
        return ", ".join(f"{plan.files[i >> 32]} row {i & 0xFFFFFFFF}" for i in ids[:3])

    problems = []
    if len(missing):
        problems.append(f"{len(missing)} planned rows never read (e.g. {show(missing)})")
    if len(twice):
        problems.append(f"{len(twice)} rows read more than once (e.g. {show(twice)})")
    if len(extra):
        problems.append(f"{len(extra)} rows read that were not planned (e.g. {show(extra)})")
    if problems:
        raise DataError("exactly-once check failed: " + "; ".join(problems))
