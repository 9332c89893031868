"""One pass over a split on the cluster, read the way its command reads it (``data read``).

The coordinator cuts the split into the items training hands out
(``InputPipeline.training_items``), or for a split that is scored the items evaluation
hands out (``InputPipeline.scoring_items``), and hands them to the workers through the
dispatcher training and scoring use (:mod:`recsys_dist.cluster.dispatch`): two closures
per worker in flight, each item to whichever worker is free. A closure reads its item
with ``InputPipeline.item_dataset`` as a training closure does (rows shuffled) or as a
scoring one does (larger batches, in order), and returns the rows it read, those skipped
as bad, the worker that read them and, for ``--check``, their row ids. Each item must
come back with the rows its footer holds (:func:`~recsys_dist.cluster.dispatch.check_item_rows`,
as in training); :func:`~recsys_dist.data.read_pass.check_exactly_once` then checks the row
ids against the plan.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import tensorflow as tf

from recsys_dist.cluster.dispatch import check_item_rows, each_item
from recsys_dist.data.input_fn import InputPipeline
from recsys_dist.data.read_pass import ReadPassResult, worker_errors_as_data_errors


def read_split(
    pipeline: InputPipeline,
    coordinator,
    num_workers: int,
    steps_per_call: int,
    *,
    scoring: bool = False,
    collect_rows: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ReadPassResult:
    """Reads every item of ``pipeline`` once on the workers behind ``coordinator``.

    Args:
      pipeline: The planned split.
      coordinator: A ``ClusterCoordinator``, or a ``SynchronousCoordinator`` (one
        process: every row counts as worker 0's).
      num_workers: Workers (closures in flight are twice that).
      steps_per_call: ``train.steps_per_call``: an item is that many batches at most.
      scoring: Read as evaluation reads (its items and batches), not as training does.
      collect_rows: Also return every row id (for the exactly-once check).
      progress: Called with (rows read, total rows) after each item.

    Raises:
      DataError: bad data on a worker (the message names the file and column), or an
        item came back with another number of rows than its footer holds.
      StorageError: storage failed a worker's read.
    """
    items = pipeline.scoring_items() if scoring else pipeline.training_items(steps_per_call)
    total = sum(item.rows for item in items)
    read_item = _make_read_item(
        pipeline, collect_rows, on_cluster=_is_cluster(coordinator), scoring=scoring
    )
    rows = skipped = 0
    per_worker = [0] * num_workers
    collected: list[np.ndarray] = []
    start = time.perf_counter()
    with worker_errors_as_data_errors():
        for item, (n, bad, ids, worker) in each_item(
            coordinator, read_item, items, 2 * num_workers
        ):
            check_item_rows(pipeline.plan.files, item, int(n), "read")
            rows += int(n)
            skipped += int(bad)
            per_worker[int(worker)] += int(n)
            if collect_rows:
                collected.append(np.asarray(ids))
            if progress is not None:
                progress(rows, total)
        coordinator.join()
    seconds = time.perf_counter() - start
    row_ids = None
    if collect_rows:
        row_ids = np.concatenate(collected) if collected else np.zeros([0], np.int64)
    return ReadPassResult(rows, skipped, per_worker, seconds, row_ids)


def _is_cluster(coordinator) -> bool:
    return isinstance(coordinator, tf.distribute.experimental.coordinator.ClusterCoordinator)


def _make_read_item(pipeline: InputPipeline, collect_rows: bool, on_cluster: bool, scoring: bool):
    """``read_item(file, start, stop, stride) -> (rows, rows skipped, row ids, worker)``."""
    batch_size = pipeline.scoring_batch_size if scoring else pipeline.spec.batch_size

    @tf.function
    def read_item(file_index, start, stop, stride):
        row_ids = tf.TensorArray(
            tf.int64,
            size=0,
            dynamic_size=True,
            infer_shape=False,
            element_shape=tf.TensorShape([None]),
        )
        rows = tf.constant(0, tf.int64)
        invalid = tf.constant(0.0, tf.float32)
        # The same dataset and loop of batches as a training closure (train/async_runner.py)
        # or a scoring one (evaluation/predict.py).
        iterator = iter(
            pipeline.item_dataset(
                file_index,
                start,
                stop,
                training=not scoring,
                batch_size=batch_size,
                stride=stride,
            )
        )
        item_rows = (stop - start + stride - 1) // stride
        for step in tf.range((item_rows + batch_size - 1) // batch_size):
            optional = iterator.get_next_as_optional()
            if not optional.has_value():
                break
            batch = optional.get_value()
            rows += tf.size(batch["row"], out_type=tf.int64)
            invalid += tf.reduce_sum(1.0 - batch["valid"])
            if collect_rows:
                row_ids = row_ids.write(tf.cast(step, tf.int32), batch["row"])
        ids = row_ids.concat() if collect_rows else tf.zeros([0], tf.int64)
        if on_cluster:
            worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        else:
            worker = tf.constant(0)
        return rows, tf.cast(tf.round(invalid), tf.int64), ids, worker

    return read_item
