"""The forking process of a local cluster (``recsys_dist/cluster/server_forks.py``), with
real forked server tasks: exit codes as ``subprocess`` reports them, the task's name and
log, a killed task, and tasks that end with a killed forking process, which starts again
on the next request."""

from __future__ import annotations

import json
import pathlib
import signal
import socket
import time

import pytest

from recsys_dist.cluster.local import free_ports
from recsys_dist.cluster.server_forks import ServerForks
from tests.support.processes import subprocess_env


@pytest.fixture()
def forks():
    env = subprocess_env()
    env.pop("TF_CONFIG", None)
    forks = ServerForks(env, start_timeout=120)
    yield forks
    forks.stop()


def _serves(port: int, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def _logged(log: pathlib.Path, line: str, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and line in log.read_text():
            return True
        time.sleep(0.05)
    return False


def _server_flags(job: str, ports: list[int]) -> list[str]:
    spec = {"worker": [f"127.0.0.1:{ports[0]}"], "ps": [f"127.0.0.1:{ports[1]}"]}
    return ["--job", job, "--index", "0", "--cluster-spec", json.dumps(spec)]


def test_a_task_that_refuses_its_flags_reports_its_exit_code_and_its_line(forks, tmp_path):
    log = tmp_path / "worker-0.log"
    task = forks.spawn(["--job", "worker"], log, "worker-0")  # no spec, no TF_CONFIG
    assert task.wait(timeout=60) == 2
    assert task.poll() == 2
    assert log.read_text().strip() == "error: TF_CONFIG is not set and no --cluster-spec was given"


def test_a_task_serves_under_its_name_and_a_kill_is_reported(forks, tmp_path):
    ports = free_ports(2)
    task = forks.spawn(_server_flags("ps", ports), tmp_path / "ps-0.log", "ps-0")
    log = tmp_path / "ps-0.log"
    # The port accepts as soon as TensorFlow's server starts, a moment before the task
    # writes its line: wait for the line, which comes last.
    assert _logged(log, "serving on 127.0.0.1"), log.read_text()
    assert _serves(ports[1]), log.read_text()
    assert pathlib.Path(f"/proc/{task.pid}/comm").read_text().strip() == "ps-0"
    assert task.poll() is None
    task.kill()
    assert task.wait(timeout=60) == -signal.SIGKILL


def test_tasks_end_with_their_forking_process_which_starts_again(forks, tmp_path):
    ports = free_ports(2)
    first = forks.spawn(_server_flags("worker", ports), tmp_path / "w.log", "worker-0")
    assert _serves(ports[0])
    forks._process.kill()  # the forking process dies; its tasks get SIGKILL from the kernel
    assert first.wait(timeout=60) == -signal.SIGKILL
    assert not pathlib.Path(f"/proc/{first.pid}/comm").exists() or (
        pathlib.Path(f"/proc/{first.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    )
    again = forks.spawn(_server_flags("worker", ports), tmp_path / "w.log", "worker-0")
    assert _serves(ports[0]), (tmp_path / "w.log").read_text()
    assert again.pid != first.pid and again.poll() is None
