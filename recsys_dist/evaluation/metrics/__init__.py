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
  ``max_slices + 1``) and blocks of bootstrap replicates. :class:`EvalAccumulator` keeps
  ``12 + 5 * L`` bytes per row for ``L`` labels, plus 8 with groups, 4 per oracle label and 4
  per string slice column (the values' own item size for a numeric slice column). Measured
  times and peak temporary memory at 10M rows: docs/evaluation.md, "Measured".

Modules, one per family (each imports only the ones above it in this list):
  ``checks``: input checks. ``numerics``: shared numerics (stable sigmoid and logloss,
  weighted means, the tie-aware AUC). ``ranking``: :func:`auc`, :func:`gauc`,
  :func:`roc_curve`. ``loss``: :func:`logloss`, :func:`normalized_entropy`,
  :func:`calibration`. ``slices``: :func:`slice_metrics`. ``bootstrap``:
  :func:`paired_bootstrap_auc_delta`. ``collect``: :class:`EvalData`,
  :class:`EvalAccumulator`. ``split``: :func:`compute_metrics`, :func:`curves`,
  :func:`json_safe`. ``compare``: :func:`compare`, :func:`build_comparison`.

This package re-exports their public API: ``from recsys_dist.evaluation import metrics as M``,
then ``M.auc(...)``, ``M.compute_metrics(...)``, ``M.EvalAccumulator()``.
"""

from recsys_dist.evaluation.metrics.bootstrap import paired_bootstrap_auc_delta
from recsys_dist.evaluation.metrics.collect import EvalAccumulator, EvalData
from recsys_dist.evaluation.metrics.compare import build_comparison, compare
from recsys_dist.evaluation.metrics.loss import calibration, logloss, normalized_entropy
from recsys_dist.evaluation.metrics.ranking import auc, gauc, roc_curve
from recsys_dist.evaluation.metrics.slices import OTHER, slice_metrics
from recsys_dist.evaluation.metrics.split import compute_metrics, curves, json_safe

__all__ = [
    "OTHER",
    "EvalAccumulator",
    "EvalData",
    "auc",
    "build_comparison",
    "calibration",
    "compare",
    "compute_metrics",
    "curves",
    "gauc",
    "json_safe",
    "logloss",
    "normalized_entropy",
    "paired_bootstrap_auc_delta",
    "roc_curve",
    "slice_metrics",
]
