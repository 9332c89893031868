"""Metrics per slice (distinct value of a column such as country or device)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from recsys_dist.evaluation.metrics.checks import (
    as_1d,
    check_labels,
    check_length,
    check_positive_int,
    check_scores,
    check_weights,
)
from recsys_dist.evaluation.metrics.numerics import (
    auc_unchecked,
    int64_offsets,
    sigmoid,
    softplus_loss,
    weighted_mean,
)

OTHER = "(other)"
"""Name of the slice entry that merges the values beyond ``max_slices``."""


def _value_name(value: Any) -> str:
    return str(value.item() if isinstance(value, np.generic) else value)


def _factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(distinct values, inverse, counts)``; O(n) for integers with a small range."""
    if values.dtype.kind in "iu" and len(values):
        low = int(values.min())
        span = int(values.max()) - low
        if span < max(4 * len(values), 1 << 16):
            shifted = int64_offsets(values, low)
            counts = np.bincount(shifted, minlength=span + 1)
            present = np.flatnonzero(counts)
            remap = np.zeros(span + 1, np.intp)
            remap[present] = np.arange(len(present))
            return present + low, remap[shifted], counts[present]
    if values.dtype.kind == "O":
        values = values.astype(str)
    distinct, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    return distinct, inverse.reshape(-1), counts


def assign_slices(
    values: np.ndarray, max_slices: int, vocabulary: Sequence[Any] | None
) -> tuple[np.ndarray, list[str]]:
    """Maps each row to a slice index; the largest slices come first, ``(other)`` last."""
    distinct, inverse, counts = _factorize(values)
    if vocabulary is not None:
        if distinct.dtype.kind not in "iu" or distinct[0] < 0 or distinct[-1] >= len(vocabulary):
            raise ValueError(
                f"slice_values must be integer codes in [0, {len(vocabulary)}) "
                f"when a vocabulary is given"
            )
        names = [_value_name(vocabulary[int(code)]) for code in distinct]
    else:
        names = [_value_name(value) for value in distinct]
    by_size = np.lexsort((np.arange(len(counts)), -counts))  # rows descending, then value
    remap = np.empty(len(counts), np.intp)
    keep = min(len(counts), max_slices)
    remap[by_size[:keep]] = np.arange(keep)
    remap[by_size[keep:]] = keep
    kept = [names[i] for i in by_size[:keep]]
    return remap[inverse], kept + ([OTHER] if len(counts) > keep else [])


def slice_metrics(
    labels: Any,
    logits: Any,
    slice_values: Any,
    weights: Any = None,
    max_slices: int = 20,
    vocabulary: Sequence[Any] | None = None,
) -> list[dict]:
    """Metrics per distinct value of a slice column (e.g. country, device).

    Slices are ordered by rows, largest first (ties by value). With more than
    ``max_slices`` distinct values, the smaller ones are merged into one final slice named
    ``"(other)"``.

    Args:
      labels: 0/1 per row.
      logits: Pre-sigmoid model output per row.
      slice_values: Slice value per row (any dtype; strings or numbers).
      weights: Optional non-negative weight per row; default 1.
      max_slices: Most slices reported before merging the rest.
      vocabulary: When given, ``slice_values`` are integer codes into it and the slices are
        named by ``vocabulary[code]`` (how :class:`EvalAccumulator` stores strings).

    Returns:
      Per slice ``{"value": str, "rows", "ctr", "predicted_ctr", "auc", "logloss"}`` with
      weighted ``ctr`` (observed), ``predicted_ctr`` (mean sigmoid) and ``logloss``; ``auc`` is
      nan for a slice with only one class.

    Raises:
      ValueError: On bad inputs (see :func:`auc`), mismatched ``slice_values`` or
        ``max_slices < 1``.
    """
    y = check_labels(labels)
    x = check_scores(logits, "logits", len(y))
    w = check_weights(weights, len(y))
    values = as_1d(slice_values, "slice_values")
    check_length(values, "slice_values", len(y))
    max_slices = check_positive_int(max_slices, "max_slices")
    return slice_metrics_unchecked(
        y, x, sigmoid(x), softplus_loss(y, x), w, *assign_slices(values, max_slices, vocabulary)
    )


def slice_metrics_unchecked(
    labels: np.ndarray,
    logits: np.ndarray,
    predicted: np.ndarray,
    loss: np.ndarray,
    weights: np.ndarray | None,
    ids: np.ndarray,
    names: list[str],
) -> list[dict]:
    """:func:`slice_metrics` of checked arrays, rows mapped to slices by :func:`assign_slices`."""
    order = np.argsort(ids.astype(np.int16 if len(names) < 2**15 else np.int64), kind="stable")
    ends = np.cumsum(np.bincount(ids, minlength=len(names)))
    result = []
    for index, name in enumerate(names):
        rows = order[(ends[index - 1] if index else 0) : ends[index]]
        y, w = labels[rows], (None if weights is None else weights[rows])
        result.append(
            {
                "value": name,
                "rows": int(len(rows)),
                "ctr": weighted_mean(y, w),
                "predicted_ctr": weighted_mean(predicted[rows], w),
                "auc": auc_unchecked(y, logits[rows], w),
                "logloss": weighted_mean(loss[rows], w),
            }
        )
    return result
