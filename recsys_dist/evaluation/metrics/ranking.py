"""Ranking metrics: :func:`auc`, :func:`gauc` (AUC within groups) and :func:`roc_curve`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from recsys_dist.evaluation.metrics.checks import (
    check_groups,
    check_labels,
    check_positive_int,
    check_scores,
    check_weights,
)
from recsys_dist.evaluation.metrics.numerics import (
    auc_unchecked,
    change_mask,
    int64_offsets,
    sorted_class_weights,
    tie_blocks,
)


def auc(labels: Any, scores: Any, weights: Any = None) -> float:
    """Exact, weighted ROC AUC.

    The probability that a random positive scores above a random negative, each drawn with
    probability proportional to its weight; tied scores count one half (midrank). Computed
    with one sort: O(n log n), about 48 bytes of temporaries per row.

    Args:
      labels: 0/1 per row.
      scores: Any score per row whose order ranks the rows (logits or probabilities).
      weights: Optional non-negative weight per row; default 1.

    Returns:
      The AUC, or nan when the positives or the negatives have zero total weight.

    Raises:
      ValueError: On empty or mismatched inputs, labels other than 0/1, non-finite scores or
        negative weights.
    """
    y = check_labels(labels)
    s = check_scores(scores, "scores", len(y))
    return auc_unchecked(y, s, check_weights(weights, len(y)))


def gauc(labels: Any, scores: Any, groups: Any, weights: Any = None) -> dict:
    """Group AUC: the AUC within each group (e.g. user), averaged weighted by impressions.

    Each group's AUC is exact and tie-aware as in :func:`auc`; its weight in the average is
    the group's total row weight (its row count when unweighted). Groups whose positives or
    negatives have zero weight have no AUC and are skipped. Fully vectorised: one sort by
    (group, score) and segment sums, no loop over groups.

    Args:
      labels: 0/1 per row.
      scores: Score per row.
      groups: Group id per row (integers, or strings which are mapped to codes).
      weights: Optional non-negative weight per row; default 1.

    Returns:
      ``{"gauc", "groups", "skipped_groups", "skipped_rows"}``: the weighted mean AUC (nan when
      no group has both classes), the number of groups used, and the number of groups and of
      rows skipped.

    Raises:
      ValueError: On bad inputs (see :func:`auc`) or non-integer, non-string groups.
    """
    y = check_labels(labels)
    s = check_scores(scores, "scores", len(y))
    g = check_groups(groups, len(y))
    return gauc_unchecked(y, s, g, check_weights(weights, len(y)))


def _group_score_order(groups: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Row order sorted by group, then by score (a faster ``np.lexsort((scores, groups))``)."""
    rows = len(groups)
    low = int(groups.min())
    span = int(groups.max()) - low
    if scores.dtype == np.float32 and span < 2**31:
        # One int64 key, one sort: group offset in the high 32 bits, the float's bits mapped
        # to an order-preserving uint32 in the low ones (adding 0 turns -0.0 into +0.0).
        bits = (scores + np.float32(0.0)).view(np.uint32)
        bits = np.where(bits >> 31, ~bits, bits | np.uint32(1 << 31))
        key = int64_offsets(groups, low)
        key <<= 32
        key |= bits
        return np.argsort(key)
    by_score = np.argsort(scores)
    if (span + 1) * rows < 2**63:  # one int64 key: group offset * rows + score rank
        rank = np.empty(rows, np.int64)
        rank[by_score] = np.arange(rows)
        key = int64_offsets(groups, low)
        key *= rows
        key += rank
        return np.argsort(key)
    return by_score[np.argsort(groups[by_score], kind="stable")]


def gauc_unchecked(
    labels: np.ndarray, scores: np.ndarray, groups: np.ndarray, weights: np.ndarray | None
) -> dict:
    """:func:`gauc` of already checked arrays."""
    rows = len(labels)
    order = _group_score_order(groups, scores)
    new_group = change_mask(groups[order])
    new_block = change_mask(scores[order])
    new_block |= new_group
    positive, negative = sorted_class_weights(labels, weights, order)
    del order
    starts = np.flatnonzero(new_block)
    block_positive = np.add.reduceat(positive, starts)
    block_negative = np.add.reduceat(negative, starts)
    del positive, negative
    block_group = np.cumsum(new_group)[starts] - 1
    count = int(block_group[-1]) + 1
    # Negative weight below each block within its group: global exclusive cumulative sum
    # minus its value at the group's first block, plus half of the block's own (ties).
    below = np.cumsum(block_negative)
    below -= block_negative
    below -= below[new_group[starts]][block_group]
    below += 0.5 * block_negative
    numerator = np.bincount(block_group, block_positive * below, count)
    group_positive = np.bincount(block_group, block_positive, count)
    group_negative = np.bincount(block_group, block_negative, count)
    group_rows = np.diff(np.append(np.flatnonzero(new_group), rows))
    used = (group_positive > 0) & (group_negative > 0)
    group_weight = (group_positive + group_negative)[used]
    group_auc = numerator[used] / (group_positive[used] * group_negative[used])
    total = group_weight.sum()
    value = float(np.dot(group_weight, group_auc) / total) if total > 0 else math.nan
    return {
        "gauc": value,
        "groups": int(used.sum()),
        "skipped_groups": int(count - used.sum()),
        "skipped_rows": int(group_rows[~used].sum()),
    }


def roc_curve(
    labels: Any, scores: Any, weights: Any = None, max_points: int = 500
) -> tuple[np.ndarray, np.ndarray]:
    """Weighted ROC curve, downsampled for plotting.

    One point per distinct score threshold, from (0, 0) to (1, 1); when there are more than
    ``max_points``, points are kept at even steps of arc length along the curve (both ends
    always kept).

    Args:
      labels: 0/1 per row.
      scores: Score per row.
      weights: Optional non-negative weight per row; default 1.
      max_points: Most points returned (>= 2).

    Returns:
      ``(fpr, tpr)`` float64 arrays; both empty when one class has zero weight.

    Raises:
      ValueError: On bad inputs (see :func:`auc`) or ``max_points < 2``.
    """
    y = check_labels(labels)
    s = check_scores(scores, "scores", len(y))
    w = check_weights(weights, len(y))
    return roc_curve_unchecked(y, s, w, check_positive_int(max_points, "max_points", 2))


def roc_curve_unchecked(
    labels: np.ndarray, scores: np.ndarray, weights: np.ndarray | None, max_points: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`roc_curve` of already checked arrays."""
    positive, negative = tie_blocks(labels, scores, weights)
    total_positive, total_negative = positive.sum(), negative.sum()
    if not (total_positive > 0 and total_negative > 0):
        return np.empty(0), np.empty(0)
    tpr = np.concatenate([[0.0], np.cumsum(positive[::-1]) / total_positive])
    fpr = np.concatenate([[0.0], np.cumsum(negative[::-1]) / total_negative])
    tpr[-1] = fpr[-1] = 1.0
    if len(fpr) > max_points:
        length = np.concatenate([[0.0], np.cumsum(np.hypot(np.diff(fpr), np.diff(tpr)))])
        keep = np.searchsorted(length, np.linspace(0.0, length[-1], max_points))
        keep = np.unique(np.concatenate([[0], np.minimum(keep, len(fpr) - 1), [len(fpr) - 1]]))
        fpr, tpr = fpr[keep], tpr[keep]
    return fpr, tpr
