"""The coordinator's watch over the tasks of a ``tf_config`` cluster, on real sockets."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import pytest

from recsys_dist.cluster.liveness import ImmediateRestart, TaskWatch
from recsys_dist.errors import ClusterLost
from recsys_dist.ops.build import library_path
from tests.support.paths import REPO


def listening() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    return server


def wait_until(condition, timeout: float = 15) -> None:
    deadline = time.time() + timeout
    while not condition() and time.time() < deadline:
        time.sleep(0.05)
    assert condition()


def test_a_lost_task_is_named_then_back_and_a_lasting_loss_gives_up():
    worker, ps = listening(), listening()
    worker_address = f"127.0.0.1:{worker.getsockname()[1]}"
    ps_address = f"127.0.0.1:{ps.getsockname()[1]}"
    lines, ended = [], []
    spec = {"chief": ["127.0.0.1:1"], "worker": [worker_address], "ps": [ps_address]}
    with TaskWatch(
        spec, lost_after=1, give_up_after=4, report=lines.append, give_up=ended.append
    ) as watch:
        time.sleep(1.5)
        assert lines == [] and watch.lost() == []
        port = worker.getsockname()[1]
        worker.close()  # the worker's machine is gone: nothing listens
        wait_until(lambda: len(lines) == 1)
        assert watch.lost() == [("worker", 0)]
        assert lines[0].startswith(f"lost\tworker 0 ({worker_address}): unreachable for ")
        assert "the other workers take its work until it answers again" in lines[0]
        worker = socket.socket()
        worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        worker.bind(("127.0.0.1", port))
        worker.listen(8)
        wait_until(lambda: len(lines) == 2)
        assert watch.lost() == []
        assert lines[1].startswith(f"back\tworker 0 ({worker_address}) answers again after ")
        ps.close()
        wait_until(lambda: ended, timeout=10)
    assert "training waits for it" in lines[2] and lines[2].startswith("lost\tps 0")
    assert ended == [
        f"ps 0 ({ps_address}) has been unreachable for 4 s "
        "(cluster.give_up_after_seconds = 4); the run stops. Bring the task "
        "back, then run the command again to resume from the last checkpoint"
    ]
    worker.close()


def closed_address() -> str:
    """An address where nothing listens (a port that was just free)."""
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{free.getsockname()[1]}"
    free.close()
    return address


def test_the_run_starts_with_the_workers_that_answer_and_waits_for_every_server():
    """A worker missing at the start is left out (the run takes it in later); a missing
    parameter server is waited for, said once, until it answers."""
    worker, ps = listening(), listening()
    gone = closed_address()
    spec = {
        "worker": [gone, f"127.0.0.1:{worker.getsockname()[1]}"],
        "ps": [f"127.0.0.1:{ps.getsockname()[1]}"],
    }
    lines = []
    with TaskWatch(spec, lost_after=60, give_up_after=120, report=lines.append) as watch:
        assert watch.workers_at_start() == [1]
        assert lines == []  # the caller names the worker it starts without
        started = time.monotonic()
        assert not watch.answered_since("worker", 0, started)
        wait_until(lambda: watch.answered_since("worker", 1, started))
    server_port = ps.getsockname()[1]
    ps.close()
    lines.clear()
    spec["ps"] = [f"127.0.0.1:{server_port}"]
    with TaskWatch(spec, lost_after=60, give_up_after=120, report=lines.append) as watch:
        later = socket.socket()
        later.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        later.bind(("127.0.0.1", server_port))
        import threading

        threading.Timer(1.5, later.listen, args=(8,)).start()  # the server comes up late
        assert watch.workers_at_start() == [1]
        assert lines == [
            "wait\tfor ps 0 to answer before the run starts (it stops if a task is away for "
            "120 s, cluster.give_up_after_seconds)"
        ]
    later.close()
    worker.close()


def test_without_any_worker_the_start_waits_and_gives_up_with_the_watch():
    spec = {"worker": [closed_address()], "ps": []}
    lines, ended = [], []
    with TaskWatch(
        spec, lost_after=1, give_up_after=2, report=lines.append, give_up=ended.append
    ) as watch:
        with pytest.raises(ClusterLost, match="the task watch stopped"):
            watch.workers_at_start()
    assert lines[0].startswith("wait\tfor any worker to answer before the run starts")
    assert ended and ended[0].startswith(f"worker 0 ({spec['worker'][0]}) has been unreachable")


def test_a_task_that_failed_a_probe_recently_is_remembered_after_it_answers_again():
    worker = listening()
    address = f"127.0.0.1:{worker.getsockname()[1]}"
    spec = {"worker": [address], "ps": []}
    watch = TaskWatch(spec, lost_after=60, give_up_after=120, report=lambda line: None)
    watch._check("worker", 0, address, up=False)
    assert watch.unreachable() == [("worker", 0)]
    watch._check("worker", 0, address, up=True)
    assert watch.unreachable() == []
    assert watch.unreachable_within(60) == [("worker", 0)]
    time.sleep(0.2)
    assert watch.unreachable_within(0.1) == []
    worker.close()


def test_a_task_reported_lost_that_answers_again_is_called_back_once():
    """The chief's callback for a returned task (it sends that task one call over the
    chief's own connection) runs once per return, for reported losses only."""
    spec = {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}
    called = []
    watch = TaskWatch(
        spec,
        lost_after=0,
        give_up_after=60,
        report=lambda line: None,
        back=lambda *k: called.append(k),
    )
    watch._check("ps", 0, "127.0.0.1:2", up=False)  # reported lost at once (lost_after 0)
    watch._check("ps", 0, "127.0.0.1:2", up=True)
    watch._check("ps", 0, "127.0.0.1:2", up=True)
    watch._check("worker", 0, "127.0.0.1:1", up=True)  # never lost: no call
    wait_until(lambda: called == [("ps", 0)], timeout=5)
    time.sleep(0.2)
    assert called == [("ps", 0)]


def test_workers_lost_together_before_the_first_step_start_the_command_again_once():
    spec = {"worker": ["127.0.0.1:1", "127.0.0.1:2"], "ps": ["127.0.0.1:3"]}
    called = []
    restart = ImmediateRestart(called.append, ("true",), "V", "1", "", 0.0)
    watch = TaskWatch(
        spec, lost_after=0, give_up_after=60, report=lambda line: None, restart=restart
    )
    watch._check("ps", 0, "127.0.0.1:3", up=False)  # a server: the run waits for it
    watch._check("worker", 0, "127.0.0.1:1", up=False)
    watch._check("worker", 1, "127.0.0.1:2", up=False)
    wait_until(lambda: len(called) == 1, timeout=5)
    time.sleep(0.2)
    assert [str(exc) for exc in called] == ["worker 0 (127.0.0.1:1) was lost before the first step"]


def run_watch(script: str, *args: str) -> subprocess.CompletedProcess:
    """Runs ``script`` (a watch in a process of its own) with the op library's path and
    ``args``."""
    return subprocess.run(
        [sys.executable, "-c", script, library_path(), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


WATCH_HELD = """
import ctypes, socket, sys, time
from recsys_dist.cluster.liveness import TaskWatch
from recsys_dist.errors import ClusterLost
from recsys_dist.console import configure_output
configure_output()
free = socket.socket()
free.bind(("127.0.0.1", 0))
port = free.getsockname()[1]
free.close()  # nothing listens there: the server's machine is gone
worker = socket.socket()
worker.bind(("127.0.0.1", 0))
worker.listen(8)
spec = {"worker": [f"127.0.0.1:{worker.getsockname()[1]}"], "ps": [f"127.0.0.1:{port}"]}
print("ps", f"127.0.0.1:{port}", flush=True)
with TaskWatch(spec, lost_after=1, give_up_after=4, native_library=sys.argv[1]):
    if sys.argv[2] == "held":
        ctypes.PyDLL(None).sleep(120)  # holds the GIL, as a wait inside TensorFlow can
    else:
        time.sleep(120)
"""


@pytest.mark.parametrize("gil", ["held", "free"])
def test_a_lost_server_is_named_and_ends_the_run_even_while_a_thread_holds_the_gil(gil):
    """A thread that holds the GIL keeps the Python watch from running: the native watch
    then names the lost server and ends the run with the same lines and exit code. With
    the GIL free, the Python watch does it, and the native one adds nothing."""
    result = run_watch(WATCH_HELD, gil)
    first, *lost = result.stdout.splitlines()
    address = first.split()[1]
    assert result.returncode == 4, result.stdout + result.stderr
    assert len(lost) == 1, result.stdout
    assert re.fullmatch(
        rf"lost     ps 0 \({re.escape(address)}\): unreachable for \d+ s; training waits for "
        r"it \(its variables are there\) and stops if it is not back within 4 s "
        r"\(cluster.give_up_after_seconds\)",
        lost[0],
    ), lost[0]
    assert re.fullmatch(
        rf"error: ps 0 \({re.escape(address)}\) has been unreachable for \d+ s "
        r"\(cluster.give_up_after_seconds = 4\); the run stops. Bring the task back, then "
        r"run the command again to resume from the last checkpoint\n",
        result.stderr,
    ), result.stderr


WATCH_HELD_THEN_BACK = """
import ctypes, socket, sys, time
from recsys_dist.cluster.liveness import TaskWatch
from recsys_dist.errors import ClusterLost
from recsys_dist.console import configure_output
configure_output()
ps = socket.socket()
ps.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ps.bind(("127.0.0.1", 0))
spec = {"ps": [f"127.0.0.1:{ps.getsockname()[1]}"]}
with TaskWatch(spec, lost_after=1, give_up_after=60, native_library=sys.argv[1]):
    ctypes.PyDLL(None).sleep(6)  # the GIL held while nothing listens
    ps.listen(8)  # the server answers again
    time.sleep(3 * 1.0)  # three probe rounds of the Python watch
"""


def test_a_server_named_lost_by_the_native_watch_is_named_back_by_the_python_one():
    result = run_watch(WATCH_HELD_THEN_BACK)
    assert result.returncode == 0, result.stdout + result.stderr
    lost, back = result.stdout.splitlines()
    assert lost.startswith("lost     ps 0 (127.0.0.1:"), lost
    # Unreachable from the first probe until the listen, after the 6 s the GIL was held.
    assert re.fullmatch(
        r"back     ps 0 \(127.0.0.1:\d+\) answers again after (\d+) s unreachable; "
        r"training goes on",
        back,
    ), back
    assert int(re.search(r"after (\d+) s", back).group(1)) >= 5


WATCH_LEFT_OUT = """
import ctypes, socket, sys, time
from recsys_dist.cluster.liveness import TaskWatch
from recsys_dist.console import configure_output
configure_output()
free = socket.socket()
free.bind(("127.0.0.1", 0))
port = free.getsockname()[1]
free.close()  # nothing listens there: the worker's machine never came up
ps = socket.socket()
ps.bind(("127.0.0.1", 0))
ps.listen(128)  # nothing accepts: room for every probe
spec = {"worker": [f"127.0.0.1:{port}"], "ps": [f"127.0.0.1:{ps.getsockname()[1]}"]}
with TaskWatch(spec, lost_after=1, give_up_after=2, native_library=sys.argv[1]) as watch:
    watch.leave_out("worker", 0)
    if sys.argv[2] == "held":
        ctypes.PyDLL(None).sleep(6)  # holds the GIL: the native watch acts
    else:
        time.sleep(6)
print("still running", flush=True)
"""


@pytest.mark.parametrize("gil", ["held", "free"])
def test_a_worker_left_out_of_the_run_is_named_but_never_ends_it(gil):
    """A worker missing at the start is not in the run (``leave_out``): away three times
    ``give_up_after``, it is named once and the run goes on, whichever watch runs."""
    result = run_watch(WATCH_LEFT_OUT, gil)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(result.stdout.splitlines()) == 2, result.stdout + result.stderr
    lost, end = result.stdout.splitlines()
    assert re.fullmatch(
        r"lost     worker 0 \(127.0.0.1:\d+\): unreachable for \d+ s; the run goes on without "
        r"it and takes it in when it answers",
        lost,
    ), lost
    assert end == "still running" and result.stderr == "", result.stderr


WATCH_RESTART = """
import ctypes, os, socket, sys, time
from recsys_dist.cluster.liveness import ImmediateRestart, TaskWatch
from recsys_dist.console import configure_output
configure_output()
free = socket.socket()
free.bind(("127.0.0.1", 0))
port = free.getsockname()[1]
free.close()  # nothing listens there: worker 1's link is down
up = socket.socket()
up.bind(("127.0.0.1", 0))
up.listen(128)  # nothing accepts: room for every probe
address = f"127.0.0.1:{up.getsockname()[1]}"
spec = {"worker": [address, f"127.0.0.1:{port}"], "ps": [address]}
replaced = "import os; print('replaced, restart', os.environ['TEST_RESTART'], flush=True)"

def now(exc):  # as ProcessRestart.now: the line, the variable, the new process
    print(f"restart  {exc}; again", flush=True)
    os.environ["TEST_RESTART"] = "1"
    os.execv(sys.executable, [sys.executable, "-c", replaced])

restart = ImmediateRestart(
    now, (sys.executable, "-c", replaced), "TEST_RESTART", "1", "; again", 0.5
)
with TaskWatch(
    spec, lost_after=1, give_up_after=8, restart=restart, native_library=sys.argv[1]
) as watch:
    if sys.argv[3] == "after_first_step":
        watch.first_step()
    if sys.argv[2] == "held":
        ctypes.PyDLL(None).sleep(12)  # holds the GIL, as a wait inside TensorFlow can
    else:
        time.sleep(12)
"""


@pytest.mark.parametrize("gil", ["held", "free"])
def test_a_worker_lost_before_the_first_step_starts_the_command_again_at_once(gil):
    """Before the first step the chief's start-up waits on every worker (with the GIL
    held, in some of TensorFlow's waits): a lost worker starts the command again at
    once, from the Python watch or, while a thread holds the GIL, the native one, with
    one ``restart`` line; after the first step the run waits and gives up as before."""
    result = run_watch(WATCH_RESTART, gil, "before_first_step")
    assert result.returncode == 0, result.stdout + result.stderr
    lost, restart, replaced = result.stdout.splitlines()
    assert re.fullmatch(r"lost     worker 1 \(127.0.0.1:\d+\): unreachable for \d+ s; .*", lost)
    assert re.fullmatch(
        r"restart  worker 1 \(127.0.0.1:\d+\) was lost before the first step; again", restart
    ), restart
    assert replaced == "replaced, restart 1"
    assert result.stderr == ""

    waited = run_watch(WATCH_RESTART, gil, "after_first_step")
    assert waited.returncode == 4, waited.stdout + waited.stderr
    assert [line.split()[0] for line in waited.stdout.splitlines()] == ["lost"]
    assert waited.stderr.startswith("error: worker 1 (127.0.0.1:")
