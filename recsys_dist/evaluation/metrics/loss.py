"""Metrics of the predicted probabilities: :func:`logloss`, :func:`normalized_entropy` and
:func:`calibration`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from recsys_dist.evaluation.metrics.checks import (
    check_labels,
    check_positive_int,
    check_scores,
    check_weights,
)
from recsys_dist.evaluation.metrics.numerics import sigmoid, softplus_loss, weighted_mean


def logloss(labels: Any, logits: Any, weights: Any = None) -> float:
    """Weighted mean binary cross-entropy, computed stably from logits.

    Per row ``max(x, 0) - x * y + log1p(exp(-|x|))`` (natural log), as in
    ``tf.nn.sigmoid_cross_entropy_with_logits``; then ``sum(w * loss) / sum(w)``.

    Args:
      labels: 0/1 per row.
      logits: Pre-sigmoid model output per row.
      weights: Optional non-negative weight per row; default 1.

    Returns:
      The mean logloss, or nan when the weights sum to zero.

    Raises:
      ValueError: On bad inputs (see :func:`auc`).
    """
    y = check_labels(labels)
    x = check_scores(logits, "logits", len(y))
    return weighted_mean(softplus_loss(y, x), check_weights(weights, len(y)))


def normalized_entropy(labels: Any, logits: Any, weights: Any = None) -> float:
    """Normalized entropy: logloss divided by the entropy of the weighted base rate.

    From He et al. 2014, "Practical lessons from predicting clicks on ads at Facebook".
    1.0 means no better than always predicting the base rate; lower is better.

    Args:
      labels: 0/1 per row.
      logits: Pre-sigmoid model output per row.
      weights: Optional non-negative weight per row; default 1.

    Returns:
      The normalized entropy, or nan when the weighted base rate is 0 or 1.

    Raises:
      ValueError: On bad inputs (see :func:`auc`).
    """
    y = check_labels(labels)
    x = check_scores(logits, "logits", len(y))
    w = check_weights(weights, len(y))
    return normalized_entropy_from_logloss(
        weighted_mean(softplus_loss(y, x), w), weighted_mean(y, w)
    )


def normalized_entropy_from_logloss(mean_logloss: float, base_rate: float) -> float:
    """Normalized entropy from a mean logloss and the (weighted) base rate; nan at 0 or 1."""
    entropy = _binary_entropy(base_rate)
    return mean_logloss / entropy if entropy > 0 else math.nan


def _binary_entropy(rate: float) -> float:
    if not 0.0 < rate < 1.0:
        return math.nan
    return -(rate * math.log(rate) + (1.0 - rate) * math.log1p(-rate))


def calibration(labels: Any, logits: Any, weights: Any = None, bins: int = 20) -> dict:
    """Overall calibration and a reliability curve over equal-count bins.

    The bin edges are the row quantiles of the predicted probability ``sigmoid(logit)``, so
    each bin holds about ``rows / bins`` rows; rows with equal predictions always share a
    bin, so heavy ties leave some bins empty, and empty bins are dropped.

    Args:
      labels: 0/1 per row.
      logits: Pre-sigmoid model output per row.
      weights: Optional non-negative weight per row; default 1.
      bins: Number of quantile bins.

    Returns:
      ``{"predicted_ctr", "observed_ctr", "ratio", "bins"}``: the weighted mean prediction and
      label, their ratio predicted/observed (nan when nothing is positive), and per non-empty
      bin ``{"lower", "upper", "mean_predicted", "observed", "weight", "rows"}``. A bin holds
      predictions ``lower <= p < upper`` (the last bin also ``p == upper``).

    Raises:
      ValueError: On bad inputs (see :func:`auc`) or ``bins < 1``.
    """
    y = check_labels(labels)
    x = check_scores(logits, "logits", len(y))
    w = check_weights(weights, len(y))
    return calibration_unchecked(y, sigmoid(x), w, check_positive_int(bins, "bins"))


def calibration_unchecked(
    labels: np.ndarray, predicted: np.ndarray, weights: np.ndarray | None, bins: int
) -> dict:
    """:func:`calibration` of already checked labels and predicted probabilities."""
    edges = np.quantile(predicted, np.linspace(0.0, 1.0, bins + 1))
    ids = np.searchsorted(edges[1:-1], predicted, side="right")
    rows = np.bincount(ids, minlength=bins)
    if weights is None:
        weight = rows.astype(np.float64)
        predicted_sum = np.bincount(ids, predicted, bins)
        observed_sum = np.bincount(ids, labels, bins)
    else:
        weight = np.bincount(ids, weights, bins)
        predicted_sum = np.bincount(ids, predicted * weights, bins)
        observed_sum = np.bincount(ids, labels * weights, bins)
    total = weight.sum()
    predicted_ctr = predicted_sum.sum() / total if total > 0 else math.nan
    observed_ctr = observed_sum.sum() / total if total > 0 else math.nan
    table = []
    for b in np.flatnonzero(rows):
        table.append(
            {
                "lower": float(edges[b]),
                "upper": float(edges[b + 1]),
                "mean_predicted": float(predicted_sum[b] / weight[b])
                if weight[b] > 0
                else math.nan,
                "observed": float(observed_sum[b] / weight[b]) if weight[b] > 0 else math.nan,
                "weight": float(weight[b]),
                "rows": int(rows[b]),
            }
        )
    return {
        "predicted_ctr": float(predicted_ctr),
        "observed_ctr": float(observed_ctr),
        "ratio": float(predicted_ctr / observed_ctr) if observed_ctr > 0 else math.nan,
        "bins": table,
    }
