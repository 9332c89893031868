"""Scoring every row of a split exactly once on the cluster.

The coordinator hands out the split's items (row ranges), one per closure, like
training does. A closure reads its item in-graph on the worker, runs the model with
``training=False`` and returns the rows' logits, labels, weights, row ids and any
pass-through columns to the coordinator. Only a closure that finished returns
anything, and ``ClusterCoordinator`` re-runs a killed worker's closure elsewhere, so
each row is scored exactly once even when a worker dies; the coordinator also checks
every item came back with all its rows.

Outputs stream to a callback item by item, so the coordinator holds one item at a
time (plus what the callback keeps).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf

from recsys_dist.cluster.dispatch import check_item_rows, each_item
from recsys_dist.cluster.failures import cluster_failures_as_cluster_lost
from recsys_dist.cluster.mirrored import settle_replica_local
from recsys_dist.cluster.replicas import replica_slice
from recsys_dist.data.input_fn import InputPipeline
from recsys_dist.data.read_pass import worker_errors_as_data_errors


def _concat_replicas(strategy, value):
    parts = strategy.experimental_local_results(value)
    return parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)


def predict_split(
    strategy,
    coordinator,
    num_workers: int,
    model,
    pipeline: InputPipeline,
    labels: list[str],
    on_item: Callable[[dict], None],
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Scores every row of ``pipeline``'s plan once; returns the rows scored.

    Args:
      strategy, coordinator: The cluster.
      num_workers: Workers (closures in flight are twice that).
      model: A model built under ``strategy`` (called with ``training=False``).
      pipeline: The planned split.
      labels: Labels the model predicts.
      on_item: Called on the coordinator with each finished item's numpy arrays:
        ``{"row", "valid", "labels": {..}, "logits": {..}, "extra": {..}, "keep": {..}}``.
      progress: Called with (rows scored, total rows) after each item.

    Raises:
      DataError: bad data on a worker, or an item came back short.
      ClusterLost: a parameter server was lost.
    """
    items = pipeline.scoring_items()
    total_rows = sum(item.rows for item in items)
    settle_replica_local(strategy, model.variables)

    @tf.autograph.experimental.do_not_convert  # plain TensorFlow (see Trainer._replica_step)
    def replica_predict(batch):
        batch = replica_slice(batch)
        logits = model(batch["features"], training=False)
        return {
            "row": batch["row"],
            "valid": batch["valid"],
            "labels": batch["labels"],
            "logits": {n: logits[n] for n in labels},
            "extra": batch["extra"],
            "keep": batch["keep"],
        }

    predict_item = _make_predict_item(strategy, pipeline, replica_predict)

    with worker_errors_as_data_errors(), cluster_failures_as_cluster_lost():
        done = 0
        for item, result in each_item(coordinator, predict_item, items, 2 * num_workers):
            result = tf.nest.map_structure(np.asarray, result)
            check_item_rows(pipeline.plan.files, item, len(result["row"]), "scored")
            on_item(result)
            done += item.rows
            if progress is not None:
                progress(done, total_rows)
        coordinator.join()
    return done


def _make_predict_item(strategy, pipeline: InputPipeline, replica_predict):
    """``predict_item(file, start, stop, stride)``: one item's outputs, concatenated over
    batches."""

    @tf.function
    def predict_item(file_index, start, stop, stride):
        dataset = pipeline.item_dataset(
            file_index,
            start,
            stop,
            training=False,
            batch_size=pipeline.scoring_batch_size,
            stride=stride,
        )
        iterator = iter(dataset)
        first = strategy.run(replica_predict, args=(next(iterator),))
        flat_first = [_concat_replicas(strategy, t) for t in tf.nest.flatten(first)]
        arrays = [
            tf.TensorArray(t.dtype, size=0, dynamic_size=True, infer_shape=False).write(0, t)
            for t in flat_first
        ]
        for batch in iterator:
            out = strategy.run(replica_predict, args=(batch,))
            flat = [_concat_replicas(strategy, t) for t in tf.nest.flatten(out)]
            arrays = [a.write(a.size(), t) for a, t in zip(arrays, flat)]
        return tf.nest.pack_sequence_as(first, [a.concat() for a in arrays])

    return predict_item
