"""Offline evaluation of a model on a planned split: score every row once, then metrics.

Scoring runs on the cluster (:func:`predict.predict_split`); the per-row outputs are
kept compactly on the coordinator (:class:`metrics.EvalAccumulator`) and the metrics
are exact (sorted, not thresholded): AUC, GAUC, logloss, normalised entropy,
calibration, slices, and the oracle's AUC and logloss when its logit is in the data.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from recsys_dist import hashing
from recsys_dist.checkpoint.restore import restore_model
from recsys_dist.checkpoint.signature import saved_dynamic_shards
from recsys_dist.cluster.mirrored import SynchronousCoordinator, mirrored_strategy
from recsys_dist.cluster.placement import placement_for
from recsys_dist.cluster.runtime import Runtime
from recsys_dist.errors import DataError
from recsys_dist.evaluation.metrics import EvalAccumulator, EvalData, compute_metrics
from recsys_dist.evaluation.predict import predict_split
from recsys_dist.models.zoo import build_from_config


def evaluate_on_one_device(
    config, saved, pipeline, labels: list[str], oracle_columns: dict[str, str]
) -> dict:
    """The metrics of checkpoint ``saved`` on ``pipeline``, scored by this process alone on
    one device: the model is built under a one-replica strategy of its own and restored
    from the checkpoint. How a ``multi_worker_mirrored`` chief scores (the other workers
    take no part; ``cluster/collective.py``)."""
    alone = Runtime(mirrored_strategy(1), SynchronousCoordinator(), 1, 0, "mirrored")
    with alone.strategy.scope():
        model = build_from_config(
            config, placement_for(alone.strategy, saved_dynamic_shards(saved))
        )
    restore_model(model, saved, config.file)
    return evaluate_split(alone, model, pipeline, labels, oracle_columns)[0]


def evaluate_split(
    runtime,
    model,
    pipeline,
    labels: list[str],
    oracle_columns: dict[str, str],
    group_column: str | None = None,
    slice_columns: tuple[str, ...] = (),
    progress=None,
    bins: int = 20,
    max_slices: int = 20,
) -> tuple[dict, EvalData]:
    """Scores ``pipeline``'s rows with ``model`` and computes the metrics.

    Args:
      runtime: The connected cluster (its strategy built ``model``).
      model: The model, called with ``training=False``.
      pipeline: The planned split; ``oracle_columns`` values among its extra columns,
        ``group_column`` and ``slice_columns`` among its keep columns.
      labels: The model's labels.
      oracle_columns: Label -> column of the true logit (synthetic data).
      group_column: Column grouping rows for GAUC (e.g. the user id), or None.
      slice_columns: Columns to break metrics down by.
      progress: Called with (rows scored, total rows).
      bins, max_slices: Calibration bins; largest slices reported per column.

    Returns:
      ``(metrics, data)``: the metrics dict and the per-row arrays behind it.

    Raises:
      DataError: the split has no valid rows.
    """
    accumulator = EvalAccumulator()

    def on_item(out: dict) -> None:
        accumulator.add(
            labels={n: out["labels"][n] for n in labels},
            logits={n: out["logits"][n] for n in labels},
            weights=out["valid"],
            row_ids=out["row"],
            groups=_group_ids(out["keep"][group_column]) if group_column else None,
            slices={c: out["keep"][c] for c in slice_columns} or None,
            oracle_logits={n: out["extra"][c] for n, c in oracle_columns.items()} or None,
        )

    predict_split(
        runtime.strategy,
        runtime.coordinator,
        runtime.num_workers,
        model,
        pipeline,
        labels,
        on_item,
        progress,
    )
    data = accumulator.finish()
    if data.rows == 0 or float(np.sum(data.weights)) == 0:
        raise DataError("the evaluation split has no valid rows")
    return compute_metrics(
        data, labels, list(slice_columns), bins=bins, max_slices=max_slices
    ), data


def _group_ids(values: np.ndarray) -> np.ndarray:
    """int64 group keys: integers as they are, strings by the features' 64-bit string
    hash (vectorised; the same on every item)."""
    if values.dtype.kind in "iub":
        return values.astype(np.int64)
    return tf.bitcast(hashing.hash_string(tf.constant(values)), tf.int64).numpy()
