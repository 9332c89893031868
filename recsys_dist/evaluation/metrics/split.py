"""Every metric of a whole split (:func:`compute_metrics`), its ROC curves (:func:`curves`), and
:func:`json_safe`, which makes results JSON-serialisable."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from recsys_dist.evaluation.metrics.checks import (
    as_1d,
    check_groups,
    check_labels,
    check_length,
    check_positive_int,
    check_scores,
    check_weights,
)
from recsys_dist.evaluation.metrics.collect import EvalData
from recsys_dist.evaluation.metrics.loss import (
    calibration_unchecked,
    normalized_entropy_from_logloss,
)
from recsys_dist.evaluation.metrics.numerics import (
    auc_unchecked,
    sigmoid,
    softplus_loss,
    weighted_mean,
)
from recsys_dist.evaluation.metrics.ranking import gauc_unchecked, roc_curve_unchecked
from recsys_dist.evaluation.metrics.slices import assign_slices, slice_metrics_unchecked


def json_safe(value: Any) -> Any:
    """Converts numpy scalars to Python ones and nan/inf to None, recursively."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return [json_safe(v) for v in value.tolist()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def _data_label(data: EvalData, label: str) -> tuple[np.ndarray, np.ndarray]:
    if label not in data.labels or label not in data.logits:
        raise ValueError(f"label {label!r} is not in the data; it has {sorted(data.labels)}")
    y = check_labels(data.labels[label], f"labels[{label!r}]")
    check_length(y, f"labels[{label!r}]", data.rows, "row_ids")
    return y, check_scores(data.logits[label], f"logits[{label!r}]", data.rows, "row_ids")


def _data_weights(data: EvalData) -> np.ndarray | None:
    w = check_weights(data.weights, data.rows, "row_ids")
    return None if w is None or (w == 1.0).all() else w  # unit weights take the fast path


def _check_data(data: EvalData, label_names: Sequence[str]) -> None:
    if not isinstance(data, EvalData):
        raise ValueError(f"data must be an EvalData, got {type(data).__name__}")
    if data.rows == 0:
        raise ValueError("data has no rows; expected at least one")
    if isinstance(label_names, str) or not label_names:
        raise ValueError(
            f"label_names must be a non-empty list of label names, got {label_names!r}"
        )


def compute_metrics(
    data: EvalData,
    label_names: Sequence[str],
    slice_columns: Sequence[str] = (),
    bins: int = 20,
    max_slices: int = 20,
) -> dict:
    """Every metric of a split, as a JSON-serialisable dict (nan becomes None).

    Args:
      data: The collected outputs (:meth:`EvalAccumulator.finish`).
      label_names: Labels to evaluate.
      slice_columns: Slice columns of ``data.slices`` to break the metrics down by.
      bins: Calibration bins.
      max_slices: Most slices per column before the rest merge into ``"(other)"``.

    Returns:
      ``{"rows", "weight", "labels": {label: {"auc", "logloss", "normalized_entropy", "ctr",
      "predicted_ctr", "calibration", "gauc" (with groups), "slices": {column: [...]},
      "oracle": {"auc", "logloss", "normalized_entropy"} (with oracle logits)}}}``.

    Raises:
      ValueError: On empty data, unknown labels or slice columns, or malformed columns.
    """
    _check_data(data, label_names)
    bins = check_positive_int(bins, "bins")
    max_slices = check_positive_int(max_slices, "max_slices")
    rows = data.rows
    weights = _data_weights(data)
    groups = None if data.groups is None else check_groups(data.groups, rows, "row_ids")
    slice_ids = {}
    for column in slice_columns:
        if column not in data.slices:
            raise ValueError(
                f"slice column {column!r} is not in the data; it has {sorted(data.slices)}"
            )
        values = as_1d(data.slices[column], f"slices[{column!r}]")
        check_length(values, f"slices[{column!r}]", rows, "row_ids")
        slice_ids[column] = assign_slices(values, max_slices, data.slice_vocab.get(column))
    result: dict[str, Any] = {
        "rows": rows,
        "weight": float(rows if weights is None else weights.sum()),
        "labels": {},
    }
    for label in label_names:
        y, x = _data_label(data, label)
        predicted = sigmoid(x)
        loss = softplus_loss(y, x)
        entry = _model_metrics(y, x, loss, weights)
        entry["ctr"] = weighted_mean(y, weights)
        entry["predicted_ctr"] = weighted_mean(predicted, weights)
        entry["calibration"] = calibration_unchecked(y, predicted, weights, bins)
        if groups is not None:
            entry["gauc"] = gauc_unchecked(y, x, groups, weights)
        entry["slices"] = {
            column: slice_metrics_unchecked(y, x, predicted, loss, weights, *ids)
            for column, ids in slice_ids.items()
        }
        if label in data.oracle_logits:
            oracle = check_scores(
                data.oracle_logits[label], f"oracle_logits[{label!r}]", rows, "row_ids"
            )
            entry["oracle"] = _model_metrics(y, oracle, softplus_loss(y, oracle), weights)
        result["labels"][label] = entry
    return json_safe(result)


def _model_metrics(
    labels: np.ndarray, logits: np.ndarray, loss: np.ndarray, weights: np.ndarray | None
) -> dict:
    mean_loss = weighted_mean(loss, weights)
    return {
        "auc": auc_unchecked(labels, logits, weights),
        "logloss": mean_loss,
        "normalized_entropy": normalized_entropy_from_logloss(
            mean_loss, weighted_mean(labels, weights)
        ),
    }


def curves(data: EvalData, label_names: Sequence[str], max_points: int = 500) -> dict:
    """ROC curves for the report's plots (not part of metrics.json).

    Returns:
      ``{label: {"model": {"fpr", "tpr", "auc"}, "oracle": {...} (with oracle logits)}}``
      with the points as lists of floats (empty when a class is missing).
    """
    _check_data(data, label_names)
    max_points = check_positive_int(max_points, "max_points", 2)
    weights = _data_weights(data)
    result = {}
    for label in label_names:
        y, x = _data_label(data, label)
        models = {"model": x}
        if label in data.oracle_logits:
            models["oracle"] = check_scores(
                data.oracle_logits[label], f"oracle_logits[{label!r}]", data.rows, "row_ids"
            )
        result[label] = {}
        for name, scores in models.items():
            fpr, tpr = roc_curve_unchecked(y, scores, weights, max_points)
            result[label][name] = {
                "fpr": fpr.tolist(),
                "tpr": tpr.tolist(),
                "auc": auc_unchecked(y, scores, weights),
            }
    return json_safe(result)
