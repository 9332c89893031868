"""The ``recsys-dist evaluate`` job: a checkpoint scored on a split, written as a report.

1. Pick the checkpoint (the newest complete one of ``--model-dir``, or ``--checkpoint``)
   and refuse it if it was written for another model or feature config.
2. Plan the split (``--data PATH`` or ``--dates FROM..TO`` over ``data.path``) and
   score every row once on the cluster with ``training=False``.
3. Compute exact metrics (``evaluation/metrics/``) and write ``metrics.json``,
   ``predictions.parquet`` (row id, labels, logits: what a later ``--baseline`` pairs
   rows with) and a self-contained ``report.html``, then ``metrics.json`` last. The
   output directory (and a baseline) may be local or remote (``s3://``, ``hdfs://``):
   the files go through fsspec (``storage_io``), and a remote checkpoint is downloaded
   before it is read.

With a baseline, the comparison holds the metric deltas and, when the baseline's
per-row predictions on the same rows are available (a baseline model directory, or a
``metrics.json`` next to its ``predictions.parquet``), a paired bootstrap confidence
interval for the AUC delta.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from recsys_dist import storage_io
from recsys_dist.checkpoint.restore import restore_model
from recsys_dist.checkpoint.signature import check_signature, saved_dynamic_shards
from recsys_dist.checkpoint.store import SavedCheckpoint, find_checkpoint
from recsys_dist.cluster.failures import cluster_failures_as_cluster_lost
from recsys_dist.cluster.placement import placement_for
from recsys_dist.cluster.runtime import connect, log_dir_for, prepare_devices
from recsys_dist.config.experiment import ExperimentConfig
from recsys_dist.data.input_fn import prepare_input
from recsys_dist.data.oracle import oracle_candidates, oracle_columns
from recsys_dist.errors import RecsysError
from recsys_dist.evaluation import metrics as M
from recsys_dist.evaluation.evaluate import evaluate_split
from recsys_dist.evaluation.report import write_report
from recsys_dist.models.zoo import build_from_config

PREDICTIONS = "predictions.parquet"
METRICS = "metrics.json"


@dataclasses.dataclass(frozen=True)
class EvaluationResult:
    """What an evaluation wrote: the metrics and the report's path."""

    metrics: dict
    report: str
    out_dir: str
    rows_per_second: float


def _restored_model(config: ExperimentConfig, runtime, saved: SavedCheckpoint):
    with runtime.strategy.scope():
        model = build_from_config(
            config, placement_for(runtime.strategy, saved_dynamic_shards(saved))
        )
    restore_model(model, saved, config.file)
    return model


def _save_predictions(path: str, data: M.EvalData, labels: list[str]) -> None:
    columns = {"row_id": data.row_ids, "weight": data.weights}
    for label in labels:
        columns[f"label_{label}"] = data.labels[label]
        columns[f"logit_{label}"] = data.logits[label]
    with storage_io.open_file(path, "wb") as handle:
        pq.write_table(pa.table(columns), handle)


def _load_predictions(path: str) -> dict[str, np.ndarray]:
    with storage_io.open_file(path) as handle:
        table = pq.read_table(handle)
    return {name: table.column(name).to_numpy() for name in table.column_names}


def _load_evaluation(
    metrics_path: str, labels: list[str]
) -> tuple[dict, dict[str, np.ndarray], np.ndarray | None]:
    """(metrics, label -> logits, row ids) of an evaluate output (its metrics.json); the
    per-row parts are empty when no predictions.parquet lies next to it."""
    text = storage_io.read_text(metrics_path)
    try:
        metrics = json.loads(text)
    except ValueError as exc:
        raise RecsysError(f"{metrics_path}: not valid JSON ({exc})") from None
    predictions = posixpath.join(posixpath.dirname(metrics_path), PREDICTIONS)
    if not storage_io.exists(predictions):
        return metrics, {}, None
    columns = _load_predictions(predictions)
    logits = {label: columns[f"logit_{label}"] for label in labels if f"logit_{label}" in columns}
    return metrics, logits, columns["row_id"]


def _aligned(row_ids: np.ndarray, other_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices pairing rows of two runs by row id; raises if they are not the same rows."""
    a, b = np.argsort(row_ids, kind="stable"), np.argsort(other_ids, kind="stable")
    if len(a) != len(b) or not np.array_equal(row_ids[a], other_ids[b]):
        raise RecsysError(
            "the baseline's predictions cover other rows than this evaluation "
            f"({len(other_ids):,} vs {len(row_ids):,} rows); evaluate both on "
            "the same data to compare them row by row"
        )
    return a, b


def _bootstrap(
    config: ExperimentConfig,
    data: M.EvalData,
    base_logits: dict[str, np.ndarray],
    base_ids: np.ndarray,
) -> dict:
    mine, theirs = _aligned(data.row_ids, base_ids)
    return {
        label: M.paired_bootstrap_auc_delta(
            data.labels[label][mine],
            data.logits[label][mine],
            base_logits[label][theirs],
            weights=data.weights[mine],
            replicates=config.evaluation.bootstrap_replicates,
        )
        for label in config.labels
        if label in base_logits
    }


def _baseline(
    config: ExperimentConfig, baseline: str | None
) -> tuple[SavedCheckpoint | None, str | None]:
    """``(checkpoint, None)`` for a baseline model to score, ``(None, metrics.json path)``
    for a baseline evaluation to compare with, or ``(None, None)``."""
    if baseline is None:
        return None, None
    if baseline.endswith(".json"):
        return None, baseline
    if storage_io.exists(f"{baseline}/{METRICS}") and not storage_io.exists(
        f"{baseline}/checkpoints"
    ):
        return None, f"{baseline}/{METRICS}"
    saved = find_checkpoint(baseline)
    check_signature(saved, config, what=f"{config.file} (baseline {baseline})")
    return saved, None


def _comparison(config: ExperimentConfig, metrics: dict, data: M.EvalData, base: tuple) -> dict:
    """Deltas against the baseline ``(metrics, logits, row ids, description)`` and, when
    the baseline has row ids, the paired bootstrap interval of the AUC delta."""
    base_metrics, base_logits, base_ids, description = base
    boot = _bootstrap(config, data, base_logits, base_ids) if base_ids is not None else None
    return M.build_comparison(description, metrics, base_metrics, boot)


def run_evaluation(
    config: ExperimentConfig,
    model_dir: str,
    out_dir: str,
    *,
    checkpoint: str | None = None,
    baseline: str | None = None,
    progress=None,
) -> EvaluationResult:
    """Evaluates a checkpoint of ``model_dir`` on the config's eval split (a ``--data``
    path: :meth:`~recsys_dist.config.experiment.ExperimentConfig.with_data_path`).

    Raises:
      CheckpointError: no usable checkpoint, or one of another model or feature config.
      DataError: the split is empty or bad, or a slice/group column is missing.
    """
    prepare_devices(config.cluster)
    saved = find_checkpoint(model_dir, checkpoint)
    check_signature(saved, config, what=config.file)
    base_saved, base_metrics_path = _baseline(config, baseline)
    spec = config.evaluation
    keep = {c: f"evaluation.slice_columns ({c})" for c in spec.slice_columns}
    if spec.group_column:
        keep[spec.group_column] = f"evaluation.group_column ({spec.group_column})"
    pipeline = prepare_input(
        config,
        "eval",
        config.cluster.workers,
        optional_extra_columns=oracle_candidates(config.labels),
        keep_columns=keep,
    )
    oracle = oracle_columns(config.labels, pipeline.extra_columns)
    # Fail now, naming the path, rather than after scoring every row.
    storage_io.check_writable(out_dir, "the evaluation report")
    with (
        cluster_failures_as_cluster_lost(),
        connect(
            config.cluster, log_dir_for(out_dir), config.train.embedding_shard_bytes
        ) as runtime,
    ):
        model = _restored_model(config, runtime, saved)
        start = time.perf_counter()
        metrics, data = evaluate_split(
            runtime,
            model,
            pipeline,
            config.labels,
            oracle,
            spec.group_column,
            tuple(spec.slice_columns),
            progress=progress,
            bins=spec.calibration_bins,
            max_slices=spec.max_slices,
        )
        seconds = time.perf_counter() - start
        base = None
        if base_saved is not None:
            base_model = _restored_model(config, runtime, base_saved)
            base_metrics, base_data = evaluate_split(
                runtime,
                base_model,
                pipeline,
                config.labels,
                oracle,
                spec.group_column,
                tuple(spec.slice_columns),
                bins=spec.calibration_bins,
                max_slices=spec.max_slices,
            )
            base = (base_metrics, base_data.logits, base_data.row_ids, base_saved.directory)
    if base_metrics_path is not None:
        base = (*_load_evaluation(base_metrics_path, config.labels), base_metrics_path)
    comparison = _comparison(config, metrics, data, base) if base is not None else None
    metrics = dict(
        metrics,
        checkpoint=saved.directory,
        step=saved.step,
        data=list(pipeline.plan.files),
        rows_per_second=data.rows / seconds,
    )
    _save_predictions(storage_io.join(out_dir, PREDICTIONS), data, config.labels)
    title = (
        f"{config.model.name} ({', '.join(config.labels)}) at step {saved.step:,} on "
        f"{data.rows:,} rows"
    )
    report = write_report(out_dir, metrics, M.curves(data, config.labels), title, comparison)
    return EvaluationResult(
        metrics | ({"comparison": comparison} if comparison else {}),
        report,
        out_dir,
        data.rows / seconds,
    )
