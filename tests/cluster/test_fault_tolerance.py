"""Fault tolerance with real SIGKILLs on real processes (2 workers + 2 ps on 127.0.0.1).

Each scenario runs ``recsys-dist train`` as a subprocess, kills a worker, a parameter
server, the coordinator (the command itself) or the coordinator in the middle of a
checkpoint write, and asserts:

- the run completes;
- no data unit is skipped: the final checkpoint's data position has every item done
  ``epochs`` times;
- re-done work is within one checkpoint interval: the step the run resumes from is at
  most ``checkpoint_every_steps`` (+ the closures in flight) behind the last step the
  killed attempt reported;
- the held-out AUC is within 0.01 of a fault-free run on the same data.

Why 0.01: asynchronous training is not deterministic, and on this small data the held-out
AUC of a run scatters. Measured on two machines (2 cores): fault-free runs 0.6137 to
0.6176, runs resumed after a coordinator SIGKILL 0.6106 to 0.6187; a tolerance of 0.005
failed on 2 of 7 scenarios in one CI run. A resume that lost the trained state lands
lower: one epoch from scratch scores 0.601.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import time

import pytest

from tests.support import command_forks
from tests.support.paths import CLI
from tests.support.run_configs import EPOCHS, EVERY, SLOW_CHECKPOINT_FEATURES, small_run_config
from tests.support.train_run import TrainRun

pytestmark = pytest.mark.cluster

IN_FLIGHT = 4 * 10  # 2 closures per worker x 2 workers x steps_per_call
AUC_TOLERANCE = 0.01  # measured scatter: see the module docstring


def final_state(model_dir: pathlib.Path) -> dict:
    complete = sorted(model_dir.glob("checkpoints/ckpt-*/_COMPLETE"))
    return json.loads((complete[-1].parent / "state.json").read_text())


def held_out_auc(model_dir: pathlib.Path) -> float:
    return json.loads((model_dir / "train_result.json").read_text())["eval"]["labels"]["click"][
        "auc"
    ]


def assert_complete(model_dir: pathlib.Path) -> None:
    state = final_state(model_dir)
    position = state["position"]
    assert state["complete"] and position["done"] == [EPOCHS] * position["items"], position
    assert position["finished_rows"] == position["total_rows"] == EPOCHS * 2 * 12_000


def assert_complete_and_close(model_dir: pathlib.Path, baseline: float) -> None:
    assert_complete(model_dir)
    assert abs(held_out_auc(model_dir) - baseline) <= AUC_TOLERANCE, (
        held_out_auc(model_dir),
        baseline,
    )


def assert_no_servers_left(pids: list[int]) -> None:
    deadline = time.time() + 20
    while time.time() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
        time.sleep(0.2)
    assert not [p for p in pids if os.path.exists(f"/proc/{p}")]


def resumed_step(run: TrainRun) -> int:
    return int(run.wait_for(r"^resume +from .*: step ([\d,]+)").group(1).replace(",", ""))


def wait_for_a_save_in_progress(run: TrainRun, model_dir: pathlib.Path) -> pathlib.Path:
    """The directory of a checkpoint being written (no ``_COMPLETE`` yet) after the first
    complete one, caught by polling while the run trains."""
    first = int(run.wait_for(r"^checkpoint step ([\d,]+)").group(1).replace(",", ""))
    deadline = time.time() + 240
    while time.time() < deadline and run.process.poll() is None:
        for directory in (model_dir / "checkpoints").glob("ckpt-*"):
            if directory.name != f"ckpt-{first:012d}" and not (directory / "_COMPLETE").exists():
                return directory
        time.sleep(0.002)
    raise AssertionError("no save in progress was seen:\n" + run.output[-2000:])


@pytest.fixture
def setup(fault_free_run):
    config, _, auc = fault_free_run
    return config, auc


@pytest.fixture
def slow_checkpoints(fault_free_run, tmp_path):
    """The fault-free run's config and data with C21's table at 2,000,000 rows, so that a
    checkpoint write lasts long enough to be caught in the middle (0.5 s here, against
    0.2 s), and the fault-free run's AUC: C21's 7,174 ids share a row for a quarter of
    their lookups in its 20,000 rows, which moves the held-out AUC far less than the
    tolerance (fault-free: 0.6169 with 2,000,000 rows, 0.6167 with 20,000)."""
    _, data, auc = fault_free_run
    directory = tmp_path / "config"
    directory.mkdir()
    return small_run_config(directory, data, features=SLOW_CHECKPOINT_FEATURES), auc


def test_worker_killed_mid_run_is_restarted_and_the_run_completes(setup, tmp_path):
    config, baseline = setup
    run = TrainRun(config, tmp_path / "run")
    run.wait_for(r"^checkpoint step")
    os.kill(run.servers("worker")[0], signal.SIGKILL)
    assert run.finish() == 0, run.output[-3000:]
    # Seen within 0.5 s; the restart itself takes seconds, and this short run may end
    # first, so test_local_cluster checks the restart on its own.
    assert "worker 0 exited with code -9; restarting it" in run.output
    # Workers come back without a restore, as a rule. Under double load (two test suites on
    # 2 cores) TensorFlow raised a worker's death as UnavailableError 2 times in 23 kills,
    # and the command restarted from its checkpoint: correct, one interval slower
    # (docs/fault-tolerance.md). More than one restart would be a bug.
    assert run.output.count("restart  lost a task of the cluster") <= 1, run.output[-3000:]
    assert_complete_and_close(tmp_path / "run", baseline)


def test_parameter_server_killed_mid_run_restarts_from_the_last_checkpoint(setup, tmp_path):
    config, baseline = setup
    run = TrainRun(config, tmp_path / "run")
    saved = int(run.wait_for(r"^checkpoint step ([\d,]+)").group(1).replace(",", ""))
    seen = run.last_step()
    old_servers = run.servers("worker") + run.servers("ps")
    os.kill(run.servers("ps")[1], signal.SIGKILL)
    restored = resumed_step(run)
    assert run.finish() == 0, run.output[-3000:]
    assert "restart  lost a task of the cluster" in run.output
    assert restored >= saved and seen - restored <= EVERY + IN_FLIGHT, (saved, seen, restored)
    assert_no_servers_left(old_servers)
    assert_complete_and_close(tmp_path / "run", baseline)


def test_coordinator_killed_then_rerun_on_3_servers_resumes_and_a_third_run_does_nothing(
    setup, tmp_path
):
    """The coordinator is SIGKILLed; the rerun, on 3 parameter servers instead of 2,
    resumes from the checkpoint (tables are saved whole, so any number of servers restores
    them); a third run finds the run complete and does nothing."""
    config, baseline = setup
    first = TrainRun(config, tmp_path / "run")
    saved = int(first.wait_for(r"^checkpoint step ([\d,]+)", count=2).group(1).replace(",", ""))
    seen = first.last_step()
    servers = first.servers("worker") + first.servers("ps")
    first.process.send_signal(signal.SIGKILL)
    first.finish()
    assert_no_servers_left(servers)  # they die with their parent
    second = TrainRun(config, tmp_path / "run", "--set", "cluster.ps=3")
    restored = resumed_step(second)
    assert second.finish() == 0, second.output[-3000:]
    assert "2 workers + 3 ps" in second.output
    assert restored >= saved and seen - restored <= EVERY + IN_FLIGHT, (saved, seen, restored)
    assert_complete_and_close(tmp_path / "run", baseline)
    before = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    third = TrainRun(config, tmp_path / "run")
    assert third.finish() == 0
    assert "already holds a complete run" in third.output and "cluster " not in third.output
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == before


def test_kill_during_a_checkpoint_write_never_restores_the_torn_checkpoint(
    slow_checkpoints, tmp_path
):
    config, baseline = slow_checkpoints
    model_dir = tmp_path / "run"
    run = TrainRun(config, model_dir)
    torn = wait_for_a_save_in_progress(run, model_dir)
    seen = run.last_step()
    run.process.send_signal(signal.SIGKILL)  # the coordinator writes checkpoints
    run.finish()
    assert torn.exists() and not (torn / "_COMPLETE").exists()
    complete = sorted(p.parent.name for p in model_dir.glob("checkpoints/ckpt-*/_COMPLETE"))
    rerun = TrainRun(config, model_dir)
    restored = resumed_step(rerun)
    assert rerun.finish() == 0, rerun.output[-3000:]
    assert f"ckpt-{restored:012d}" == complete[-1]  # the newest complete one, not the torn
    # the torn save held one interval of work; what is redone is that interval
    assert seen - restored <= EVERY + IN_FLIGHT, (seen, restored)
    assert not torn.exists() or (torn / "_COMPLETE").exists()  # cleaned up or redone
    assert_complete_and_close(model_dir, baseline)


def test_a_damaged_newest_checkpoint_is_named_and_resume_takes_the_previous_one(setup, tmp_path):
    config, baseline = setup
    model_dir = tmp_path / "run"
    first = TrainRun(config, model_dir)
    first.wait_for(r"^checkpoint step ([\d,]+)", count=2)
    first.process.send_signal(signal.SIGKILL)
    first.finish()
    complete = sorted(p.parent for p in model_dir.glob("checkpoints/ckpt-*/_COMPLETE"))
    assert len(complete) >= 2, first.output[-2000:]
    newest, previous = complete[-1], complete[-2]
    data = sorted(newest.glob("variables.data-*"))[-1]
    size = data.stat().st_size
    with open(data, "r+b") as handle:  # cut after the save: a disk or copy error
        handle.truncate(size // 2)
    damage = (
        f"{newest}: damaged checkpoint: {data.name} is {size // 2:,} bytes, {size:,} "
        "when it was written (truncated or changed after the save)"
    )
    for command in (
        ["evaluate", "--out", str(tmp_path / "eval")],
        ["export", "--out", str(tmp_path / "export")],
    ):
        refused = command_forks.run(
            [CLI, *command, "--model-dir", str(model_dir)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert refused.returncode == 2 and refused.stderr == f"error: {damage}\n", refused.stderr[
            -2000:
        ]
    rerun = TrainRun(config, model_dir)
    restored = resumed_step(rerun)
    assert rerun.finish() == 0, rerun.output[-3000:]
    assert f"warning  {damage}; trying the previous complete checkpoint" in rerun.output
    assert f"warning  {newest}: marked _DAMAGED, resuming from {previous}" in rerun.output, (
        rerun.output[-3000:]
    )
    assert f"ckpt-{restored:012d}" == previous.name
    assert_complete_and_close(model_dir, baseline)


def test_a_run_whose_data_moved_resumes_from_its_checkpoint(setup, tmp_path):
    import shutil

    from recsys_dist.config import load_config

    config, baseline = setup
    model_dir = tmp_path / "run"
    first = TrainRun(config, model_dir)
    saved = int(first.wait_for(r"^checkpoint step ([\d,]+)").group(1).replace(",", ""))
    first.process.send_signal(signal.SIGKILL)
    first.finish()
    moved = tmp_path / "elsewhere" / "copy"  # e.g. a local copy of what was on S3
    shutil.copytree(load_config(config).data.path, moved)
    rerun = TrainRun(config, model_dir, "--data", str(moved))
    assert resumed_step(rerun) >= saved
    assert rerun.finish() == 0, rerun.output[-3000:]
    assert_complete(model_dir)  # every item of every pass done once, on the copy


def test_sigterm_during_a_checkpoint_write_exits_143_and_tears_nothing(slow_checkpoints, tmp_path):
    config, baseline = slow_checkpoints
    model_dir = tmp_path / "run"
    run = TrainRun(config, model_dir)
    wait_for_a_save_in_progress(run, model_dir)
    servers = run.servers("worker") + run.servers("ps")
    run.process.send_signal(signal.SIGTERM)
    assert run.finish() == 128 + signal.SIGTERM, run.output[-3000:]
    assert run.output.splitlines()[-1] == "error: stopped by SIGTERM", run.output[-3000:]
    assert "Traceback" not in run.output
    assert_no_servers_left(servers)
    complete = sorted(p.parent for p in model_dir.glob("checkpoints/ckpt-*/_COMPLETE"))
    for directory in complete:  # every checkpoint marked complete is whole
        files = json.loads((directory / "state.json").read_text())["files"]
        assert {n: (directory / n).stat().st_size for n in files} == {
            n: f["bytes"] for n, f in files.items()
        }
    complete = [p.name for p in complete]
    rerun = TrainRun(config, model_dir)
    restored = resumed_step(rerun)
    assert rerun.finish() == 0, rerun.output[-3000:]
    assert f"ckpt-{restored:012d}" == complete[-1]
    assert_complete_and_close(model_dir, baseline)
