"""The training loop's parts that need no cluster: the attempt's counters and mean loss
(``train/attempt.py``), the cadence of logs, summaries and checkpoints
(``train/cadence.py``), the progress line (``train/reporting.py``), the hooks' defaults
(``train/hooks.py``) and the training window of dynamic-table bookkeeping
(``train/table_bookkeeping.py``). The loop itself runs on servers in
tests/cluster/test_train.py and test_early_stopping.py."""

from __future__ import annotations

import datetime
import math
import types

import pytest

from recsys_dist.config.sections import TrainSpec
from recsys_dist.train import cadence as cadence_module
from recsys_dist.train.attempt import Attempt, mean_loss
from recsys_dist.train.cadence import Cadence
from recsys_dist.train.hooks import Hook
from recsys_dist.train.reporting import AUC_SHOWN_AFTER, progress_line
from recsys_dist.train.table_bookkeeping import describe_time, training_window


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(cadence_module.time, "perf_counter", fake)
    return fake


def test_an_attempt_counts_items_and_weighs_the_mean_loss(clock):
    attempt = Attempt(first_step=40, keep=2, cadence=Cadence(TrainSpec(), 40))
    assert math.isnan(attempt.mean_loss())
    attempt.count(loss_sum=6.0, weight=10.0, rows=12, steps=3)  # 2 rows skipped
    attempt.count(loss_sum=0.0, weight=0.0, rows=0, steps=0)  # an empty item: no loss
    attempt.count(loss_sum=1.0, weight=10.0, rows=10, steps=2)
    assert (attempt.counters.steps, attempt.counters.rows, attempt.counters.skipped) == (5, 22, 2)
    assert attempt.step == 45
    assert attempt.mean_loss() == pytest.approx(7.0 / 20.0)
    attempt.count(loss_sum=3.0, weight=10.0, rows=10, steps=2)  # keeps the last 2 only
    assert attempt.mean_loss() == pytest.approx(4.0 / 20.0)
    assert math.isnan(mean_loss([(1.0, 0.0)]))


def test_the_cadence_logs_summarizes_and_checkpoints_when_due(clock):
    train = TrainSpec(
        log_every_seconds=10,
        summary_every_seconds=30,
        checkpoint_every_steps=100,
        checkpoint_every_seconds=None,
    )
    cadence = Cadence(train, first_step=1000)
    clock.now += 5
    assert not cadence.log_due(clock.now) and not cadence.summary_due(clock.now)
    clock.now += 6
    assert cadence.log_due(clock.now) and not cadence.log_due(clock.now)  # once per period
    assert not cadence.checkpoint_due(clock.now, 1099)
    assert cadence.checkpoint_due(clock.now, 1100)
    cadence.saved(1100)
    assert not cadence.checkpoint_due(clock.now, 1150)
    clock.now += 30
    assert cadence.summary_due(clock.now)
    by_time = Cadence(TrainSpec(checkpoint_every_steps=None, checkpoint_every_seconds=60), 0)
    clock.now += 59
    assert not by_time.checkpoint_due(clock.now, 10)
    clock.now += 1
    assert by_time.checkpoint_due(clock.now, 10)


def test_the_progress_line_shows_rate_loss_progress_and_the_auc_once_it_has_rows(clock):
    attempt = Attempt(first_step=0, keep=8, cadence=Cadence(TrainSpec(), 0))
    position = types.SimpleNamespace(finished_rows=250, total_rows=1000, epochs=2)
    attempt.window.append((0.0, 0))
    read = lambda: {"click": 0.7}  # noqa: E731
    assert progress_line(attempt, position, ["click"], 100, read) is None  # no rate
    attempt.count(loss_sum=5.0, weight=10.0, rows=500, steps=5)
    attempt.window.append((2.0, 500))
    attempt.epoch = 0
    line = progress_line(attempt, position, ["click"], 100, read)
    assert line == (
        "step 5 | 250 ex/s | loss 0.5000 | auc/click (pass starting) (epoch 1/2) | 25% | ETA 3s"
    )
    shown = progress_line(attempt, position, ["click"], 500 // AUC_SHOWN_AFTER, read)
    assert "auc/click 0.7000 (epoch 1/2)" in shown
    # the first reading is still on its way
    waiting = progress_line(attempt, position, ["click"], 500 // AUC_SHOWN_AFTER, lambda: None)
    assert "auc/click (reading) (epoch 1/2)" in waiting


def test_a_hook_does_nothing_unless_it_says_so():
    hook, attempt = Hook(), object()
    hook.begin(attempt)
    assert hook.after_pass(attempt, 1) is False and hook.end(attempt) is False
    assert hook.state() is None and hook.state_key is None


def test_the_training_window_is_the_train_splits_dates_or_its_start_or_today():
    from recsys_dist.config.sections import DataSpec, DataSplit

    at = datetime.datetime
    data = DataSpec(path="d", train=DataSplit(dates="2026-01-01..2026-01-03"))
    assert training_window(data) == (at(2026, 1, 1), at(2026, 1, 3))
    today = at.combine(datetime.date.today(), datetime.time())
    assert training_window(None) == (today, today)
    assert training_window(DataSpec(path="d", train=DataSplit(glob="x/*"))) == (today, today)
    hour = at(2026, 3, 4, 13)
    assert training_window(DataSpec(path="d", train=DataSplit(glob="x", start=hour))) == (
        hour,
        hour,
    )


def test_times_print_as_dates_at_midnight_and_with_their_hour_otherwise():
    assert describe_time(datetime.datetime(2026, 1, 2)) == "2026-01-02"
    assert describe_time(datetime.datetime(2026, 1, 2, 13)) == "2026-01-02 13:00"


def test_a_storage_failure_of_a_worker_that_was_unreachable_is_a_lost_task():
    """A worker whose link was down failed its read; the failure comes back with the
    link: the run restarts from its last checkpoint (ClusterLost) instead of stopping on
    a storage failure. With every worker answering, it stays a storage failure."""
    from recsys_dist.errors import ClusterLost
    from recsys_dist.storage_io import StorageError
    from recsys_dist.train.trainer import Trainer

    def fail(away: list[int]):
        trainer = types.SimpleNamespace(
            runtime=types.SimpleNamespace(workers_unreachable_within=lambda seconds: away)
        )
        with Trainer._storage_failures_of_unreachable_workers_as_cluster_lost(trainer):
            raise StorageError("s3://b/part-0.parquet: cannot read it on a worker: timed out")

    with pytest.raises(ClusterLost, match=r"worker 1 was unreachable while a read of it failed"):
        fail([1])
    with pytest.raises(StorageError, match="cannot read it on a worker"):
        fail([])
