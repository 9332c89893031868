"""Read one pass of a planned split: on a cluster through ClusterCoordinator, or locally.

On a cluster the coordinator schedules closures that each pull up to
``batches_per_call`` batches from the worker's own iterator with
``get_next_as_optional``, so a worker whose shard is finished returns an empty result
instead of raising ``OutOfRangeError`` (which would cancel every pending closure).
The coordinator stops scheduling once the rows it got back add up to the plan's total.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Callable

import numpy as np
import tensorflow as tf
from tensorflow.python.distribute.coordinator.cluster_coordinator import ClosureInputError

from recsys_dist.data.input_fn import InputPipeline, row_id
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
      rows_per_worker: Rows read by each worker.
      seconds: Wall time of the pass (after the first batch was requested).
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


def _pull(iterator, batches: int, collect_rows: bool):
    """Pulls up to ``batches`` batches; returns (rows, invalid rows, row ids)."""
    row_ids = tf.TensorArray(
        tf.int64, size=0, dynamic_size=True, infer_shape=False, element_shape=tf.TensorShape([None])
    )
    rows = tf.constant(0, tf.int64)
    invalid = tf.constant(0.0, tf.float32)
    for i in tf.range(batches):
        optional = iterator.get_next_as_optional()
        if not optional.has_value():
            break
        batch = optional.get_value()
        rows += tf.size(batch["row"], out_type=tf.int64)
        invalid += tf.reduce_sum(1.0 - batch["valid"])
        if collect_rows:
            row_ids = row_ids.write(i, batch["row"])
    ids = row_ids.concat() if collect_rows else tf.zeros([0], tf.int64)
    return rows, tf.cast(invalid, tf.int64), ids


def read_pass_on_cluster(
    pipeline: InputPipeline,
    strategy,
    coordinator,
    *,
    collect_rows: bool = False,
    batches_per_call: int = 16,
    progress: Callable[[int, int], None] | None = None,
) -> ReadPassResult:
    """Reads one pass of ``pipeline`` on the cluster behind ``coordinator``.

    Args:
      pipeline: Planned for ``strategy``'s number of workers.
      strategy: A ``ParameterServerStrategy``.
      coordinator: Its ``ClusterCoordinator``.
      collect_rows: Also return every row id (for exactly-once checks).
      batches_per_call: Batches each scheduled closure reads.
      progress: Called with (rows so far, total rows) after each wave of closures.

    Raises:
      DataError: a worker hit bad data (the message names the file and column), or the
        workers ran dry before the planned rows arrived.
    """
    plan = pipeline.plan
    iterator = pipeline.per_worker_iterator(strategy, coordinator, training=False)

    @tf.function
    def read_step(iterator):
        rows, invalid, ids = _pull(iterator, batches_per_call, collect_rows)
        worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        return rows, invalid, ids, worker

    with worker_errors_as_data_errors():
        return _read_waves(plan, coordinator, read_step, iterator, collect_rows, progress)


def _read_waves(plan, coordinator, read_step, iterator, collect_rows, progress) -> ReadPassResult:
    total = plan.total_rows
    rows = skipped = 0
    per_worker = [0] * plan.num_workers
    collected: list[np.ndarray] = []
    empty_waves = 0
    start = time.perf_counter()
    while rows < total:
        wave = [
            coordinator.schedule(read_step, args=(iterator,)) for _ in range(2 * plan.num_workers)
        ]
        got = 0
        for remote in wave:
            n, bad, ids, worker = (np.asarray(v) for v in remote.fetch())
            got += int(n)
            per_worker[int(worker)] += int(n)
            skipped += int(bad)
            if collect_rows and ids.size:
                collected.append(ids)
        rows += got
        empty_waves = empty_waves + 1 if got == 0 else 0
        if empty_waves >= 20:
            raise DataError(f"the workers ran out of data after {rows} of {total} planned rows")
        if progress is not None:
            progress(rows, total)
    seconds = time.perf_counter() - start
    ids = (
        np.concatenate(collected)
        if collect_rows and collected
        else (np.zeros([0], np.int64) if collect_rows else None)
    )
    return ReadPassResult(rows, skipped, per_worker, seconds, ids)


def read_pass_local(
    pipeline: InputPipeline, *, worker_index: int = 0, collect_rows: bool = False
) -> ReadPassResult:
    """Reads the units of one worker of the plan in this process (no cluster)."""
    dataset = pipeline.dataset_fn(training=False, worker_index=worker_index)()
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
    per_worker = [0] * pipeline.plan.num_workers
    per_worker[worker_index] = rows
    ids = np.concatenate(collected) if collected else np.zeros([0], np.int64)
    return ReadPassResult(rows, skipped, per_worker, seconds, ids if collect_rows else None)


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
    except ClosureInputError as exc:  # a per-worker dataset could not be built
        original = exc.original_exception
        if isinstance(original, (tf.errors.InvalidArgumentError, tf.errors.NotFoundError)) or (
            isinstance(original, tf.errors.FailedPreconditionError)
            and STORAGE_FAILURE in original.message
        ):
            raise bad_data_error(original) from None
        raise


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


def check_exactly_once(plan: ShardPlan, row_ids: np.ndarray) -> None:
    """Checks that ``row_ids`` holds every row of ``plan`` exactly once.

    Raises:
      DataError: naming how many rows were missed or read twice, with examples.
    """
    expected = np.concatenate(
        [
            np.arange(row_id(u.file, u.start), row_id(u.file, u.stop), dtype=np.int64)
            for u in plan.units
        ]
    )
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
