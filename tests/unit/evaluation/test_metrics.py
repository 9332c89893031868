"""Offline evaluation metrics and report: hand-computed values, brute force and rejections.

Covers every module of ``evaluation/metrics/`` through the package's public names:
``ranking.py`` (AUC, GAUC, ROC), ``loss.py`` (logloss, normalized entropy, calibration),
``slices.py``, ``bootstrap.py``, ``collect.py`` (the accumulator), ``split.py``
(``compute_metrics``), ``compare.py``, ``numerics.py`` and ``checks.py`` (the rejections);
and the report of one evaluation (``evaluation/report.py``).
"""

from __future__ import annotations

import json
import math
import pathlib
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from recsys_dist.evaluation import metrics as M
from recsys_dist.evaluation.metrics import bootstrap, numerics, ranking
from recsys_dist.evaluation.report import write_report

LN2 = math.log(2.0)

# 3 positives, 2 negatives, one positive tied with a negative at 0.5.
Y5 = np.array([1, 1, 1, 0, 0])
S5 = np.array([0.9, 0.5, 0.3, 0.5, 0.1])


def brute_force_auc(labels, scores, weights):
    """O(n^2) weighted pair count; a tie counts one half."""
    pos = labels == 1
    sp, wp = scores[pos][:, None], weights[pos][:, None]
    sn, wn = scores[~pos][None, :], weights[~pos][None, :]
    credit = (sp > sn) + 0.5 * (sp == sn)
    return float((wp * wn * credit).sum() / (wp.sum() * wn.sum()))


def logit(p):
    return math.log(p / (1.0 - p))


# ---- auc ------------------------------------------------------------------------------------


def test_auc_hand_example_with_a_tie():
    # Pairs (positive score, negative score): (.9,.5)=1 (.9,.1)=1 (.5,.5)=1/2 (.5,.1)=1
    # (.3,.5)=0 (.3,.1)=1 -> 4.5 / 6 = 0.75.
    assert M.auc(Y5, S5) == pytest.approx(0.75, abs=1e-15)


def test_auc_hand_example_weighted():
    # weights 2,1,1 on the positives (.9,.5,.3) and 1,3 on the negatives (.5,.1):
    # .9: 2*1 + 2*3 = 8;  .5: 1*1*(1/2) + 1*3 = 3.5;  .3: 0 + 1*3 = 3  -> 14.5
    # total pair weight (2+1+1) * (1+3) = 16  -> 14.5 / 16 = 0.90625.
    assert M.auc(Y5, S5, [2, 1, 1, 1, 3]) == pytest.approx(0.90625, abs=1e-15)


def test_auc_matches_brute_force_with_ties_and_weights():
    rng = np.random.default_rng(7)
    for _ in range(10):
        n = int(rng.integers(50, 400))
        labels = rng.integers(0, 2, n)
        scores = rng.integers(0, 12, n).astype(np.float64)  # many ties
        weights = rng.random(n) * 3
        weights[rng.random(n) < 0.1] = 0.0
        expected = brute_force_auc(labels, scores, weights)
        assert abs(M.auc(labels, scores, weights) - expected) < 1e-12
        assert abs(M.auc(labels, scores) - brute_force_auc(labels, scores, np.ones(n))) < 1e-12


def test_auc_is_nan_when_a_class_has_no_weight():
    assert math.isnan(M.auc([1, 1, 0], [0.1, 0.2, 0.3], [1, 1, 0]))
    assert math.isnan(M.auc([1, 1], [0.1, 0.2]))


def test_auc_accepts_bool_and_float_labels_and_float32_scores():
    assert M.auc(Y5.astype(bool), S5.astype(np.float32)) == pytest.approx(0.75)
    assert M.auc(Y5.astype(np.float64), S5) == pytest.approx(0.75)


# ---- logloss, normalized entropy, calibration ------------------------------------------------


def test_logloss_hand_example():
    # Row 1: y=1, logit 0 -> p=1/2, loss ln 2.  Row 2: y=0, logit ln 3 -> p=3/4, loss -ln(1/4)
    # = 2 ln 2.  Mean (ln 2 + 2 ln 2) / 2 = 1.5 ln 2; weights 1,3: (ln 2 + 6 ln 2) / 4 = 1.75 ln 2.
    logits = [0.0, math.log(3.0)]
    assert M.logloss([1, 0], logits) == pytest.approx(1.5 * LN2, rel=1e-14)
    assert M.logloss([1, 0], logits, [1, 3]) == pytest.approx(1.75 * LN2, rel=1e-14)


def test_logloss_is_stable_for_huge_logits():
    # y=1, x=1000: loss ~0;  y=0, x=1000: loss 1000;  mean 500.  No overflow, no nan.
    assert M.logloss([1, 0], [1000.0, 1000.0]) == pytest.approx(500.0)
    assert M.logloss([0], [-1000.0]) == pytest.approx(0.0, abs=1e-300)


def test_normalized_entropy_hand_values():
    # Base rate 1/2 -> entropy ln 2; logloss 1.5 ln 2 (above) -> NE = 1.5.
    assert M.normalized_entropy([1, 0], [0.0, math.log(3.0)]) == pytest.approx(1.5, rel=1e-14)
    # Predicting the base rate 1/4 on every row: logloss == entropy(1/4) -> NE = 1.
    assert M.normalized_entropy([1, 0, 0, 0], [logit(0.25)] * 4) == pytest.approx(1.0, rel=1e-14)
    # Weighted base rate: weights 3,1,1,1 -> rate 3/6 = 1/2; predicting 1/2 gives NE = 1.
    assert M.normalized_entropy([1, 0, 0, 0], [0.0] * 4, [3, 1, 1, 1]) == pytest.approx(1.0)
    assert math.isnan(M.normalized_entropy([0, 0], [0.0, 1.0]))


def test_calibration_hand_example():
    # Predictions .1 .1 .4 .4, labels 0 0 1 0: predicted CTR (.1+.1+.4+.4)/4 = .25, observed
    # 1/4 -> ratio 1.  Two equal-count bins split at the median .25:
    # [.1, .25): mean .1, observed 0/2;  [.25, .4]: mean .4, observed 1/2.
    logits = [logit(0.1), logit(0.1), logit(0.4), logit(0.4)]
    result = M.calibration([0, 0, 1, 0], logits, bins=2)
    assert result["predicted_ctr"] == pytest.approx(0.25)
    assert result["observed_ctr"] == pytest.approx(0.25)
    assert result["ratio"] == pytest.approx(1.0)
    first, second = result["bins"]
    assert (first["lower"], first["upper"]) == pytest.approx((0.1, 0.25))
    assert (first["mean_predicted"], first["observed"], first["rows"]) == pytest.approx(
        (0.1, 0.0, 2)
    )
    assert (second["mean_predicted"], second["observed"], second["weight"]) == pytest.approx(
        (0.4, 0.5, 2.0)
    )


def test_calibration_ratio_and_empty_bins_dropped():
    # Every prediction 1/2, observed 1/4 -> ratio 2; all rows tie, so 19 of 20 bins are empty.
    result = M.calibration([1, 0, 0, 0], [0.0] * 4)
    assert result["ratio"] == pytest.approx(2.0)
    assert len(result["bins"]) == 1 and result["bins"][0]["rows"] == 4
    # Weights 3,1,1,1: observed 3/6 = 1/2 -> ratio 1.
    assert M.calibration([1, 0, 0, 0], [0.0] * 4, [3, 1, 1, 1])["ratio"] == pytest.approx(1.0)


def test_calibration_bins_hold_equal_counts():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=10_000)
    labels = rng.random(10_000) < numerics.sigmoid(logits)
    result = M.calibration(labels, logits, bins=10)
    assert [b["rows"] for b in result["bins"]] == [1000] * 10
    assert sum(b["weight"] for b in result["bins"]) == 10_000


# ---- gauc -----------------------------------------------------------------------------------


def gauc_example():
    # user 7: labels 1 0 0, scores .8 .3 .9 -> the positive beats .3, loses to .9: AUC 1/2
    # user 3: labels 1 1 0 0, scores .7 .4 .5 .1 -> (.7,.5)=1 (.7,.1)=1 (.4,.5)=0 (.4,.1)=1: 3/4
    # user 9: labels 0 0 -> one class: skipped (2 rows)
    # GAUC = (3 * 1/2 + 4 * 3/4) / (3 + 4) = 4.5 / 7
    groups = np.array([7, 7, 7, 3, 3, 3, 3, 9, 9])
    labels = np.array([1, 0, 0, 1, 1, 0, 0, 0, 0])
    scores = np.array([0.8, 0.3, 0.9, 0.7, 0.4, 0.5, 0.1, 0.2, 0.6])
    return groups, labels, scores


def test_gauc_hand_example_skips_single_class_user():
    groups, labels, scores = gauc_example()
    shuffle = np.random.default_rng(0).permutation(len(groups))
    result = M.gauc(labels[shuffle], scores[shuffle], groups[shuffle])
    assert result["gauc"] == pytest.approx(4.5 / 7, abs=1e-15)
    assert (result["groups"], result["skipped_groups"], result["skipped_rows"]) == (2, 1, 2)


def test_gauc_weighted_with_ties_and_any_group_ids():
    # Weights 2 on user 7's rows: its impressions weigh 6 and its AUC is unchanged (1/2);
    # user 3 keeps 3/4 -> (6 * 1/2 + 4 * 3/4) / 10 = 0.6.  Huge ids take the stable-sort path,
    # strings are mapped to codes; all give the same answer.
    groups, labels, scores = gauc_example()
    weights = np.where(groups == 7, 2.0, 1.0)
    for ids in (groups, groups * 2**60, groups.astype(str)):
        assert M.gauc(labels, scores, ids, weights)["gauc"] == pytest.approx(0.6, abs=1e-15)
    # Ties inside a user get half credit: user 3 all tied -> 1/2; (3/2 + 4/2) / 7 = 1/2.
    tied = np.where(groups == 3, 0.5, scores)
    assert M.gauc(labels, tied, groups)["gauc"] == pytest.approx(0.5)


def test_group_score_order_equals_lexsort_on_every_path():
    rng = np.random.default_rng(4)
    scores = rng.normal(size=4000)
    scores[rng.random(4000) < 0.3] = 0.0
    scores[rng.random(4000) < 0.1] = -0.0  # ties with +0.0
    groups = rng.integers(-30, 30, 4000)
    for s in (scores, scores.astype(np.float32)):
        for g in (groups, groups * 2**58):  # packed float32 key, rank key, stable fallback
            order = ranking._group_score_order(g, s)
            expected = np.lexsort((s, g))
            assert np.array_equal(g[order], g[expected]) and np.array_equal(s[order], s[expected])


def test_gauc_matches_per_group_auc_on_random_data():
    rng = np.random.default_rng(3)
    n = 3000
    groups = rng.integers(-50, 50, n)
    labels = rng.integers(0, 2, n)
    scores = rng.integers(0, 8, n).astype(float)
    weights = rng.random(n)
    total = norm = 0.0
    for g in np.unique(groups):
        rows = groups == g
        if labels[rows].min() == labels[rows].max():
            continue
        total += weights[rows].sum() * brute_force_auc(labels[rows], scores[rows], weights[rows])
        norm += weights[rows].sum()
    assert abs(M.gauc(labels, scores, groups, weights)["gauc"] - total / norm) < 1e-12
    float32 = M.gauc(labels, scores.astype(np.float32), groups, weights)["gauc"]
    assert abs(float32 - total / norm) < 1e-12


# ---- roc curve ------------------------------------------------------------------------------


def test_roc_curve_hand_example():
    # Thresholds from the top: .9 -> TP 1 FP 0; .5 -> TP 2 FP 1; .3 -> TP 3 FP 1; .1 -> all.
    fpr, tpr = M.roc_curve(Y5, S5)
    assert fpr.tolist() == pytest.approx([0, 0, 0.5, 0.5, 1])
    assert tpr.tolist() == pytest.approx([0, 1 / 3, 2 / 3, 1, 1])
    assert np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2) == pytest.approx(0.75)  # = AUC


def test_roc_curve_downsampled_keeps_the_ends():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=20_000)
    fpr, tpr = M.roc_curve(rng.random(20_000) < numerics.sigmoid(scores), scores, max_points=50)
    assert 2 < len(fpr) <= 50
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0, 0, 1, 1)
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)


# ---- slices ---------------------------------------------------------------------------------


def test_slice_metrics_merges_small_slices_into_other():
    # a (4 rows): labels 1 0 1 0, logits 2 1 0 -1 -> (2,1)=1 (2,-1)=1 (0,1)=0 (0,-1)=1: AUC 3/4
    # b (3 rows): labels 1 1 0, logits 0 0 0 -> all tied: AUC 1/2, CTR 2/3, logloss ln 2
    # c (2 rows) + d (1 row) -> "(other)": labels 0 0 1, logits 0: AUC 1/2, CTR 1/3
    values = np.array(["b", "a", "a", "c", "b", "a", "d", "b", "a", "c"])
    labels = np.array([1, 1, 0, 0, 1, 1, 1, 0, 0, 0])
    logits = np.array([0, 2, 1, 0, 0, 0, 0, 0, -1, 0], dtype=float)
    result = M.slice_metrics(labels, logits, values, max_slices=2)
    assert [s["value"] for s in result] == ["a", "b", "(other)"]
    assert [s["rows"] for s in result] == [4, 3, 3]
    a, b, other = result
    assert (a["auc"], a["ctr"]) == pytest.approx((0.75, 0.5))
    assert (b["auc"], b["ctr"], b["predicted_ctr"], b["logloss"]) == pytest.approx(
        (0.5, 2 / 3, 0.5, LN2)
    )
    assert (other["auc"], other["ctr"]) == pytest.approx((0.5, 1 / 3))
    # Without merging: c and d are separate and d (one class) has no AUC.
    full = M.slice_metrics(labels, logits, values)
    assert [s["value"] for s in full] == ["a", "b", "c", "d"]
    assert math.isnan(full[3]["auc"])


def test_slice_metrics_numeric_values_and_vocabulary():
    labels = np.array([1, 0, 1, 0, 1])
    logits = np.zeros(5)
    numeric = M.slice_metrics(labels, logits, np.array([5, 5, 5, 2, 2]))
    assert [(s["value"], s["rows"]) for s in numeric] == [("5", 3), ("2", 2)]
    coded = M.slice_metrics(labels, logits, np.array([1, 1, 1, 0, 0]), vocabulary=["us", "de"])
    assert [(s["value"], s["rows"]) for s in coded] == [("de", 3), ("us", 2)]


# ---- bootstrap ------------------------------------------------------------------------------


def bootstrap_data(n, seed=0):
    rng = np.random.default_rng(seed)
    truth = rng.normal(size=n)
    labels = (rng.random(n) < numerics.sigmoid(truth - 2)).astype(np.int8)
    new = (truth + 0.6 * rng.normal(size=n)).astype(np.float32)
    base = (truth + 0.9 * rng.normal(size=n)).astype(np.float32)
    return labels, new, base


def test_bootstrap_delta_is_the_auc_difference_and_inside_the_interval():
    labels, new, base = bootstrap_data(20_000)
    weights = np.random.default_rng(1).random(20_000)
    result = M.paired_bootstrap_auc_delta(labels, new, base, weights, replicates=200)
    assert result["delta"] == M.auc(labels, new, weights) - M.auc(labels, base, weights)
    assert result["low"] <= result["delta"] <= result["high"]
    assert result["delta"] > 0 and result["p_worse"] < 0.05
    assert result["replicates"] == 200 and result["confidence"] == 0.95
    # The same seed gives the same result, whatever the threads and blocks.
    again = M.paired_bootstrap_auc_delta(labels, new, base, weights, replicates=200, threads=1)
    assert again == result


def test_bootstrap_identical_scores_give_zero():
    labels, new, _ = bootstrap_data(5000)
    result = M.paired_bootstrap_auc_delta(labels, new, new.copy(), replicates=50)
    assert (result["delta"], result["low"], result["high"], result["p_worse"]) == (0, 0, 0, 0)


def test_bootstrap_replicates_equal_weighted_auc_with_the_drawn_weights():
    # Re-draw the Poisson weights of each block and recompute both AUCs directly.
    rng = np.random.default_rng(5)
    n = 500
    labels = rng.integers(0, 2, n).astype(np.int8)
    new, base = rng.integers(0, 20, n).astype(float), rng.normal(size=n).round(1)
    weights = rng.random(n)
    for block_elements in (1, 3 * n):
        with ThreadPoolExecutor(2) as pool:
            deltas = bootstrap._bootstrap_deltas(
                bootstrap._Presorted(labels, new, weights),
                bootstrap._Presorted(labels, base, weights),
                7,
                11,
                block_elements,
                pool,
            )
        block = max(1, block_elements // n)
        order = np.argsort(new)
        expected = []
        for start, seed in zip(range(0, 7, block), np.random.SeedSequence(11).spawn(7)):
            draws = bootstrap._poisson1(np.random.default_rng(seed), (min(block, 7 - start), n))
            for row in draws:
                drawn = np.empty(n)
                drawn[order] = row
                expected.append(
                    M.auc(labels, new, weights * drawn) - M.auc(labels, base, weights * drawn)
                )
        assert np.max(np.abs(deltas - expected)) < 1e-12


def test_poisson_draws_follow_poisson_one():
    draws = bootstrap._poisson1(np.random.default_rng(0), (2_000_000,))
    counts = np.bincount(draws, minlength=8)[:8] / draws.size
    pmf = [math.exp(-1) / math.factorial(k) for k in range(8)]
    assert np.allclose(counts, pmf, atol=1e-3)
    assert draws.mean() == pytest.approx(1.0, abs=3e-3)
    assert draws.var() == pytest.approx(1.0, abs=5e-3)


def test_bootstrap_runs_on_a_million_rows():
    labels, new, base = bootstrap_data(1_000_000, seed=2)
    result = M.paired_bootstrap_auc_delta(labels, new, base, replicates=40)
    assert result["replicates"] == 40
    assert result["low"] < result["delta"] < result["high"]
    assert result["high"] - result["low"] < 0.01


# ---- accumulator, whole-split metrics, comparison -------------------------------------------


def make_outputs(n, seed=0):
    rng = np.random.default_rng(seed)
    truth = rng.normal(size=n)
    return {
        "labels": {
            "click": (rng.random(n) < numerics.sigmoid(truth - 1)).astype(np.int64),
            "conversion": (rng.random(n) < numerics.sigmoid(truth - 3)).astype(np.int64),
        },
        "logits": {
            "click": truth - 1 + 0.5 * rng.normal(size=n),
            "conversion": truth - 3 + 0.7 * rng.normal(size=n),
        },
        "weights": rng.choice([1.0, 2.0], n),
        "row_ids": np.arange(n, dtype=np.int64),
        "groups": rng.integers(0, 300, n),
        "slices": {
            "country": rng.choice(["us", "de", "fr", "jp"], n, p=[0.5, 0.3, 0.15, 0.05]),
            "hour": rng.integers(0, 24, n),
        },
        "oracle_logits": {"click": truth - 1},
    }


def take(outputs, start, stop):
    def cut(value):
        if isinstance(value, dict):
            return {k: cut(v) for k, v in value.items()}
        return value[start:stop]

    return {k: cut(v) for k, v in outputs.items()}


def test_accumulator_in_chunks_equals_one_shot():
    outputs = make_outputs(5000)
    one = M.EvalAccumulator()
    one.add(**outputs)
    chunked = M.EvalAccumulator()
    for start, stop in [(0, 1200), (1200, 1200), (1200, 3900), (3900, 5000)]:
        chunked.add(**take(outputs, start, stop))
    assert chunked.rows == one.rows == 5000
    # 2 labels * 5 + weights 4 + row ids 8 + groups 8 + 1 oracle * 4
    # + country codes 4 + hour int64 8 bytes per row.
    assert chunked.bytes_used == one.bytes_used == 5000 * (10 + 4 + 8 + 8 + 4 + 4 + 8)
    a, b = one.finish(), chunked.finish()
    assert b.labels["click"].dtype == np.int8 and b.logits["click"].dtype == np.float32
    assert b.slices["country"].dtype == np.int32
    decoded = np.array(b.slice_vocab["country"])[b.slices["country"]]
    assert decoded.tolist() == outputs["slices"]["country"].tolist()
    for field in ("weights", "row_ids", "groups"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    args = (["click", "conversion"], ["country", "hour"])
    assert M.compute_metrics(a, *args) == M.compute_metrics(b, *args)
    assert chunked.finish().rows == 5000  # finishing twice is fine


def test_compute_metrics_layout_and_values():
    outputs = make_outputs(4000)
    accumulator = M.EvalAccumulator()
    accumulator.add(**outputs)
    data = accumulator.finish()
    result = M.compute_metrics(data, ["click", "conversion"], ["country"], bins=10)
    json.dumps(result, allow_nan=False)  # JSON-serialisable, nan already mapped to None
    assert result["rows"] == 4000 and result["weight"] == outputs["weights"].sum()
    click = result["labels"]["click"]
    assert set(click) == {
        "auc",
        "logloss",
        "normalized_entropy",
        "ctr",
        "predicted_ctr",
        "calibration",
        "gauc",
        "slices",
        "oracle",
    }
    assert "oracle" not in result["labels"]["conversion"]
    y, x = outputs["labels"]["click"], data.logits["click"]
    w = outputs["weights"]
    assert click["auc"] == pytest.approx(M.auc(y, x, w), abs=1e-12)
    assert click["logloss"] == pytest.approx(M.logloss(y, x, w), rel=1e-12)
    assert click["gauc"] == M.json_safe(M.gauc(y, x, outputs["groups"], w))
    assert click["oracle"]["auc"] == pytest.approx(
        M.auc(y, data.oracle_logits["click"], w), abs=1e-12
    )
    assert [s["value"] for s in click["slices"]["country"]] == ["us", "de", "fr", "jp"]
    assert len(click["calibration"]["bins"]) == 10
    roc = M.curves(data, ["click"])["click"]
    assert set(roc) == {"model", "oracle"} and roc["model"]["fpr"][-1] == 1.0


def test_compare_and_build_comparison():
    new = {
        "labels": {
            "click": {
                "auc": 0.75,
                "logloss": 0.40,
                "normalized_entropy": 0.80,
                "gauc": {"gauc": 0.70},
                "calibration": {"ratio": 1.05},
            }
        }
    }
    base = {
        "labels": {
            "click": {
                "auc": 0.74,
                "logloss": 0.42,
                "normalized_entropy": 0.85,
                "calibration": {"ratio": 1.00},
            }
        }
    }
    delta = M.compare(new, base)["click"]
    assert delta["auc"] == pytest.approx(0.01) and delta["logloss"] == pytest.approx(-0.02)
    assert delta["normalized_entropy"] == pytest.approx(-0.05)
    assert delta["calibration_ratio"] == pytest.approx(0.05)
    assert delta["gauc"] is None  # the baseline has no GAUC
    boot = {
        "delta": 0.01,
        "low": 0.005,
        "high": 0.015,
        "replicates": 200,
        "confidence": 0.95,
        "p_worse": 0.0,
    }
    section = M.build_comparison("runs/base", new, base, {"click": boot})
    assert section["baseline"] == "runs/base"
    assert section["labels"]["click"]["bootstrap"] == boot


# ---- rejections -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: M.auc([1, 0, 1], [0.1, 0.2]), r"scores has 2 rows but labels has 3"),
        (lambda: M.auc([], []), r"labels is empty"),
        (
            lambda: M.auc([1, 2, 0], [0.1, 0.2, 0.3]),
            r"labels must contain only 0 and 1; found 2 at row 1",
        ),
        (lambda: M.auc([1, 0.5], [0.1, 0.2]), r"labels must contain only 0 and 1; found 0\.5"),
        (lambda: M.auc(["a", "b"], [0.1, 0.2]), r"labels must hold numeric 0/1 values"),
        (lambda: M.auc([[1, 0]], [[0.1, 0.2]]), r"labels must be a 1-D array"),
        (
            lambda: M.logloss([1, 0], [0.1, 0.2], [1, -1]),
            r"weights must be >= 0; found -1\.0 at row 1",
        ),
        (lambda: M.logloss([1, 0], [0.1, 0.2], [1]), r"weights has 1 rows but labels has 2"),
        (lambda: M.logloss([1, 0], [np.nan, 0.2]), r"logits must be finite; found nan at row 0"),
        (lambda: M.normalized_entropy([1, 0], [0.1]), r"logits has 1 rows"),
        (lambda: M.calibration([1, 0], [0.1, 0.2], bins=0), r"bins must be an integer >= 1"),
        (lambda: M.gauc([1, 0], [0.1, 0.2], [1]), r"groups has 1 rows but labels has 2"),
        (lambda: M.gauc([1, 0], [0.1, 0.2], [0.5, 1.5]), r"groups must hold integer ids"),
        (
            lambda: M.roc_curve([1, 0], [0.1, 0.2], max_points=1),
            r"max_points must be an integer >= 2",
        ),
        (lambda: M.slice_metrics([1, 0], [0.1, 0.2], ["a"]), r"slice_values has 1 rows"),
        (lambda: M.slice_metrics([1, 0], [0.1, 0.2], ["a", "b"], max_slices=0), r"max_slices must"),
        (
            lambda: M.slice_metrics([1, 0], [0, 0], [0, 5], vocabulary=["x"]),
            r"integer codes in \[0, 1\)",
        ),
        (
            lambda: M.paired_bootstrap_auc_delta([1, 0], [0.1, 0.2], [0.3]),
            r"scores_base has 1 rows",
        ),
        (
            lambda: M.paired_bootstrap_auc_delta([1, 0], [0, 1], [0, 1], confidence=1.5),
            r"confidence must be a number in \(0, 1\)",
        ),
        (
            lambda: M.paired_bootstrap_auc_delta([1, 0], [0, 1], [0, 1], replicates=0),
            r"replicates must be an integer >= 1",
        ),
        (lambda: M.compare({"labels": {"a": {}}}, {"labels": {"b": {}}}), r"share no label"),
        (lambda: M.compare({}, {"labels": {}}), r"metrics_new must be a dict from compute_metrics"),
    ],
)
def test_bad_inputs_are_rejected_with_clear_messages(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_accumulator_and_compute_metrics_rejections():
    outputs = take(make_outputs(10), 0, 10)
    accumulator = M.EvalAccumulator()
    accumulator.add(**outputs)
    with pytest.raises(ValueError, match=r"does not match the first chunk"):
        accumulator.add(**{**outputs, "groups": None})
    with pytest.raises(ValueError, match=r"logits must have the same names as labels"):
        accumulator.add(**{**outputs, "logits": {"click": outputs["logits"]["click"]}})
    bad = {**outputs["labels"], "click": np.full(10, 3)}
    with pytest.raises(ValueError, match=r"labels\['click'\] must contain only 0 and 1"):
        accumulator.add(**{**outputs, "labels": bad})
    with pytest.raises(ValueError, match=r"labels\['click'\] has 10 rows but row_ids has 3"):
        accumulator.add(**{**outputs, "row_ids": np.arange(3)})
    assert accumulator.rows == 10  # failed chunks add nothing
    data = accumulator.finish()
    with pytest.raises(ValueError, match=r"label 'ctr' is not in the data"):
        M.compute_metrics(data, ["ctr"], [])
    with pytest.raises(ValueError, match=r"slice column 'city' is not in the data"):
        M.compute_metrics(data, ["click"], ["city"])
    with pytest.raises(ValueError, match=r"data has no rows"):
        M.compute_metrics(M.EvalAccumulator().finish(), ["click"], [])


# ---- report ---------------------------------------------------------------------------------


def test_report_is_self_contained_and_metrics_round_trip(tmp_path):
    outputs = make_outputs(3000)
    accumulator = M.EvalAccumulator()
    accumulator.add(**outputs)
    data = accumulator.finish()
    labels = ["click", "conversion"]
    metrics = M.compute_metrics(data, labels, ["country", "hour"])
    baseline = M.compute_metrics(
        M.EvalData(
            labels=data.labels,
            logits={k: v * 0.5 for k, v in data.logits.items()},
            weights=data.weights,
            row_ids=data.row_ids,
        ),
        labels,
        [],
    )
    boot = M.paired_bootstrap_auc_delta(
        data.labels["click"],
        data.logits["click"],
        data.logits["click"] * 0.5 + 0.1 * np.sin(np.arange(3000)),
        data.weights,
        replicates=50,
    )
    comparison = M.build_comparison("baseline <run>", metrics, baseline, {"click": boot})
    path = write_report(
        str(tmp_path / "out"), metrics, M.curves(data, labels), "Eval <day 3> & more", comparison
    )
    page = pathlib.Path(path).read_text(encoding="utf-8")
    assert path == str(tmp_path / "out" / "report.html")
    assert page.count("data:image/png;base64,") >= 2 * 2 + 2 * 2  # ROC, calibration, slices
    assert 'src="http' not in page and "<link" not in page
    assert "Eval &lt;day 3&gt; &amp; more" in page and "baseline &lt;run&gt;" in page
    assert re.search(r"\[-?0\.\d+, -?0\.\d+\] at 95%", page)  # the bootstrap interval
    stored = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert stored == {**metrics, "comparison": comparison}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["metrics.json", "report.html"]
