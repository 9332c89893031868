"""The local cluster launcher and the server task entry point without a cluster: argument
checks, TF_CONFIG rejections, thread counts, signals, a task that cannot start. Covers
``cluster/local.py``, the server task (``cluster/server.py``) and ``cluster/signals.py``.

The launcher on real clusters is in tests/cluster/test_local_cluster.py.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from recsys_dist.cluster import local
from recsys_dist.cluster.local import LocalCluster, shared_intra_op_threads
from recsys_dist.cluster.server import ClusterError
from recsys_dist.cluster.signals import terminate_on_signals
from tests.support.processes import subprocess_env


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"workers": 0, "ps": 1}, "workers must be an integer >= 1, got 0"),
        ({"workers": 1, "ps": -2}, "ps must be an integer >= 1, got -2"),
        ({"workers": True, "ps": 1}, "workers must be an integer >= 1, got True"),
        ({"workers": 1, "ps": 1, "inter_op_threads": 0}, "inter_op_threads must be"),
        (
            {"workers": 1, "ps": 1, "intra_op_threads": -1},
            r"intra_op_threads must be an integer >= 0 \(0: TensorFlow's default\), got -1",
        ),
        ({"workers": 1, "ps": 1, "intra_op_threads": 1.5}, "intra_op_threads must be"),
        ({"workers": 1, "ps": 1, "start_timeout": 0}, "start_timeout must be > 0"),
    ],
)
def test_bad_arguments_are_rejected(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        LocalCluster(log_dir=tmp_path, **kwargs)


def test_unstarted_cluster_has_no_spec(tmp_path):
    with pytest.raises(RuntimeError, match="not started"):
        _ = LocalCluster(1, 1, tmp_path).cluster_spec


@pytest.mark.parametrize(
    ("tf_config", "message"),
    [
        ('{"cluster": {}}', "error: TF_CONFIG cluster has no 'worker' job"),
        ("{not json", "error: TF_CONFIG is not valid JSON"),
        ('{"cluster": {"worker": ["h:1"], "ps": ["h:2"]}}', "error: TF_CONFIG has no 'task'"),
        (
            '{"cluster": {"worker": ["h:1"], "ps": ["h:2"]}, "task": {"type": "ps", "index": 1}}',
            "error: task index 1 is out of range: the cluster has 1 'ps' task(s)",
        ),
    ],
)
def test_server_rejects_bad_tf_config(tf_config, message):
    result = subprocess.run(
        [sys.executable, "-m", "recsys_dist.cluster.server"],
        env=subprocess_env(TF_CONFIG=tf_config),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(message)


def test_server_rejects_a_negative_intra_op_thread_count():
    spec = '{"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}'
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "recsys_dist.cluster.server",
            "--job",
            "ps",
            "--index",
            "0",
            "--cluster-spec",
            spec,
            "--intra-op-threads",
            "-2",
        ],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: intra_op_threads must be >= 0 (0: TensorFlow's default), got -2"
    )


@pytest.mark.parametrize(
    ("cores", "tasks", "threads"), [(2, 4, 1), (16, 4, 4), (6, 4, 1), (1, 2, 1)]
)
def test_shared_intra_op_threads_split_the_cores(monkeypatch, cores, tasks, threads):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert shared_intra_op_threads(tasks) == threads


def test_terminate_on_signals_ends_the_process_with_one_line_and_restores_handlers():
    before = signal.getsignal(signal.SIGTERM)
    with terminate_on_signals():
        assert signal.getsignal(signal.SIGTERM) != before
    assert signal.getsignal(signal.SIGTERM) == before
    script = (
        "import os, signal, time\n"
        "from recsys_dist.cluster.signals import terminate_on_signals\n"
        "with terminate_on_signals():\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(30)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 128 + signal.SIGINT
    assert done.stderr == "error: stopped by SIGINT\n"


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_ends_the_process_while_the_main_thread_waits_in_native_code(sent):
    """The main thread blocks the signals and waits on a lock that nothing releases, as it
    did inside TensorFlow's first ``schedule`` while a server was unreachable: the kernel
    hands the signal to another thread, and the main thread never runs a Python handler.
    The process still ends, with the one line and 128 + signum."""
    script = (
        "import signal, sys, threading, time\n"
        "from recsys_dist.cluster.signals import terminate_on_signals\n"
        "ending = [signal.SIGTERM, signal.SIGHUP, signal.SIGINT]\n"
        "with terminate_on_signals():\n"
        "    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
        "    signal.pthread_sigmask(signal.SIG_BLOCK, ending)\n"
        "    lock = threading.Lock()\n"
        "    lock.acquire()\n"
        "    print('waiting', flush=True)\n"
        "    lock.acquire()\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline() == "waiting\n"
    process.send_signal(sent)
    try:
        _, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"{sent.name} did not end the process")
    assert process.returncode == 128 + sent
    assert stderr == f"error: stopped by {sent.name}\n"


def test_start_failure_of_the_forking_process_names_its_exit_code_and_log(tmp_path):
    # A Python that cannot find its standard library dies at once with exit code 1.
    cluster = LocalCluster(1, 1, tmp_path, env={"PYTHONHOME": "/nonexistent"})
    expected = "the forking process of the local cluster exited with code 1"
    with pytest.raises(ClusterError, match=expected) as e:
        cluster.start()
    assert "its last lines:" in str(e.value)
    assert "No module named 'encodings'" in str(e.value)


def test_start_failure_of_a_task_names_the_task_its_exit_code_and_log(tmp_path, monkeypatch):
    # The worker's port is taken (bound, not listening): its server cannot bind it.
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    ports = [taken.getsockname()[1], *local.free_ports(1)]
    monkeypatch.setattr(local, "free_ports", lambda count: ports[:count])
    cluster = LocalCluster(1, 1, tmp_path)
    expected = rf"task worker:0 \(127\.0\.0\.1:{ports[0]}\) exited with code 1"
    try:
        with pytest.raises(ClusterError, match=expected) as e:
            cluster.start()
    finally:
        taken.close()
    assert str(tmp_path / "worker-0.log") in str(e.value)
    assert "Traceback" in str(e.value)  # the log tail
