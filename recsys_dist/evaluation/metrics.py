"""Exact offline evaluation metrics for CTR and ranking models, in pure numpy.

Inputs are per-row arrays: ``labels`` (0/1, any numeric or bool dtype), ``logits`` (the
model's pre-sigmoid output; functions that only rank take ``scores``, any monotone transform
of the logits) and optional ``weights`` (finite, >= 0, default 1). Every public function
checks its inputs and raises :class:`ValueError` naming the bad argument.

Exactness:
  Nothing is approximated. AUC sorts the scores and gives tied scores half credit (unlike the
  bucketed ``tf.keras.metrics.AUC``); logloss uses the stable softplus form of
  ``tf.nn.sigmoid_cross_entropy_with_logits``; all sums accumulate in float64, so results
  equal the textbook definitions up to float64 rounding (about 1e-12 relative). The bootstrap
  draws its Poisson(1) weights by inverting the Poisson CDF on 32-bit uniform integers: each
  Poisson probability is off by less than 2**-32.

Speed and memory:
  Everything is vectorised; the only Python loops run over labels, slices (at most
  ``max_slices + 1``) and blocks of bootstrap replicates. Measured once on this 2-core
  machine with 10M rows while other jobs kept it busy (load average 3.7-5; a quiet machine
  is faster): :func:`auc` 1.1-2.6 s, :func:`gauc` with 1M users 1.8-4.1 s,
  :func:`paired_bootstrap_auc_delta` with 200 replicates 28-57 s on 2 threads (52 s on one).
  Peak temporary memory, measured with tracemalloc: :func:`auc` 48 bytes/row, :func:`gauc`
  51, the bootstrap 74 on one thread and 105 on two (each model's sort order and negative
  weights, the permutation between the two orders, per thread a float64 cumulative-sum
  buffer and the Poisson draws). :class:`EvalAccumulator` keeps ``12 + 5 * L`` bytes per row
  for ``L`` labels, plus 8 with groups, 4 per oracle label and 4 per string slice column
  (the values' own item size for a numeric slice column).
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

OTHER = "(other)"
"""Name of the slice entry that merges the values beyond ``max_slices``."""

# ---- input checks ---------------------------------------------------------------------------


def _as_1d(values: Any, name: str) -> np.ndarray:
    if values is None:
        raise ValueError(f"{name} is missing; expected a 1-D array")
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {array.shape}")
    return array


def _check_length(array: np.ndarray, name: str, rows: int, reference: str = "labels") -> None:
    if len(array) != rows:
        raise ValueError(f"{name} has {len(array)} rows but {reference} has {rows}; "
                         f"expected the same length")


def _first_bad(mask: np.ndarray, array: np.ndarray) -> str:
    row = int(np.argmax(mask))
    # .item(): numpy 2's repr of a scalar is np.int64(2), not the value a user wrote
    return f"{array[row].item()!r} at row {row}"


def _check_labels(labels: Any, name: str = "labels") -> np.ndarray:
    """Returns ``labels`` as int8 0/1 after checking they are 1-D, non-empty and 0/1."""
    array = _as_1d(labels, name)
    if array.size == 0:
        raise ValueError(f"{name} is empty; expected at least one row")
    if array.dtype.kind == "b":
        return array.astype(np.int8)
    if array.dtype.kind not in "iuf":
        raise ValueError(f"{name} must hold numeric 0/1 values, got dtype {array.dtype}")
    if array.dtype.kind in "iu":
        valid = array.min() >= 0 and array.max() <= 1
    else:
        valid = np.count_nonzero(array == 0) + np.count_nonzero(array == 1) == array.size
    if not valid:
        bad = (array != 0) & (array != 1)
        raise ValueError(f"{name} must contain only 0 and 1; found {_first_bad(bad, array)}")
    return array.astype(np.int8, copy=False)


def _check_scores(scores: Any, name: str, rows: int, reference: str = "labels") -> np.ndarray:
    """Checks a score/logit column: 1-D, numeric, ``rows`` long and finite. Keeps its dtype."""
    array = _as_1d(scores, name)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be numeric, got dtype {array.dtype}")
    _check_length(array, name, rows, reference)
    if array.dtype.kind == "f":
        finite = np.isfinite(array)
        if not finite.all():
            raise ValueError(f"{name} must be finite; found {_first_bad(~finite, array)}")
    if array.dtype.kind == "b":
        array = array.astype(np.int8)
    return array


def _check_weights(weights: Any, rows: int, reference: str = "labels") -> np.ndarray | None:
    """Returns float64 weights, or None when ``weights`` is None (every row weighs 1)."""
    if weights is None:
        return None
    array = _as_1d(weights, "weights")
    if array.dtype.kind not in "biuf":
        raise ValueError(f"weights must be numeric, got dtype {array.dtype}")
    _check_length(array, "weights", rows, reference)
    array = array.astype(np.float64)
    finite = np.isfinite(array)
    if not finite.all():
        raise ValueError(f"weights must be finite; found {_first_bad(~finite, array)}")
    negative = array < 0
    if negative.any():
        raise ValueError(f"weights must be >= 0; found {_first_bad(negative, array)}")
    return array


def _check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_groups(groups: Any, rows: int, reference: str = "labels") -> np.ndarray:
    """Returns group ids as an integer array (strings are mapped to integer codes)."""
    array = _as_1d(groups, "groups")
    _check_length(array, "groups", rows, reference)
    if array.dtype.kind in "OUS":
        return np.unique(array.astype(str), return_inverse=True)[1].astype(np.int64)
    if array.dtype.kind not in "biu":
        raise ValueError(f"groups must hold integer ids (or strings), got dtype {array.dtype}")
    return array.astype(np.int8) if array.dtype.kind == "b" else array


# ---- shared numerics ------------------------------------------------------------------------


def _sigmoid(logits: np.ndarray) -> np.ndarray:
    """Numerically stable float64 sigmoid (no overflow warnings)."""
    x = np.asarray(logits, np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _softplus_loss(labels: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """Per-row ``max(x, 0) - x * y + log1p(exp(-|x|))``, the stable sigmoid cross-entropy."""
    x = np.asarray(logits, np.float64)
    loss = np.maximum(x, 0.0)
    loss -= x * labels
    loss += np.log1p(np.exp(-np.abs(x)))
    return loss


def _weighted_mean(values: np.ndarray, weights: np.ndarray | None) -> float:
    if weights is None:
        return float(values.mean())
    total = weights.sum()
    return float(np.dot(weights, values) / total) if total > 0 else math.nan


def _binary_entropy(rate: float) -> float:
    if not 0.0 < rate < 1.0:
        return math.nan
    return -(rate * math.log(rate) + (1.0 - rate) * math.log1p(-rate))


def _changes(sorted_values: np.ndarray) -> np.ndarray:
    """Boolean mask: True where a sorted array's value differs from the previous one."""
    change = np.empty(len(sorted_values), bool)
    change[:1] = True
    np.not_equal(sorted_values[1:], sorted_values[:-1], out=change[1:])
    return change


def _sorted_class_weights(labels: np.ndarray, weights: np.ndarray | None,
                          order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positive and negative weight of every row, in ``order``."""
    positive = labels[order].astype(np.float64)
    if weights is None:
        return positive, 1.0 - positive
    weight = weights[order]
    positive *= weight
    return positive, weight - positive


def _tie_blocks(labels: np.ndarray, scores: np.ndarray,
                weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Positive and negative weight of each block of tied scores, in ascending score order."""
    order = np.argsort(scores)
    positive, negative = _sorted_class_weights(labels, weights, order)
    return _merge_ties(positive, negative, _changes(scores[order]))


def _merge_ties(positive: np.ndarray, negative: np.ndarray,
                change: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sums sorted per-row class weights over blocks of tied scores (``change`` starts one)."""
    if change.all():
        return positive, negative
    starts = np.flatnonzero(change)
    return np.add.reduceat(positive, starts), np.add.reduceat(negative, starts)


def _auc_from_blocks(positive: np.ndarray, negative: np.ndarray) -> float:
    """AUC from per-tie-block class weights in ascending score order; ties count one half."""
    total_positive, total_negative = positive.sum(), negative.sum()
    if not (total_positive > 0 and total_negative > 0):
        return math.nan
    below = np.cumsum(negative)
    below -= 0.5 * negative  # negatives strictly below the block, plus half of the tied ones
    value = float(np.dot(positive, below) / (total_positive * total_negative))
    return min(max(value, 0.0), 1.0)


def _auc(labels: np.ndarray, scores: np.ndarray, weights: np.ndarray | None) -> float:
    return _auc_from_blocks(*_tie_blocks(labels, scores, weights))


# ---- single metrics -------------------------------------------------------------------------


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
    y = _check_labels(labels)
    s = _check_scores(scores, "scores", len(y))
    return _auc(y, s, _check_weights(weights, len(y)))


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
    y = _check_labels(labels)
    x = _check_scores(logits, "logits", len(y))
    return _weighted_mean(_softplus_loss(y, x), _check_weights(weights, len(y)))


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
    y = _check_labels(labels)
    x = _check_scores(logits, "logits", len(y))
    w = _check_weights(weights, len(y))
    return _normalized_entropy(_weighted_mean(_softplus_loss(y, x), w), _weighted_mean(y, w))


def _normalized_entropy(mean_logloss: float, base_rate: float) -> float:
    entropy = _binary_entropy(base_rate)
    return mean_logloss / entropy if entropy > 0 else math.nan


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
    y = _check_labels(labels)
    x = _check_scores(logits, "logits", len(y))
    w = _check_weights(weights, len(y))
    return _calibration(y, _sigmoid(x), w, _check_positive_int(bins, "bins"))


def _calibration(labels: np.ndarray, predicted: np.ndarray, weights: np.ndarray | None,
                 bins: int) -> dict:
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
        table.append({
            "lower": float(edges[b]),
            "upper": float(edges[b + 1]),
            "mean_predicted": float(predicted_sum[b] / weight[b]) if weight[b] > 0 else math.nan,
            "observed": float(observed_sum[b] / weight[b]) if weight[b] > 0 else math.nan,
            "weight": float(weight[b]),
            "rows": int(rows[b]),
        })
    return {
        "predicted_ctr": float(predicted_ctr),
        "observed_ctr": float(observed_ctr),
        "ratio": float(predicted_ctr / observed_ctr) if observed_ctr > 0 else math.nan,
        "bins": table,
    }


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
    y = _check_labels(labels)
    s = _check_scores(scores, "scores", len(y))
    g = _check_groups(groups, len(y))
    return _gauc(y, s, g, _check_weights(weights, len(y)))


def _offsets(values: np.ndarray, low: int) -> np.ndarray:
    """``values - low`` as int64 without overflow, for integer values with a span < 2**63."""
    if values.dtype.kind == "u":
        return (values - values.dtype.type(low)).astype(np.int64)
    return values.astype(np.int64) - low


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
        key = _offsets(groups, low)
        key <<= 32
        key |= bits
        return np.argsort(key)
    by_score = np.argsort(scores)
    if (span + 1) * rows < 2**63:  # one int64 key: group offset * rows + score rank
        rank = np.empty(rows, np.int64)
        rank[by_score] = np.arange(rows)
        key = _offsets(groups, low)
        key *= rows
        key += rank
        return np.argsort(key)
    return by_score[np.argsort(groups[by_score], kind="stable")]


def _gauc(labels: np.ndarray, scores: np.ndarray, groups: np.ndarray,
          weights: np.ndarray | None) -> dict:
    rows = len(labels)
    order = _group_score_order(groups, scores)
    new_group = _changes(groups[order])
    new_block = _changes(scores[order])
    new_block |= new_group
    positive, negative = _sorted_class_weights(labels, weights, order)
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


def roc_curve(labels: Any, scores: Any, weights: Any = None,
              max_points: int = 500) -> tuple[np.ndarray, np.ndarray]:
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
    y = _check_labels(labels)
    s = _check_scores(scores, "scores", len(y))
    w = _check_weights(weights, len(y))
    return _roc_curve(y, s, w, _check_positive_int(max_points, "max_points", 2))


def _roc_curve(labels: np.ndarray, scores: np.ndarray, weights: np.ndarray | None,
               max_points: int) -> tuple[np.ndarray, np.ndarray]:
    positive, negative = _tie_blocks(labels, scores, weights)
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


# ---- slices ---------------------------------------------------------------------------------


def _value_name(value: Any) -> str:
    return str(value.item() if isinstance(value, np.generic) else value)


def _factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(distinct values, inverse, counts)``; O(n) for integers with a small range."""
    if values.dtype.kind in "iu" and len(values):
        low = int(values.min())
        span = int(values.max()) - low
        if span < max(4 * len(values), 1 << 16):
            shifted = _offsets(values, low)
            counts = np.bincount(shifted, minlength=span + 1)
            present = np.flatnonzero(counts)
            remap = np.zeros(span + 1, np.intp)
            remap[present] = np.arange(len(present))
            return present + low, remap[shifted], counts[present]
    if values.dtype.kind == "O":
        values = values.astype(str)
    distinct, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    return distinct, inverse.reshape(-1), counts


def _slice_ids(values: np.ndarray, max_slices: int,
               vocabulary: Sequence[Any] | None) -> tuple[np.ndarray, list[str]]:
    """Maps each row to a slice index; the largest slices come first, ``(other)`` last."""
    distinct, inverse, counts = _factorize(values)
    if vocabulary is not None:
        if distinct.dtype.kind not in "iu" or distinct[0] < 0 or distinct[-1] >= len(vocabulary):
            raise ValueError(f"slice_values must be integer codes in [0, {len(vocabulary)}) "
                             f"when a vocabulary is given")
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


def slice_metrics(labels: Any, logits: Any, slice_values: Any, weights: Any = None,
                  max_slices: int = 20, vocabulary: Sequence[Any] | None = None) -> list[dict]:
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
    y = _check_labels(labels)
    x = _check_scores(logits, "logits", len(y))
    w = _check_weights(weights, len(y))
    values = _as_1d(slice_values, "slice_values")
    _check_length(values, "slice_values", len(y))
    max_slices = _check_positive_int(max_slices, "max_slices")
    return _slice_metrics(y, x, _sigmoid(x), _softplus_loss(y, x), w,
                          *_slice_ids(values, max_slices, vocabulary))


def _slice_metrics(labels: np.ndarray, logits: np.ndarray, predicted: np.ndarray,
                   loss: np.ndarray, weights: np.ndarray | None, ids: np.ndarray,
                   names: list[str]) -> list[dict]:
    order = np.argsort(ids.astype(np.int16 if len(names) < 2**15 else np.int64), kind="stable")
    ends = np.cumsum(np.bincount(ids, minlength=len(names)))
    result = []
    for index, name in enumerate(names):
        rows = order[(ends[index - 1] if index else 0):ends[index]]
        y, w = labels[rows], (None if weights is None else weights[rows])
        result.append({
            "value": name,
            "rows": int(len(rows)),
            "ctr": _weighted_mean(y, w),
            "predicted_ctr": _weighted_mean(predicted[rows], w),
            "auc": _auc(y, logits[rows], w),
            "logloss": _weighted_mean(loss[rows], w),
        })
    return result


# ---- paired bootstrap -----------------------------------------------------------------------


def _poisson_thresholds() -> np.ndarray:
    """``T[k] = floor(CDF(k) * 2**32)`` of Poisson(1): a uniform 32-bit ``u`` maps to
    ``k = #{T <= u}``, which has probability ``(T[k] - T[k-1]) / 2**32``."""
    thresholds, term, cdf = [], math.exp(-1.0), 0.0
    for k in range(40):
        cdf += term
        term /= k + 1
        value = math.floor(cdf * 2.0**32)
        if value >= 2**32 or (thresholds and value == thresholds[-1]):
            break
        thresholds.append(value)
    return np.array(thresholds, np.int64)


_POISSON_T = _poisson_thresholds()
_AMBIGUOUS = 255


def _poisson_table() -> np.ndarray:
    """Poisson value per high 16 bits of ``u``; 255 where a threshold splits the slot."""
    low = np.arange(1 << 16, dtype=np.int64) << 16
    first = np.searchsorted(_POISSON_T, low, side="right")
    last = np.searchsorted(_POISSON_T, low + 0xFFFF, side="right")
    return np.where(first == last, first, _AMBIGUOUS).astype(np.uint8)


_POISSON_TABLE = _poisson_table()


def _poisson1(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Poisson(1) draws as uint8, by CDF inversion of uniform 32-bit integers.

    The high 16 bits go through a lookup table; only the ~0.02% of draws whose slot holds a
    CDF threshold need their low 16 bits, drawn then.
    """
    high = rng.integers(0, 1 << 16, size=shape, dtype=np.uint16)
    draws = _POISSON_TABLE[high]
    flat = draws.reshape(-1)
    ambiguous = np.flatnonzero(flat == _AMBIGUOUS)
    if ambiguous.size:
        low = rng.integers(0, 1 << 16, size=ambiguous.size, dtype=np.int64)
        full = (high.reshape(-1)[ambiguous].astype(np.int64) << 16) | low
        flat[ambiguous] = np.searchsorted(_POISSON_T, full, side="right")
    return draws


class _Presorted:
    """One model's rows sorted by score once, ready for O(n) AUC numerators per replicate.

    Attributes:
      auc: The model's AUC on the original weights.
      order: Row order by ascending score.
      negative: Negative weight of each row in that order (float64).
      positions: Positions (in that order) of the rows with positive weight.
      positive: Their positive weight.
      block_start, block_end: For each of those rows, the start and (exclusive) end position
        of its block of tied scores.
    """

    def __init__(self, labels: np.ndarray, scores: np.ndarray, weights: np.ndarray | None):
        self.order = np.argsort(scores)
        positive, self.negative = _sorted_class_weights(labels, weights, self.order)
        self.positions = np.flatnonzero(positive > 0)
        self.positive = positive[self.positions]
        change = _changes(scores[self.order])
        # The same order and sums as auc(), so the point estimate is bit-identical to it.
        self.auc = _auc_from_blocks(*_merge_ties(positive, self.negative, change))
        del positive
        starts = np.flatnonzero(change)
        del change
        block = np.searchsorted(starts, self.positions, side="right") - 1
        self.block_start = starts[block]
        self.block_end = np.append(starts[1:], len(scores))[block]

    def numerators(self, draws: np.ndarray,
                   buffer: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """AUC numerator, positive and negative total per replicate.

        Args:
          draws: ``(replicates, rows)`` Poisson weights in this model's order.
          buffer: ``(replicates, rows + 1)`` float64 scratch space.
        """
        cumulative = buffer[:, 1:]
        np.multiply(draws, self.negative, out=cumulative)
        np.cumsum(cumulative, axis=1, out=cumulative)
        buffer[:, 0] = 0.0
        # Negatives strictly below the block plus half of those tied with it.
        below = buffer[:, self.block_start]
        below += buffer[:, self.block_end]
        below *= 0.5
        positive = draws[:, self.positions] * self.positive
        numerator = np.einsum("ij,ij->i", positive, below)
        return numerator, positive.sum(axis=1), buffer[:, -1].copy()


def paired_bootstrap_auc_delta(labels: Any, scores_new: Any, scores_base: Any,
                               weights: Any = None, replicates: int = 200, seed: int = 0,
                               confidence: float = 0.95, block_elements: int = 1 << 22,
                               threads: int | None = None) -> dict:
    """Paired Poisson bootstrap of ``AUC(new) - AUC(base)`` on the same rows.

    Each replicate gives every row an independent Poisson(1) weight (times its own weight)
    and computes both models' exact, tie-aware AUC on those weights. Each model's scores are
    sorted once; a replicate then costs O(n): one gather of the draws into the base model's
    order and a cumulative sum per model. Replicates run in blocks of about
    ``block_elements / rows`` replicates to bound memory; blocks run on ``threads`` threads
    (numpy releases the GIL). Each block has its own seed derived from ``seed``, so the
    result does not depend on ``threads``. Peak memory: about 75 bytes per row on one
    thread, 105 on two.

    Args:
      labels: 0/1 per row.
      scores_new: The new model's score per row.
      scores_base: The baseline model's score per row.
      weights: Optional non-negative weight per row; default 1.
      replicates: Number of bootstrap replicates.
      seed: Seed of the Poisson draws; the same inputs and seed give the same result.
      confidence: Level of the two-sided percentile interval, in (0, 1).
      block_elements: Target size of one block of draws (replicates x rows).
      threads: Worker threads; default ``min(4, os.cpu_count())``.

    Returns:
      ``{"delta", "low", "high", "replicates", "confidence", "p_worse", "std"}``: the point
      estimate on the original data (exactly ``auc(new) - auc(base)``), the percentile
      interval, the number of replicates with a defined AUC (both classes drawn), the level,
      the fraction of replicates with delta < 0, and the replicates' standard deviation.

    Raises:
      ValueError: On bad inputs (see :func:`auc`), ``replicates < 1`` or ``confidence``
        outside (0, 1).
    """
    y = _check_labels(labels)
    new_scores = _check_scores(scores_new, "scores_new", len(y))
    base_scores = _check_scores(scores_base, "scores_base", len(y))
    w = _check_weights(weights, len(y))
    replicates = _check_positive_int(replicates, "replicates")
    block_elements = _check_positive_int(block_elements, "block_elements")
    threads = _check_positive_int(min(4, os.cpu_count() or 1) if threads is None else threads,
                                  "threads")
    if isinstance(confidence, bool) or not (isinstance(confidence, (int, float))
                                            and 0.0 < confidence < 1.0):
        raise ValueError(f"confidence must be a number in (0, 1), got {confidence!r}")
    with ThreadPoolExecutor(threads) as pool:
        new, base = pool.map(lambda s: _Presorted(y, s, w), (new_scores, base_scores))
        deltas = _bootstrap_deltas(new, base, replicates, seed, block_elements, pool)
    valid = deltas[np.isfinite(deltas)]
    tail = (1.0 - confidence) / 2.0
    low, high = (np.quantile(valid, [tail, 1.0 - tail]) if valid.size
                 else (math.nan, math.nan))
    return {
        "delta": float(new.auc - base.auc),
        "low": float(low),
        "high": float(high),
        "replicates": int(valid.size),
        "confidence": float(confidence),
        "p_worse": float(np.mean(valid < 0)) if valid.size else math.nan,
        "std": float(valid.std()) if valid.size else math.nan,
    }


def _bootstrap_deltas(new: _Presorted, base: _Presorted, replicates: int, seed: int,
                      block_elements: int, pool: ThreadPoolExecutor) -> np.ndarray:
    """AUC(new) - AUC(base) per replicate (nan when a replicate drew no positive or negative)."""
    rows = len(new.negative)
    # Draws are made in the new model's order; `to_base` reorders them for the base model.
    position = np.empty(rows, np.intp)
    position[new.order] = np.arange(rows)
    to_base = position[base.order]
    del position
    new.order = base.order = None  # free them: only `to_base` is needed from here on
    block = max(1, min(replicates, block_elements // rows))
    starts = range(0, replicates, block)
    seeds = np.random.SeedSequence(seed).spawn(len(starts))
    deltas = np.empty(replicates)
    scratch = threading.local()

    def run(start: int, block_seed: np.random.SeedSequence) -> None:
        count = min(block, replicates - start)
        if getattr(scratch, "buffer", None) is None:
            scratch.buffer = np.empty((block, rows + 1))
        buffer = scratch.buffer[:count]
        draws = _poisson1(np.random.default_rng(block_seed), (count, rows))
        numerator_new, positive, negative = new.numerators(draws, buffer)
        draws = np.take(draws, to_base, axis=1)
        numerator_base = base.numerators(draws, buffer)[0]
        denominator = positive * negative
        with np.errstate(divide="ignore", invalid="ignore"):
            deltas[start:start + count] = np.where(
                denominator > 0, (numerator_new - numerator_base) / denominator, math.nan)

    for _ in pool.map(run, starts, seeds):
        pass
    return deltas


# ---- collecting outputs ---------------------------------------------------------------------


@dataclass
class EvalData:
    """Evaluation outputs of a whole split, one entry per row.

    Attributes:
      labels: Label name -> int8 0/1.
      logits: Label name -> float32 logits of the model.
      weights: float32 row weights.
      row_ids: int64 row ids.
      groups: Optional int64 group (user) ids, for GAUC.
      slices: Slice column -> values; string columns hold int32 codes into ``slice_vocab``.
      slice_vocab: Slice column -> names of its codes (string columns only).
      oracle_logits: Label name -> float32 oracle logits (e.g. the true logits of synthetic
        data).
    """

    labels: dict[str, np.ndarray]
    logits: dict[str, np.ndarray]
    weights: np.ndarray
    row_ids: np.ndarray
    groups: np.ndarray | None = None
    slices: dict[str, np.ndarray] = field(default_factory=dict)
    slice_vocab: dict[str, list[str]] = field(default_factory=dict)
    oracle_logits: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        """Number of rows."""
        return len(self.row_ids)


class EvalAccumulator:
    """Collects evaluation outputs chunk by chunk in compact typed buffers.

    Each :meth:`add` converts its chunk to compact dtypes and appends it to a list of chunks;
    :meth:`finish` concatenates each column once (keeping the result, so the peak is twice
    the stored size for that moment only). Memory per row, for ``L`` labels:

    - labels int8 (1 byte each) and logits float32 (4 bytes each): ``5 * L``;
    - weights float32: 4; row ids int64: 8;
    - groups int64: 8 (only when given);
    - oracle logits float32: 4 per label that has them;
    - slice columns: 4 per string column (int32 codes plus one vocabulary entry per
      distinct value), the values' item size for a numeric column.

    So ``12 + 5 * L`` bytes per row, e.g. 22 bytes for two labels; with groups, two oracle
    labels and two string slice columns, 46 bytes (10M rows: 460 MB).

    The first chunk fixes the schema (label names, whether groups are present, slice
    columns, oracle labels); later chunks must match it.
    """

    def __init__(self) -> None:
        self._columns: dict[tuple[str, str], list[np.ndarray]] = {}
        self._schema: tuple | None = None
        self._vocab: dict[str, dict[str, int]] = {}
        self._rows = 0

    @property
    def rows(self) -> int:
        """Rows added so far."""
        return self._rows

    @property
    def bytes_used(self) -> int:
        """Bytes held by the stored arrays (vocabularies not counted)."""
        return sum(chunk.nbytes for chunks in self._columns.values() for chunk in chunks)

    def add(self, labels: Mapping[str, Any], logits: Mapping[str, Any], weights: Any,
            row_ids: Any, groups: Any = None, slices: Mapping[str, Any] | None = None,
            oracle_logits: Mapping[str, Any] | None = None) -> None:
        """Appends one chunk of rows.

        Args:
          labels: Label name -> 0/1 per row.
          logits: Label name -> logit per row; the same names as ``labels``.
          weights: Weight per row (>= 0); None means 1.
          row_ids: Integer row id per row.
          groups: Optional integer group (user) id per row.
          slices: Optional slice column -> value per row (strings or numbers).
          oracle_logits: Optional label name -> oracle logit per row, for some of the labels.

        Raises:
          ValueError: When the chunk is malformed or does not match the first chunk's schema.
        """
        slices = dict(slices or {})
        oracle_logits = dict(oracle_logits or {})
        if not labels:
            raise ValueError("labels is empty; expected at least one label name -> array")
        if set(logits) != set(labels):
            raise ValueError(f"logits must have the same names as labels: labels "
                             f"{sorted(labels)}, logits {sorted(logits)}")
        unknown = set(oracle_logits) - set(labels)
        if unknown:
            raise ValueError(f"oracle_logits has names {sorted(unknown)} that are not labels "
                             f"{sorted(labels)}")
        schema = (tuple(sorted(labels)), groups is not None, tuple(sorted(slices)),
                  tuple(sorted(oracle_logits)))
        if self._schema is not None and schema != self._schema:
            raise ValueError(f"chunk does not match the first chunk: expected (labels, has "
                             f"groups, slices, oracle labels) = {self._schema}, got {schema}")
        ids = _as_1d(row_ids, "row_ids")
        if ids.dtype.kind not in "iu":
            raise ValueError(f"row_ids must be integers, got dtype {ids.dtype}")
        rows = len(ids)
        chunk: dict[tuple[str, str], np.ndarray] = {("row_ids", ""): ids.astype(np.int64)}
        for name in labels:
            where = f"labels[{name!r}]"
            values = _as_1d(labels[name], where)
            _check_length(values, where, rows, "row_ids")
            chunk["labels", name] = (_check_labels(values, where).astype(np.int8) if rows
                                     else np.empty(0, np.int8))
            chunk["logits", name] = self._logits(logits[name], f"logits[{name!r}]", rows)
        for name in oracle_logits:
            chunk["oracle", name] = self._logits(oracle_logits[name],
                                                 f"oracle_logits[{name!r}]", rows)
        chunk["weights", ""] = (np.ones(rows, np.float32) if weights is None
                                else _check_weights(weights, rows, "row_ids").astype(np.float32))
        if groups is not None:
            group_ids = _as_1d(groups, "groups")
            _check_length(group_ids, "groups", rows, "row_ids")
            if group_ids.dtype.kind not in "iu":
                raise ValueError(f"groups must be integer ids, got dtype {group_ids.dtype}")
            chunk["groups", ""] = group_ids.astype(np.int64)
        for name, values in slices.items():
            chunk["slices", name] = self._slice_chunk(name, values, rows)
        self._schema = schema
        for key, values in chunk.items():
            self._columns.setdefault(key, []).append(values)
        self._rows += rows

    @staticmethod
    def _logits(values: Any, name: str, rows: int) -> np.ndarray:
        array = _as_1d(values, name)
        return _check_scores(array, name, rows, "row_ids").astype(np.float32)

    def _slice_chunk(self, name: str, values: Any, rows: int) -> np.ndarray:
        where = f"slices[{name!r}]"
        array = _as_1d(values, where)
        _check_length(array, where, rows, "row_ids")
        is_text = array.dtype.kind in "OUS"
        if not is_text and array.dtype.kind not in "biuf":
            raise ValueError(f"{where} must hold strings or numbers, got dtype {array.dtype}")
        was_text = name in self._vocab
        if self._rows and was_text != is_text:
            raise ValueError(f"{where} changed between strings and numbers across chunks")
        if not is_text:
            return array.copy()
        vocab = self._vocab.setdefault(name, {})
        distinct, inverse = np.unique(array.astype(str), return_inverse=True)
        codes = np.array([vocab.setdefault(value, len(vocab)) for value in distinct.tolist()],
                         np.int32)
        return codes[inverse.reshape(-1)] if rows else np.empty(0, np.int32)

    def finish(self) -> EvalData:
        """Concatenates the chunks into one :class:`EvalData` (the accumulator stays usable)."""
        for key, chunks in self._columns.items():
            if len(chunks) > 1:
                self._columns[key] = [np.concatenate(chunks)]
        column = {key: chunks[0] for key, chunks in self._columns.items()}

        def named(kind: str) -> dict[str, np.ndarray]:
            return {name: values for (k, name), values in column.items() if k == kind}

        return EvalData(
            labels=named("labels"),
            logits=named("logits"),
            weights=column.get(("weights", ""), np.empty(0, np.float32)),
            row_ids=column.get(("row_ids", ""), np.empty(0, np.int64)),
            groups=column.get(("groups", "")),
            slices=named("slices"),
            slice_vocab={name: list(vocab) for name, vocab in self._vocab.items()},
            oracle_logits=named("oracle"),
        )


# ---- whole-split metrics --------------------------------------------------------------------


def _json_safe(value: Any) -> Any:
    """Converts numpy scalars to Python ones and nan/inf to None, recursively."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_json_safe(v) for v in value.tolist()]
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
    y = _check_labels(data.labels[label], f"labels[{label!r}]")
    _check_length(y, f"labels[{label!r}]", data.rows, "row_ids")
    return y, _check_scores(data.logits[label], f"logits[{label!r}]", data.rows, "row_ids")


def _data_weights(data: EvalData) -> np.ndarray | None:
    w = _check_weights(data.weights, data.rows, "row_ids")
    return None if w is None or (w == 1.0).all() else w  # unit weights take the fast path


def _check_data(data: EvalData, label_names: Sequence[str]) -> None:
    if not isinstance(data, EvalData):
        raise ValueError(f"data must be an EvalData, got {type(data).__name__}")
    if data.rows == 0:
        raise ValueError("data has no rows; expected at least one")
    if isinstance(label_names, str) or not label_names:
        raise ValueError(f"label_names must be a non-empty list of label names, "
                         f"got {label_names!r}")


def compute_metrics(data: EvalData, label_names: Sequence[str],
                    slice_columns: Sequence[str] = (), bins: int = 20,
                    max_slices: int = 20) -> dict:
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
    bins = _check_positive_int(bins, "bins")
    max_slices = _check_positive_int(max_slices, "max_slices")
    rows = data.rows
    weights = _data_weights(data)
    groups = None if data.groups is None else _check_groups(data.groups, rows, "row_ids")
    slice_ids = {}
    for column in slice_columns:
        if column not in data.slices:
            raise ValueError(f"slice column {column!r} is not in the data; it has "
                             f"{sorted(data.slices)}")
        values = _as_1d(data.slices[column], f"slices[{column!r}]")
        _check_length(values, f"slices[{column!r}]", rows, "row_ids")
        slice_ids[column] = _slice_ids(values, max_slices, data.slice_vocab.get(column))
    result: dict[str, Any] = {
        "rows": rows,
        "weight": float(rows if weights is None else weights.sum()),
        "labels": {},
    }
    for label in label_names:
        y, x = _data_label(data, label)
        predicted = _sigmoid(x)
        loss = _softplus_loss(y, x)
        entry = _model_metrics(y, x, loss, weights)
        entry["ctr"] = _weighted_mean(y, weights)
        entry["predicted_ctr"] = _weighted_mean(predicted, weights)
        entry["calibration"] = _calibration(y, predicted, weights, bins)
        if groups is not None:
            entry["gauc"] = _gauc(y, x, groups, weights)
        entry["slices"] = {column: _slice_metrics(y, x, predicted, loss, weights, *ids)
                           for column, ids in slice_ids.items()}
        if label in data.oracle_logits:
            oracle = _check_scores(data.oracle_logits[label], f"oracle_logits[{label!r}]",
                                   rows, "row_ids")
            entry["oracle"] = _model_metrics(y, oracle, _softplus_loss(y, oracle), weights)
        result["labels"][label] = entry
    return _json_safe(result)


def _model_metrics(labels: np.ndarray, logits: np.ndarray, loss: np.ndarray,
                   weights: np.ndarray | None) -> dict:
    mean_loss = _weighted_mean(loss, weights)
    return {
        "auc": _auc(labels, logits, weights),
        "logloss": mean_loss,
        "normalized_entropy": _normalized_entropy(mean_loss, _weighted_mean(labels, weights)),
    }


def curves(data: EvalData, label_names: Sequence[str], max_points: int = 500) -> dict:
    """ROC curves for the report's plots (not part of metrics.json).

    Returns:
      ``{label: {"model": {"fpr", "tpr", "auc"}, "oracle": {...} (with oracle logits)}}``
      with the points as lists of floats (empty when a class is missing).
    """
    _check_data(data, label_names)
    max_points = _check_positive_int(max_points, "max_points", 2)
    weights = _data_weights(data)
    result = {}
    for label in label_names:
        y, x = _data_label(data, label)
        models = {"model": x}
        if label in data.oracle_logits:
            models["oracle"] = _check_scores(data.oracle_logits[label],
                                             f"oracle_logits[{label!r}]", data.rows, "row_ids")
        result[label] = {}
        for name, scores in models.items():
            fpr, tpr = _roc_curve(y, scores, weights, max_points)
            result[label][name] = {"fpr": fpr.tolist(), "tpr": tpr.tolist(),
                                   "auc": _auc(y, scores, weights)}
    return _json_safe(result)


# ---- comparing two runs ---------------------------------------------------------------------


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
        raise ValueError(f"metrics_new and metrics_base share no label: "
                         f"{sorted(metrics_new['labels'])} vs {sorted(metrics_base['labels'])}")
    paths = {"auc": ("auc",), "logloss": ("logloss",),
             "normalized_entropy": ("normalized_entropy",), "gauc": ("gauc", "gauc"),
             "calibration_ratio": ("calibration", "ratio")}
    return {label: {key: _delta(_lookup(metrics_new["labels"][label], *path),
                                _lookup(metrics_base["labels"][label], *path))
                    for key, path in paths.items()}
            for label in shared}


def build_comparison(baseline: str, metrics_new: Mapping[str, Any],
                     metrics_base: Mapping[str, Any],
                     bootstrap: Mapping[str, Mapping[str, Any]] | None = None) -> dict:
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
    return _json_safe({"baseline": str(baseline), "labels": labels})
