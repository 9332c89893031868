"""``data read`` on the dispatcher (``recsys_dist/cluster/read_check.py``): training's work
items handed out through ``cluster/dispatch.py`` and read with training's reader, each
once; rows skipped as bad counted; bad data, a file gone and an item that comes back short
as clear errors; and the command's output. The coordinator here runs each closure in this
process (``SynchronousCoordinator``); the same pass on real workers is in
tests/cluster/test_read_pass.py and tests/cluster/test_data_read.py."""

from __future__ import annotations

import contextlib
import pathlib

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf

from recsys_dist.cli import main
from recsys_dist.cluster import runtime
from recsys_dist.cluster.mirrored import SynchronousCoordinator
from recsys_dist.cluster.read_check import read_split
from recsys_dist.config import load_config
from recsys_dist.data.input_fn import SCORING_ITEM_ROWS, prepare_input, row_id
from recsys_dist.data.read_pass import check_exactly_once
from recsys_dist.errors import DataError
from recsys_dist.train.trainer import data_position
from tests.support.data import small_table, write_parquet

DAY = "dt=2026-01-01"


class Recording(SynchronousCoordinator):
    """Runs each closure at once, recording its arguments as ints."""

    def __init__(self, cut_last_row: bool = False):
        self.scheduled: list[tuple[int, ...]] = []
        self.cut_last_row = cut_last_row

    def schedule(self, function, args=(), kwargs=None):
        self.scheduled.append(tuple(int(a) for a in args))
        if self.cut_last_row:  # a worker that reads one row less than the item holds
            file_index, start, stop, stride = args
            args = (file_index, start, stop - stride, stride)
        return super().schedule(function, args, kwargs)


def _write(tmp_path, tables, row_group_size: int = 40) -> list[str]:
    return [
        write_parquet(tmp_path / "data" / DAY / f"part-{i}.parquet", t, row_group_size)
        for i, t in enumerate(tables)
    ]


def test_a_pass_reads_trainings_items_once_each_through_the_dispatcher(tmp_path, small_config):
    tables = [small_table(150, seed=0), small_table(70, seed=1)]
    _write(tmp_path, tables)
    config = load_config(small_config(train={"dates": "2026-01-01"}))
    pipeline = prepare_input(config, "train", 2)
    coordinator, progress = Recording(), []
    result = read_split(
        pipeline,
        coordinator,
        1,
        config.train.steps_per_call,
        collect_rows=True,
        progress=lambda done, total: progress.append((done, total)),
    )
    # The items are training's (its data position holds the same), each scheduled once.
    items = pipeline.training_items(config.train.steps_per_call)
    assert items == data_position(config, pipeline).items
    assert coordinator.scheduled == [(i.file, i.start, i.stop, i.stride) for i in items]
    assert result.rows == pipeline.plan.total_rows == 220 and result.rows_per_worker == [220]
    assert result.skipped_rows == 0
    check_exactly_once(pipeline.plan, result.row_ids)
    assert sorted(result.row_ids.tolist()) == sorted(
        row_id(f, r) for f, t in enumerate(tables) for r in range(t.num_rows)
    )
    assert len(progress) == len(items) and progress[-1] == (220, 220)


def test_items_smaller_than_units_are_each_read_once(tmp_path, small_config):
    _write(tmp_path, [small_table(100)], row_group_size=100)
    config = load_config(small_config(train={"dates": "2026-01-01"}), ["train.steps_per_call=1"])
    pipeline = prepare_input(config, "train", 2)
    items = pipeline.training_items(1)  # batches of 32: 100 rows in items of 25
    assert [i.rows for i in items] == [25, 25, 25, 25] and len(pipeline.plan.units) == 1
    # Each item spans the whole unit: every fourth row.
    assert [(i.start, i.stop, i.stride) for i in items] == [(k, 100, 4) for k in range(4)]
    coordinator = Recording()
    result = read_split(pipeline, coordinator, 2, 1, collect_rows=True)
    assert sorted(coordinator.scheduled) == sorted(
        (i.file, i.start, i.stop, i.stride) for i in items
    )
    assert result.rows_per_worker == [100, 0]  # one process: every item is worker 0's
    check_exactly_once(pipeline.plan, result.row_ids)


def test_an_eval_split_is_read_as_evaluation_reads_it(tmp_path, small_config):
    """``scoring``: evaluation's items (at most ``SCORING_ITEM_ROWS`` rows), its batches,
    its unshuffled order; each row once."""
    tables = [small_table(150, seed=0), small_table(70, seed=1)]
    _write(tmp_path, tables)
    config = load_config(
        small_config(train={"dates": "2026-01-01"}, eval={"dates": "2026-01-01"}),
        ["train.steps_per_call=1"],
    )
    pipeline = prepare_input(config, "eval", 2)
    items = pipeline.scoring_items()
    assert items != pipeline.training_items(1)  # 30-row items there
    assert all(i.rows <= SCORING_ITEM_ROWS for i in items)
    coordinator = Recording()
    result = read_split(pipeline, coordinator, 2, 1, scoring=True, collect_rows=True)
    assert coordinator.scheduled == [(i.file, i.start, i.stop, i.stride) for i in items]
    check_exactly_once(pipeline.plan, result.row_ids)
    # in order within each item: scoring does not shuffle
    assert result.row_ids.tolist() == [
        row_id(i.file, r) for i in items for r in range(i.start, i.stop)
    ]
    from recsys_dist.commands import _describe_plan

    plan = _describe_plan(pipeline, 1, "eval")[2]
    assert plan == (
        f"plan     {len(items)} work items of up to {max(i.rows for i in items)} rows "
        "(evaluation's items), handed to 2 workers as each is free"
    )


def test_rows_skipped_as_bad_are_counted(tmp_path, small_config):
    prices = np.ones(50, np.float32)
    prices[[3, 9]] = [np.inf, np.nan]
    _write(tmp_path, [small_table(50, price=pa.array(prices))], 50)
    config = load_config(small_config(train={"dates": "2026-01-01"}, on_bad_row="skip"))
    pipeline = prepare_input(config, "train", 1)
    result = read_split(pipeline, Recording(), 1, config.train.steps_per_call)
    assert (result.rows, result.skipped_rows, result.row_ids) == (50, 2, None)


def test_bad_data_on_a_worker_fails_naming_file_column_and_row(tmp_path, small_config):
    prices = np.ones(50, np.float32)
    prices[17] = np.nan
    (path,) = _write(tmp_path, [small_table(50, price=pa.array(prices))], 50)
    config = load_config(small_config(train={"dates": "2026-01-01"}))
    pipeline = prepare_input(config, "train", 1)
    with pytest.raises(
        DataError,
        match=rf"numeric column 'price' \(feature 'price'\) has a NaN or infinite value.* "
        rf"in {path} \(rows 0..50\) at row 17",
    ):
        read_split(pipeline, Recording(), 1, config.train.steps_per_call)


def test_a_file_gone_after_planning_is_named(tmp_path, small_config):
    (path,) = _write(tmp_path, [small_table(50)])
    config = load_config(small_config(train={"dates": "2026-01-01"}))
    pipeline = prepare_input(config, "train", 1)
    pathlib.Path(path).unlink()
    with pytest.raises(
        DataError, match=rf"reading Parquet failed on a worker: .*{path}: no such file"
    ):
        read_split(pipeline, Recording(), 1, config.train.steps_per_call)


def test_an_item_read_short_fails_naming_file_rows_and_counts(tmp_path, small_config):
    (path,) = _write(tmp_path, [small_table(50)], 50)
    config = load_config(small_config(train={"dates": "2026-01-01"}))
    pipeline = prepare_input(config, "train", 1)
    with pytest.raises(
        DataError, match=rf"^{path} rows 0..50: a worker read 49 rows, the footer says 50$"
    ):
        read_split(pipeline, Recording(cut_last_row=True), 1, config.train.steps_per_call)


def test_a_strided_item_names_its_rows_in_errors(tmp_path, small_config):
    """Items of 25 rows cut from a 100-row unit take every fourth row: row 17 is read by
    the item from row 1, and a bad value there names row 17 of the file; an item read
    short names its rows."""
    prices = np.ones(100, np.float32)
    prices[17] = np.nan
    (path,) = _write(tmp_path, [small_table(100, price=pa.array(prices))], 100)
    config = load_config(small_config(train={"dates": "2026-01-01"}), ["train.steps_per_call=1"])
    pipeline = prepare_input(config, "train", 1)
    with pytest.raises(
        DataError,
        match=rf"infinite value.* in {path} \(rows 1\.\.100 in steps of 4\) at row 17 ",
    ):
        read_split(pipeline, Recording(), 1, 1)
    pathlib.Path(path).unlink()
    _write(tmp_path, [small_table(100)], 100)
    pipeline = prepare_input(config, "train", 1)
    with pytest.raises(
        DataError,
        match=rf"^{path} rows 0\.\.100 in steps of 4: a worker read 24 rows, the footer says 25$",
    ):
        read_split(pipeline, Recording(cut_last_row=True), 1, 1)


def test_data_read_check_prints_the_pass_and_the_check(tmp_path, small_config, monkeypatch, capsys):
    """The command end to end, its cluster replaced by this process (a cluster of real
    servers runs it in tests/cluster/test_data_read.py)."""
    _write(tmp_path, [small_table(150), small_table(70, seed=1)])
    config = small_config(train={"dates": "2026-01-01"})

    @contextlib.contextmanager
    def in_this_process(cluster, log_dir, min_shard_bytes, env=None):
        yield runtime.Runtime(tf.distribute.get_strategy(), Recording(), 1, 0, "in_process")

    monkeypatch.setattr(runtime, "connect", in_this_process)
    args = ["data", "read", "--config", config, "--check", "--set", "train.steps_per_call=1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "data     2 files, 220 rows, 6 units" in out
    assert (
        "plan     10 work items of up to 30 rows (train.steps_per_call batches), handed to "
        "2 workers as each is free"
    ) in out
    assert "cluster  1 worker + 0 ps (in_process: servers inside this process)" in out
    assert "read     220 rows in " in out and "per worker 220; 0 bad rows skipped" in out
    assert "check    every planned row was read exactly once (220 rows)" in out
