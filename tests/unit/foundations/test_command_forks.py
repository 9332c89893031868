"""The tests' forked ``recsys-dist`` commands (``tests/support/command_forks.py``): the
same streams, exit codes, environment and signals as the console script run as a
subprocess, and a plain subprocess where a fork could differ."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import time

import pytest

from recsys_dist.cluster.local import free_ports
from tests.support import command_forks
from tests.support.paths import CLI


def _parent(pid: int) -> int:
    return int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _wait_for_line(stream, text: str, timeout: float = 120) -> str:
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"no {text!r} in {''.join(seen)!r}")


def test_a_refusal_gives_its_exit_code_and_its_line_on_stderr_alone(tmp_path):
    missing = tmp_path / "missing.yaml"
    result = command_forks.run(
        [CLI, "validate", "--config", str(missing)], capture_output=True, text=True, timeout=120
    )
    plain = subprocess.run(
        [CLI, "validate", "--config", str(missing)], capture_output=True, text=True, timeout=120
    )
    assert (result.returncode, result.stdout, result.stderr) == (
        plain.returncode,
        plain.stdout,
        plain.stderr,
    )
    assert result.returncode == 2 and result.stderr == f"error: {missing}: config file not found\n"


def test_a_forked_server_reads_its_environment_and_ends_on_sigterm_with_its_line():
    worker, ps = (f"127.0.0.1:{port}" for port in free_ports(2))
    tf_config = {"cluster": {"worker": [worker], "ps": [ps]}, "task": {"type": "ps", "index": 0}}
    process = command_forks.popen(
        [CLI, "server"],
        env={**os.environ, "TF_CONFIG": json.dumps(tf_config)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert isinstance(process, command_forks.ForkedCommand)
        assert _parent(process.pid) != os.getpid()  # a child of the forking process
        _wait_for_line(process.stdout, f"recsys_dist server ps:0 serving on {ps}")
        assert pathlib.Path(f"/proc/{process.pid}/comm").read_text().strip() == "recsys-dist"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 128 + signal.SIGTERM
        assert process.stdout.read().strip().splitlines()[-1] == "error: stopped by SIGTERM"
    finally:
        process.kill()


def test_sigkill_is_reported_as_subprocess_reports_it():
    worker, ps = (f"127.0.0.1:{port}" for port in free_ports(2))
    spec = json.dumps({"worker": [worker], "ps": [ps]})
    process = command_forks.popen(
        [CLI, "server", "--job", "worker", "--index", "0", "--cluster-spec", spec],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    _wait_for_line(process.stdout, "serving on")
    assert process.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):  # a serving task does not end by itself
        process.wait(timeout=0.5)
    process.kill()
    assert process.wait(timeout=60) == -signal.SIGKILL and process.poll() == -signal.SIGKILL


def test_an_environment_tensorflow_reads_at_import_runs_a_plain_subprocess(tmp_path):
    # a value the forking process cannot have: TensorFlow read the variable at its import
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "") + "0"}
    process = command_forks.popen(
        [CLI, "validate", "--config", str(tmp_path / "missing.yaml")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert isinstance(process, subprocess.Popen)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 2 and "config file not found" in err
