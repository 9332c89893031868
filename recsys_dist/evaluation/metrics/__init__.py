"""Exact offline evaluation metrics for CTR and ranking models, in pure numpy.

Inputs are per-row arrays: ``labels`` (0/1), ``logits`` (pre-sigmoid; functions that only
rank take ``scores``, any monotone transform of them) and optional ``weights`` (finite,
>= 0, default 1); a bad argument raises :class:`ValueError` naming it. Nothing is
approximated: AUC is tie-aware (unlike the bucketed ``tf.keras.metrics.AUC``) and sums
accumulate in float64. Python loops run only over labels, slices and blocks of bootstrap
replicates; memory per row and measured times are in docs/evaluation.md.

One module per family, each importing only those before it: ``checks``, ``numerics``,
``ranking``, ``loss``, ``slices``, ``bootstrap``, ``collect``, ``split``, ``compare``.
This package re-exports their public API: ``from recsys_dist.evaluation import metrics as
M``, then ``M.auc(...)``, ``M.compute_metrics(...)``, ``M.EvalAccumulator()``.
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
