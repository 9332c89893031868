"""The training loop (``train/loop.py``) on what it is given (``LoopParts``), with a
coordinator that runs each item at once in this process: what it hands out, what it
marks done, when it checkpoints, what the hooks see and the figures it returns. The loop
on servers runs in tests/cluster/test_train.py and test_early_stopping.py."""

from __future__ import annotations

import dataclasses

import pytest
import tensorflow as tf

from recsys_dist.cluster.runtime import Runtime
from recsys_dist.config.sections import TrainSpec
from recsys_dist.data.shard_plan import Unit
from recsys_dist.errors import DataError
from recsys_dist.train.data_position import DataPosition
from recsys_dist.train.hooks import Hook
from recsys_dist.train.loop import LoopParts, TrainingLoop

BATCH = 4
#: Three items of 10, 10 and 5 rows: 3, 3 and 2 steps of 4 rows.
ITEMS = (Unit(0, 0, 10), Unit(0, 10, 20), Unit(1, 0, 5))
STEPS_PER_PASS = 8


class Remote:
    def __init__(self, values):
        self.values = values

    def fetch(self):
        return self.values


class Coordinator:
    """Runs each scheduled closure at once; it is back when scheduled."""

    def __init__(self):
        self.scheduled: list[tuple[int, ...]] = []

    def schedule(self, function, args):
        self.scheduled.append(tuple(int(a) for a in args))
        return Remote(function(*args))

    def join(self):
        pass


def train_item(file_index, start, stop, stride, max_steps):
    """Every row trained, loss 0.5 a row: ``(loss sum, weight, rows, steps, first end)``."""
    rows = min(len(range(int(start), int(stop), int(stride))), int(max_steps) * BATCH)
    steps = -(-rows // BATCH)
    return 0.5 * rows, float(rows), float(rows), steps, 1000.0 + int(start)


class Recording(Hook):
    def __init__(self, stop_after: int | None = None):
        self.calls: list = []
        self.stop_after = stop_after

    def begin(self, attempt):
        self.calls.append("begin")

    def after_pass(self, attempt, epoch):
        self.calls.append(("after_pass", epoch))
        if epoch == self.stop_after:
            attempt.stopped = True  # as early stopping does: the pass is not ended again
            return True
        return False

    def end(self, attempt):
        self.calls.append("end")
        return False


class Aucs:
    def values(self, reset: bool = False):
        return {"click": 0.75}

    def latest(self):
        return {"click": 0.75}


@dataclasses.dataclass
class Run:
    parts: LoopParts
    coordinator: Coordinator
    hook: Recording
    sightings: list
    checkpoints: list  # (global step, the position's finished passes per item)


def make_run(
    *,
    epochs: int = 2,
    first_step: int = 0,
    max_steps: int | None = None,
    every_steps: int | None = None,
    resumed: bool = False,
    done: list[int] | None = None,
    stop_after: int | None = None,
    item=train_item,
) -> Run:
    coordinator, hook, sightings, checkpoints = Coordinator(), Recording(stop_after), [], []
    position = DataPosition(("a.parquet", "b.parquet"), ITEMS, epochs, False, 0)
    if done is not None:
        position.done = list(done)
    parts = LoopParts(
        runtime=Runtime(strategy=None, coordinator=coordinator, num_workers=1, num_ps=1),
        train=TrainSpec(
            max_steps=max_steps, checkpoint_every_steps=every_steps, checkpoint_every_seconds=None
        ),
        first_step=first_step,
        batch_size=BATCH,
        position=position,
        train_item=item,
        hooks=[hook],
        count_sightings=sightings.append,
        labels=["click"],
        auc_reader=Aucs(),
        rows_in_flight=2 * BATCH,
        checkpoint=lambda attempt: checkpoints.append((attempt.step, list(position.done))),
        table_stats=dict,
        resumed=resumed,
        early_stopping=None,
    )
    return Run(parts, coordinator, hook, sightings, checkpoints)


def train(run: Run, tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path))
    synced = []
    result = TrainingLoop(run.parts, writer, lambda: synced.append(True)).run()
    writer.close()
    return result, synced


def test_the_loop_trains_every_pass_and_ends_with_a_checkpoint(tmp_path):
    run = make_run(first_step=100)
    result, synced = train(run, tmp_path)
    assert (result.steps, result.examples, result.skipped_rows) == (2 * STEPS_PER_PASS, 50, 0)
    assert result.loss == pytest.approx(0.5)
    assert run.parts.position.finished and run.parts.position.done == [2, 2, 2]
    one_pass = [(0, 0, 10, 1, 3), (0, 10, 20, 1, 3), (1, 0, 5, 1, 2)]  # file, rows, steps
    assert run.coordinator.scheduled == one_pass * 2
    assert run.sightings == [True, False]  # counted in the first pass only
    assert run.hook.calls == ["begin", ("after_pass", 1), ("after_pass", 2), "end"]
    assert [e["epoch"] for e in result.epochs] == [1, 2] and result.auc == {"click": 0.75}
    assert run.checkpoints == [(100 + 2 * STEPS_PER_PASS, [2, 2, 2])]
    assert synced and result.early_stopping is None and result.first_step_at == 1000.0


def test_a_checkpoint_on_the_way_matches_the_finished_items(tmp_path):
    run = make_run(epochs=1, every_steps=3)
    train(run, tmp_path)
    steps = {0: 3, 1: 3, 2: 2}
    assert len(run.checkpoints) >= 2
    for step, done in run.checkpoints:
        assert step == sum(steps[i] for i, d in enumerate(done) if d)


def test_max_steps_cuts_the_last_item_which_is_not_marked_done(tmp_path):
    run = make_run(max_steps=5)
    result, _ = train(run, tmp_path)
    assert run.coordinator.scheduled == [(0, 0, 10, 1, 3), (0, 10, 20, 1, 2)]
    assert (result.steps, result.examples) == (5, 10 + 2 * BATCH)
    assert run.parts.position.done == [1, 0, 0]
    assert run.checkpoints == [(5, [1, 0, 0])]


def test_a_hook_that_stops_after_a_pass_ends_the_run(tmp_path):
    run = make_run(stop_after=1)
    result, _ = train(run, tmp_path)
    assert result.steps == STEPS_PER_PASS and run.parts.position.done == [1, 1, 1]
    assert run.hook.calls == ["begin", ("after_pass", 1), "end"]


def test_a_resumed_run_with_nothing_left_writes_no_checkpoint(tmp_path):
    resumed = make_run(done=[2, 2, 2], resumed=True, first_step=16)
    result, _ = train(resumed, tmp_path)
    assert result.steps == 0 and resumed.coordinator.scheduled == []
    assert resumed.checkpoints == []  # the restored checkpoint is not written again
    fresh = make_run(done=[2, 2, 2], resumed=False, first_step=16)
    train(fresh, tmp_path)
    assert fresh.checkpoints == [(16, [2, 2, 2])]


def test_an_item_back_with_other_rows_than_its_footer_is_a_data_error(tmp_path):
    def short(file_index, start, stop, stride, max_steps):
        loss, weight, rows, steps, at = train_item(file_index, start, stop, stride, max_steps)
        return loss, weight, rows - 1, steps, at

    with pytest.raises(DataError, match=r"a.parquet rows 0..10: a worker read 9 rows"):
        train(make_run(item=short), tmp_path)
