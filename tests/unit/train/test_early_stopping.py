"""The early-stopping record: gains, patience, min_delta, both metrics, and a record
that survives a checkpoint (``tests/cluster/test_early_stopping.py`` trains with it)."""

from __future__ import annotations

import json

import pytest

from recsys_dist.config.sections import EarlyStoppingSpec
from recsys_dist.train.early_stopping import EarlyStopping


def _feed(stopping: EarlyStopping, values: list[float]) -> list[bool]:
    return [
        stopping.record(epoch, 100 * epoch, value) for epoch, value in enumerate(values, start=1)
    ]


def test_auc_stops_after_patience_passes_without_a_gain_and_keeps_the_best():
    stopping = EarlyStopping(EarlyStoppingSpec(patience=2), "click")
    assert _feed(stopping, [0.70, 0.72, 0.715, 0.719]) == [False, False, False, True]
    assert stopping.best == {"epoch": 2, "step": 200, "value": 0.72}
    assert stopping.stopped and stopping.passes_since_best == 2
    assert "best: epoch 2, 0.7200; 2 of 2 epoch(s) without a gain" in stopping.describe_last()


def test_a_gain_below_min_delta_does_not_count():
    stopping = EarlyStopping(EarlyStoppingSpec(patience=1, min_delta=0.001), "click")
    assert _feed(stopping, [0.70, 0.7005]) == [False, True]
    assert stopping.best["epoch"] == 1


def test_logloss_improves_downwards():
    stopping = EarlyStopping(EarlyStoppingSpec(patience=1, metric="logloss"), "click")
    assert _feed(stopping, [0.50, 0.48, 0.47, 0.471]) == [False, False, False, True]
    assert stopping.best["epoch"] == 3
    assert stopping.describe_last().startswith("validate epoch 4: logloss/click 0.4710")


@pytest.mark.parametrize("stored", [None, {}])
def test_a_checkpoint_without_a_record_starts_afresh(stored):
    stopping = EarlyStopping(EarlyStoppingSpec(), "click")
    stopping.restore(stored)
    assert stopping.history == [] and stopping.best is None and not stopping.stopped


def test_the_record_survives_a_checkpoint_and_goes_on_counting():
    stopping = EarlyStopping(EarlyStoppingSpec(patience=2), "click")
    _feed(stopping, [0.70, 0.72, 0.71])
    resumed = EarlyStopping(EarlyStoppingSpec(patience=2), "click")
    resumed.restore(json.loads(json.dumps(stopping.to_json())))
    assert resumed.history == stopping.history and resumed.best is resumed.history[1]
    assert resumed.record(4, 400, 0.715)  # the second pass without a gain
    assert resumed.best["epoch"] == 2
