"""How ``train`` starts itself again after a lost task (``restart.ProcessRestart``): the
lost-task error is kept, with everything its frames hold, until the process is replaced.
Freeing the cluster's resources calls the tasks that own them
(``EagerResourceDeleter.__del__``), and a call to a lost task whose connection was left
dead waits for ever. The process is replaced by the same command with the restart number
in ``RECSYS_DIST_RESTART``; here the exec is recorded instead."""

from __future__ import annotations

import argparse
import gc
import sys

import pytest

from recsys_dist import cli
from recsys_dist.console import add_output_arguments
from recsys_dist.errors import ClusterLost, WorkerJoins
from recsys_dist.restart import RESTART_EXIT, RESTART_VARIABLE, ProcessRestart


class Recorded:
    """A restart whose waits and exec are recorded, not carried out."""

    def __init__(self, environ: dict[str, str] | None = None):
        self.sleeps: list[float] = []
        self.execs: list[tuple[str, list[str]]] = []
        self.environ = {} if environ is None else environ
        self.restart = ProcessRestart(
            self.environ,
            execv=lambda path, argv: self.execs.append((path, argv)),
            sleep=self.sleeps.append,
        )


@pytest.fixture(autouse=True)
def collector_back_on():
    yield
    gc.enable()


class Held:
    """Stands for a cluster resource: it records being freed."""

    freed = False

    def __del__(self):
        Held.freed = True


def test_a_restart_keeps_the_error_and_what_its_frames_hold(capsys):
    recorded = Recorded()

    def train_run():
        resource = Held()  # noqa: F841  held by this frame, hence by the traceback
        raise ClusterLost("lost ps 0")

    Held.freed = False
    try:
        train_run()
    except ClusterLost as exc:
        assert recorded.restart.after_lost(exc, 3) == RESTART_EXIT
    gc.collect()
    assert not Held.freed and not gc.isenabled()
    assert recorded.restart.collector_off
    assert capsys.readouterr().out.startswith(
        "restart  lost ps 0; starting the cluster again and resuming from the last "
        "checkpoint (restart 1 of at most 3)"
    )


def test_past_max_restarts_the_error_is_raised_and_still_kept():
    recorded = Recorded({RESTART_VARIABLE: "2"})
    lost = ClusterLost("lost ps 0")
    with pytest.raises(ClusterLost, match=r"gave up after train.max_restarts = 2 restarts"):
        recorded.restart.after_lost(lost, 2)
    assert recorded.restart.lost == [lost]
    assert recorded.restart.collector_off
    assert recorded.restart.restart_as is None and not recorded.restart.due(RESTART_EXIT)
    recorded.restart.exec_if_due(RESTART_EXIT)
    assert recorded.execs == [] and recorded.sleeps == []


def test_a_fresh_restart_holds_nothing_and_is_not_due():
    recorded = Recorded()
    restart = recorded.restart
    assert restart.restarts_before == 0 and restart.restart_as is None
    assert restart.lost == [] and not restart.collector_off
    assert not restart.due(RESTART_EXIT)
    restart.exec_if_due(RESTART_EXIT)
    assert recorded.execs == [] and RESTART_VARIABLE not in recorded.environ


def test_after_a_lost_task_the_same_command_runs_again_as_the_next_restart(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["recsys-dist", "train", "--config", "c.yaml"])
    recorded = Recorded({RESTART_VARIABLE: "1"})
    restart = recorded.restart
    assert restart.restarts_before == 1
    assert restart.after_lost(ClusterLost("lost ps 1"), 3) == RESTART_EXIT
    assert "(restart 2 of at most 3)" in capsys.readouterr().out
    assert recorded.sleeps == [2]  # 1, 2, 4, ... seconds: the servers may come back
    assert restart.restart_as == 2
    # Only the exit code that asks for it restarts: an error on the way out does not.
    assert restart.due(RESTART_EXIT) and not restart.due(0) and not restart.due(4)
    restart.exec_if_due(4)
    assert recorded.execs == [] and recorded.environ[RESTART_VARIABLE] == "1"
    restart.exec_if_due(RESTART_EXIT)
    command = [sys.executable, "-m", "recsys_dist.cli", "train", "--config", "c.yaml"]
    assert recorded.execs == [(sys.executable, command)]
    assert restart.argv() == command
    assert recorded.environ[RESTART_VARIABLE] == "2"


def test_the_wait_before_a_restart_grows_to_at_most_30_seconds(capsys):
    waits = []
    for before in (0, 3, 4, 9):
        recorded = Recorded({RESTART_VARIABLE: str(before)})
        recorded.restart.after_lost(ClusterLost("lost ps 0"), 10)
        waits += recorded.sleeps
    assert waits == [1, 8, 16, 30]


def test_a_worker_that_joins_restarts_at_once_and_is_not_counted(monkeypatch, capsys):
    """A worker missing at the start answers: the run starts again with it at once, even
    past ``train.max_restarts``, and keeps its restart number (joins are not faults)."""
    monkeypatch.setattr(sys, "argv", ["recsys-dist", "train", "--config", "c.yaml"])
    recorded = Recorded({RESTART_VARIABLE: "3"})
    joins = WorkerJoins("worker 1 answers now; the run starts again with every worker")
    assert recorded.restart.after_lost(joins, 3) == RESTART_EXIT
    assert capsys.readouterr().out == (
        "restart  worker 1 answers now; the run starts again with every worker\n"
    )
    assert recorded.sleeps == []
    recorded.restart.exec_if_due(RESTART_EXIT)
    assert len(recorded.execs) == 1 and recorded.environ[RESTART_VARIABLE] == "3"


def test_the_command_line_hands_the_restart_to_the_command():
    seen = []
    parser = argparse.ArgumentParser()
    add_output_arguments(parser)
    parser.set_defaults(func=lambda args: seen.append(args.restart) or RESTART_EXIT)
    restart = Recorded().restart
    assert cli.main([], parser, restart=restart) == RESTART_EXIT
    assert seen == [restart]
    cli.main([], parser)  # without one, a restart that is never carried out
    assert isinstance(seen[1], ProcessRestart) and seen[1] is not restart


class Ended(Exception):
    """The process would have ended here with ``code``."""

    def __init__(self, code: int):
        self.code = code


@pytest.fixture
def ends(monkeypatch):
    def exit_now(code):
        raise Ended(code)

    monkeypatch.setattr("recsys_dist.restart.exit_now", exit_now)


def test_a_restart_from_another_thread_replaces_the_process_at_once(capsys, ends):
    """A worker lost before the first step: the restart comes from the watch's thread
    (the main thread may be blocked in TensorFlow) and replaces the process there."""
    recorded = Recorded()
    with pytest.raises(Ended):  # only because the recorded exec returns
        recorded.restart.now(ClusterLost("worker 1 (10.0.0.2:2222) was lost"), max_restarts=3)
    assert recorded.execs == [(sys.executable, ProcessRestart.argv())]
    assert recorded.environ[RESTART_VARIABLE] == "1"
    assert recorded.sleeps == []  # the new process leaves the worker out: no wait
    assert capsys.readouterr().out.startswith(
        "restart  worker 1 (10.0.0.2:2222) was lost; starting the cluster again"
    )


@pytest.mark.parametrize("restarts_before, execv", [(3, "recorded"), (0, None)])
def test_a_restart_that_cannot_happen_ends_the_process_with_the_error(
    capsys, ends, restarts_before, execv
):
    """After ``train.max_restarts`` restarts, or in a process that cannot be replaced
    (``cli.main`` called in-process), the run ends with exit code 4 and one line."""
    recorded = Recorded({RESTART_VARIABLE: str(restarts_before)})
    restart = recorded.restart if execv else ProcessRestart(recorded.environ, execv=None)
    with pytest.raises(Ended) as ended:
        restart.now(ClusterLost("worker 1 (10.0.0.2:2222) was lost"), 3)
    assert ended.value.code == ClusterLost.exit_code == 4
    assert recorded.execs == []
    err = capsys.readouterr().err
    assert err.startswith("error: worker 1 (10.0.0.2:2222) was lost")
    assert ("gave up after train.max_restarts = 3 restarts" in err) == bool(execv)


def test_the_immediate_restart_is_the_one_a_command_would_ask_for():
    """What the task watch carries out when a worker is lost before the first step: the
    same command, restart number, line and wait as :meth:`ProcessRestart.after_lost`;
    none when the process cannot be replaced or has no restart left."""
    recorded = Recorded({RESTART_VARIABLE: "1"})
    immediate = recorded.restart.immediate(max_restarts=3)
    assert immediate.argv == tuple(ProcessRestart.argv())
    assert (immediate.variable, immediate.value, immediate.pause) == (RESTART_VARIABLE, "2", 0)
    assert immediate.then == (
        "; starting the cluster again and resuming from the last checkpoint "
        "(restart 2 of at most 3)"
    )
    assert recorded.restart.immediate(max_restarts=1) is None
    assert ProcessRestart({}, execv=None).immediate(max_restarts=3) is None
