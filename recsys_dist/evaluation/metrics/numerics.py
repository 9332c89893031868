"""Numerics shared by the metrics: stable sigmoid and logloss, weighted means, and the
tie-aware AUC from one sort."""

from __future__ import annotations

import math

import numpy as np


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Numerically stable float64 sigmoid (no overflow warnings)."""
    x = np.asarray(logits, np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def softplus_loss(labels: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """Per-row ``max(x, 0) - x * y + log1p(exp(-|x|))``, the stable sigmoid cross-entropy."""
    x = np.asarray(logits, np.float64)
    loss = np.maximum(x, 0.0)
    loss -= x * labels
    loss += np.log1p(np.exp(-np.abs(x)))
    return loss


def weighted_mean(values: np.ndarray, weights: np.ndarray | None) -> float:
    """Mean of ``values`` weighted by ``weights`` (None: unweighted); nan when they sum to 0."""
    if weights is None:
        return float(values.mean())
    total = weights.sum()
    return float(np.dot(weights, values) / total) if total > 0 else math.nan


def change_mask(sorted_values: np.ndarray) -> np.ndarray:
    """Boolean mask: True where a sorted array's value differs from the previous one."""
    change = np.empty(len(sorted_values), bool)
    change[:1] = True
    np.not_equal(sorted_values[1:], sorted_values[:-1], out=change[1:])
    return change


def sorted_class_weights(
    labels: np.ndarray, weights: np.ndarray | None, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Positive and negative weight of every row, in ``order``."""
    positive = labels[order].astype(np.float64)
    if weights is None:
        return positive, 1.0 - positive
    weight = weights[order]
    positive *= weight
    return positive, weight - positive


def tie_blocks(
    labels: np.ndarray, scores: np.ndarray, weights: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Positive and negative weight of each block of tied scores, in ascending score order."""
    order = np.argsort(scores)
    positive, negative = sorted_class_weights(labels, weights, order)
    return merge_ties(positive, negative, change_mask(scores[order]))


def merge_ties(
    positive: np.ndarray, negative: np.ndarray, change: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sums sorted per-row class weights over blocks of tied scores (``change`` starts one)."""
    if change.all():
        return positive, negative
    starts = np.flatnonzero(change)
    return np.add.reduceat(positive, starts), np.add.reduceat(negative, starts)


def auc_from_blocks(positive: np.ndarray, negative: np.ndarray) -> float:
    """AUC from per-tie-block class weights in ascending score order; ties count one half."""
    total_positive, total_negative = positive.sum(), negative.sum()
    if not (total_positive > 0 and total_negative > 0):
        return math.nan
    below = np.cumsum(negative)
    below -= 0.5 * negative  # negatives strictly below the block, plus half of the tied ones
    value = float(np.dot(positive, below) / (total_positive * total_negative))
    return min(max(value, 0.0), 1.0)


def auc_unchecked(labels: np.ndarray, scores: np.ndarray, weights: np.ndarray | None) -> float:
    """:func:`~recsys_dist.evaluation.metrics.auc` of already checked arrays."""
    return auc_from_blocks(*tie_blocks(labels, scores, weights))


def int64_offsets(values: np.ndarray, low: int) -> np.ndarray:
    """``values - low`` as int64 without overflow, for integer values with a span < 2**63."""
    if values.dtype.kind == "u":
        return (values - values.dtype.type(low)).astype(np.int64)
    return values.astype(np.int64) - low
