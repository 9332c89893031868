"""Comparing two runs' metrics: per-label deltas and the report's ``comparison`` section."""

from __future__ import annotations

import math
from typing import Any, Mapping

from recsys_dist.evaluation.metrics.split import json_safe


def _delta(new: Any, base: Any) -> float | None:
    if new is None or base is None:
        return None
    value = float(new) - float(base)
    return value if math.isfinite(value) else None


def _lookup(entry: Mapping[str, Any], *path: str) -> Any:
    for key in path:
        if not isinstance(entry, Mapping) or key not in entry:
            return None
        entry = entry[key]
    return entry


def compare(metrics_new: Mapping[str, Any], metrics_base: Mapping[str, Any]) -> dict:
    """Per-label deltas (new - base) of two :func:`compute_metrics` results.

    Returns:
      ``{label: {"auc", "logloss", "normalized_entropy", "gauc", "calibration_ratio"}}`` for
      the labels both have; a delta is None when either side lacks the value.

    Raises:
      ValueError: When an argument is not a metrics dict or no label is shared.
    """
    for name, metrics in (("metrics_new", metrics_new), ("metrics_base", metrics_base)):
        if not isinstance(metrics, Mapping) or not isinstance(metrics.get("labels"), Mapping):
            raise ValueError(f"{name} must be a dict from compute_metrics with a 'labels' key")
    shared = [label for label in metrics_new["labels"] if label in metrics_base["labels"]]
    if not shared:
        raise ValueError(
            f"metrics_new and metrics_base share no label: "
            f"{sorted(metrics_new['labels'])} vs {sorted(metrics_base['labels'])}"
        )
    paths = {
        "auc": ("auc",),
        "logloss": ("logloss",),
        "normalized_entropy": ("normalized_entropy",),
        "gauc": ("gauc", "gauc"),
        "calibration_ratio": ("calibration", "ratio"),
    }
    return {
        label: {
            key: _delta(
                _lookup(metrics_new["labels"][label], *path),
                _lookup(metrics_base["labels"][label], *path),
            )
            for key, path in paths.items()
        }
        for label in shared
    }


def build_comparison(
    baseline: str,
    metrics_new: Mapping[str, Any],
    metrics_base: Mapping[str, Any],
    bootstrap: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict:
    """The ``comparison`` section that :func:`~recsys_dist.evaluation.report.write_report` takes.

    Args:
      baseline: Description of the baseline (e.g. its run directory).
      metrics_new: Metrics of the new model.
      metrics_base: Metrics of the baseline on the same split.
      bootstrap: Optional label -> :func:`paired_bootstrap_auc_delta` result.

    Returns:
      ``{"baseline": str, "labels": {label: {"delta": {...}, "bootstrap": {...}}}}``
      (``bootstrap`` only for the labels that have one).
    """
    labels = {}
    for label, delta in compare(metrics_new, metrics_base).items():
        labels[label] = {"delta": delta}
        if bootstrap and label in bootstrap:
            labels[label]["bootstrap"] = dict(bootstrap[label])
    return json_safe({"baseline": str(baseline), "labels": labels})
