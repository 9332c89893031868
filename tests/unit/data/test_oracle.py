"""The true-logit columns of synthetic data (``recsys_dist/data/oracle.py``): which columns
may hold a label's true logit, and which of them a data set has."""

from __future__ import annotations

from recsys_dist.data.oracle import oracle_candidates, oracle_columns
from recsys_dist.data.synth import RowGenerator


def test_the_first_label_may_use_the_plain_column_and_the_others_only_their_own():
    assert oracle_candidates(["click", "conversion"]) == (
        "oracle_logit_click",
        "oracle_logit",
        "oracle_logit_conversion",
    )
    assert oracle_candidates([]) == ()


def test_a_labels_own_column_wins_over_the_plain_one():
    present = ("x", "oracle_logit", "oracle_logit_click", "oracle_logit_conversion")
    assert oracle_columns(["click", "conversion"], present) == {
        "click": "oracle_logit_click",
        "conversion": "oracle_logit_conversion",
    }
    assert oracle_columns(["click", "conversion"], ("oracle_logit",)) == {"click": "oracle_logit"}
    # The plain column is the first label's only: a second label never reads it.
    assert oracle_columns(["conversion", "click"], ("oracle_logit_click",)) == {
        "click": "oracle_logit_click"
    }
    assert oracle_columns(["click"], ("click", "oracle")) == {}


def test_the_synthetic_data_has_a_true_logit_for_both_labels():
    columns = tuple(RowGenerator(0).table(0, 0, 10).column_names)
    assert oracle_columns(["click", "conversion"], columns) == {
        "click": "oracle_logit",
        "conversion": "oracle_logit_conversion",
    }
