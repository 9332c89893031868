"""Tests of the local cluster launcher and the server task entry point.

Cluster tests start real TensorFlow server processes on 127.0.0.1. One 2-worker /
1-ps cluster is shared by the functional tests (module fixture); the no-orphan tests
run a coordinator script in a subprocess so they can signal it.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import recsys_dist
from recsys_dist.cluster.local import LocalCluster, shared_intra_op_threads, terminate_on_signals
from recsys_dist.cluster.server import ClusterError

PROJECT_ROOT = pathlib.Path(recsys_dist.__file__).resolve().parent.parent


def _subprocess_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    return env


def _gone(pid: int) -> bool:
    """True when ``pid`` no longer exists or is a zombie (dead, not yet reaped by init)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _wait_all_gone(pids: list[int], timeout: float = 15.0) -> list[int]:
    """Polls until every pid is gone; returns those still alive at the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(_gone(pid) for pid in pids):
            return []
        time.sleep(0.2)
    return [pid for pid in pids if not _gone(pid)]


# --- fast tests -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"workers": 0, "ps": 1}, "workers must be an integer >= 1, got 0"),
        ({"workers": 1, "ps": -2}, "ps must be an integer >= 1, got -2"),
        ({"workers": True, "ps": 1}, "workers must be an integer >= 1, got True"),
        ({"workers": 1, "ps": 1, "inter_op_threads": 0}, "inter_op_threads must be"),
        ({"workers": 1, "ps": 1, "intra_op_threads": -1},
         r"intra_op_threads must be an integer >= 0 \(0: TensorFlow's default\), got -1"),
        ({"workers": 1, "ps": 1, "intra_op_threads": 1.5}, "intra_op_threads must be"),
        ({"workers": 1, "ps": 1, "start_timeout": 0}, "start_timeout must be > 0"),
    ],
)
def test_bad_arguments_are_rejected(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        LocalCluster(log_dir=tmp_path, **kwargs)


def test_unstarted_cluster_has_no_spec(tmp_path):
    with pytest.raises(RuntimeError, match="not started"):
        LocalCluster(1, 1, tmp_path).cluster_spec


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
        env=_subprocess_env(TF_CONFIG=tf_config),
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
        [sys.executable, "-m", "recsys_dist.cluster.server", "--job", "ps", "--index", "0",
         "--cluster-spec", spec, "--intra-op-threads", "-2"],
        env=_subprocess_env(), capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: intra_op_threads must be >= 0 (0: TensorFlow's default), got -2")


@pytest.mark.parametrize(("cores", "tasks", "threads"), [(2, 4, 1), (16, 4, 4), (6, 4, 1), (1, 2, 1)])
def test_shared_intra_op_threads_split_the_cores(monkeypatch, cores, tasks, threads):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert shared_intra_op_threads(tasks) == threads


def test_terminate_on_signals_ends_the_process_with_one_line_and_restores_handlers():
    before = signal.getsignal(signal.SIGTERM)
    with terminate_on_signals():
        assert signal.getsignal(signal.SIGTERM) != before
    assert signal.getsignal(signal.SIGTERM) == before
    script = ("import os, signal, time\n"
              "from recsys_dist.cluster.local import terminate_on_signals\n"
              "with terminate_on_signals():\n"
              "    os.kill(os.getpid(), signal.SIGINT)\n"
              "    time.sleep(30)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 128 + signal.SIGINT
    assert done.stderr == "error: stopped by SIGINT\n"


def test_start_failure_names_task_exit_code_and_log(tmp_path):
    # A Python that cannot find its standard library dies at once with exit code 1.
    cluster = LocalCluster(1, 1, tmp_path, env={"PYTHONHOME": "/nonexistent"})
    expected = r"task worker:0 \(127\.0\.0\.1:\d+\) exited with code 1"
    with pytest.raises(ClusterError, match=expected) as e:
        cluster.start()
    assert "No module named 'encodings'" in str(e.value)  # the log tail
    assert str(tmp_path / "worker-0.log") in str(e.value)


# --- real clusters ----------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(workers=2, ps=1, log_dir=tmp_path_factory.mktemp("cluster-logs")) as c:
        yield c


@pytest.fixture(scope="module")
def coordinator(cluster):
    import tensorflow as tf

    strategy = tf.distribute.ParameterServerStrategy(cluster.cluster_resolver())
    return tf.distribute.coordinator.ClusterCoordinator(strategy)


@pytest.mark.cluster
def test_cluster_spec_and_processes(cluster):
    spec = cluster.cluster_spec
    assert [len(spec["worker"]), len(spec["ps"])] == [2, 1]
    assert all(address.startswith("127.0.0.1:") for address in spec["worker"] + spec["ps"])
    assert len(set(spec["worker"] + spec["ps"])) == 3
    assert cluster.alive() == {"worker": [True, True], "ps": [True]}
    threads = shared_intra_op_threads(3)  # the cores split between its 3 tasks
    assert (f"recsys_dist server ps:0 serving on {spec['ps'][0]} (pid "
            in cluster.log_path("ps", 0).read_text())
    assert f"intra-op threads {threads})" in cluster.log_path("worker", 1).read_text()


@pytest.mark.cluster
def test_scheduled_functions_update_a_ps_variable(coordinator):
    import tensorflow as tf

    with coordinator.strategy.scope():
        counter = tf.Variable(0.0)
    assert "/job:ps" in counter.device

    @tf.function
    def step():
        counter.assign_add(1.0)
        return tf.constant(7.0)

    results = [coordinator.schedule(step) for _ in range(6)]
    coordinator.join()
    assert [r.fetch() for r in results] == [7.0] * 6
    assert counter.numpy() == 6.0


@pytest.mark.cluster
def test_worker_runs_the_parquet_op_on_nulls_and_lists(coordinator, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    import tensorflow as tf

    from recsys_dist import ops

    path = str(tmp_path / "x.parquet")
    pq.write_table(pa.table({"x": pa.array([1, None, 3], pa.int64()),
                             "l": pa.array([[1, None], None, [4]], pa.list_(pa.int64()))}), path)

    @tf.function
    def read():
        columns = ops.read_rows(path, 0, 3, {"x": tf.int64, "l": tf.int64}, ragged={"l"})
        return (columns["x"].values, columns["x"].valid, columns["l"].values,
                columns["l"].valid, columns["l"].row_splits)

    result = coordinator.schedule(read)
    coordinator.join()
    x, x_valid, l_values, l_valid, l_splits = (t.tolist() for t in result.fetch())
    assert (x, x_valid) == ([1, 0, 3], [True, False, True])
    assert (l_values, l_valid, l_splits) == ([1, 0, 4], [True, False, True], [0, 2, 2, 3])


BARE_COORDINATOR = r"""
import json, sys
import recsys_dist
import tensorflow as tf
from recsys_dist.config import load_config
from recsys_dist.data.input_fn import prepare_input
from recsys_dist.data.read_pass import read_pass_on_cluster
from recsys_dist.errors import RecsysError

spec, config = json.loads(sys.argv[1]), sys.argv[2]
resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(spec),
                                                                rpc_layer="grpc")
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
try:
    read_pass_on_cluster(prepare_input(load_config(config), "train", 1), strategy, coordinator)
except RecsysError as exc:
    print(f"error: {exc}", flush=True)
"""


@pytest.mark.cluster
def test_a_worker_without_the_parquet_op_gets_a_clear_error(tmp_path, small_config):
    """Servers started without recsys_dist (plain tf.distribute.Server) cannot run the op;
    the job stops with an error that says so, not `Op type not registered`. (The
    coordinator runs in its own process: a strategy connects its whole process to a
    cluster, and the module's shared cluster must stay connected.)"""
    from conftest import free_port, small_table, write_parquet

    write_parquet(tmp_path / "data" / "dt=2026-01-01" / "a.parquet", small_table(50))
    config = small_config(train="{dates: 2026-01-01}")
    spec = {"worker": [f"127.0.0.1:{free_port()}"], "ps": [f"127.0.0.1:{free_port()}"]}
    bare = ("import json, sys, tensorflow as tf; spec = json.loads(sys.argv[1]); "
            "tf.distribute.Server(tf.train.ClusterSpec(spec), job_name=sys.argv[2], "
            "task_index=0, config=tf.compat.v1.ConfigProto(inter_op_parallelism_threads=4)"
            ").join()")
    servers = [subprocess.Popen([sys.executable, "-c", bare, json.dumps(spec), job],
                                env=_subprocess_env(), stderr=subprocess.DEVNULL)
               for job in ("worker", "ps")]
    try:
        result = subprocess.run(
            [sys.executable, "-c", BARE_COORDINATOR, json.dumps(spec), config],
            env=_subprocess_env(GRPC_FAIL_FAST="use_caller"), capture_output=True, text=True,
            timeout=300)
    finally:
        for server in servers:
            server.kill()
            server.wait()
    assert ("error: a worker cannot run the ParquetReadRows op: its process never loaded "
            "recsys_dist's Parquet op library. Start every worker") in result.stdout, (
        result.stdout[-2000:] + result.stderr[-3000:])


def _workers_that_ran(coordinator, fn, closures: int) -> set[int]:
    results = [coordinator.schedule(fn) for _ in range(closures)]
    coordinator.join()
    return {int(result.fetch()) for result in results}


@pytest.mark.cluster
def test_killed_worker_restarts_on_same_port_and_serves(cluster, coordinator):
    import tensorflow as tf

    address = cluster.cluster_spec["worker"][0]
    old_pid = cluster.pid("worker", 0)
    with coordinator.strategy.scope():
        counter = tf.Variable(0.0)

    @tf.function
    def step():
        counter.assign_add(1.0)
        return tf.distribute.coordinator.experimental_get_current_worker_index()

    cluster.kill("worker", 0)
    assert cluster.alive() == {"worker": [False, True], "ps": [True]}
    with pytest.raises(ClusterError, match="worker:1 is still running"):
        cluster.restart("worker", 1)
    # Worker 0 fails these closures; the coordinator runs them again on worker 1.
    results = [coordinator.schedule(step) for _ in range(8)]

    cluster.restart("worker", 0)
    assert cluster.alive() == {"worker": [True, True], "ps": [True]}
    assert cluster.cluster_spec["worker"][0] == address
    assert cluster.pid("worker", 0) != old_pid
    coordinator.join()
    assert counter.numpy() >= 8.0  # closures run at least once
    assert {int(result.fetch()) for result in results} <= {0, 1}

    # join() may return before the coordinator reconnects to the new process; wait
    # until worker 0 runs closures again (also so that stopping the cluster later does
    # not interrupt TensorFlow's recovery, which would hang the coordinator's teardown).
    deadline = time.monotonic() + 60
    while 0 not in _workers_that_ran(coordinator, step, closures=4):
        assert time.monotonic() < deadline, "the restarted worker 0 ran no closure in 60 s"
    assert cluster.log_path("worker", 0).read_text().count(f"serving on {address}") == 2


@pytest.mark.cluster
def test_supervisor_restarts_a_killed_worker_and_reports_it(tmp_path):
    messages: list[str] = []
    with LocalCluster(1, 1, tmp_path) as cluster:
        old_pid = cluster.pid("worker", 0)
        cluster.supervise_workers(interval=0.1, report=messages.append)
        cluster.kill("worker", 0)
        deadline = time.monotonic() + 90
        while len(messages) < 2:
            assert time.monotonic() < deadline, f"no restart in 90 s: {messages}"
            time.sleep(0.1)
        new_pid = cluster.pid("worker", 0)
        assert messages == ["worker 0 exited with code -9; restarting it",
                            f"worker 0 is back (pid {new_pid})"]
        assert new_pid != old_pid
        assert cluster.alive() == {"worker": [True], "ps": [True]}
        assert [(job, index, code) for _, job, index, code in cluster.restarts] == [
            ("worker", 0, -9)]
        address = cluster.cluster_spec["worker"][0]
        assert cluster.log_path("worker", 0).read_text().count(f"serving on {address}") == 2


COORDINATOR_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from recsys_dist.cluster.local import LocalCluster, terminate_on_signals

    with terminate_on_signals(), LocalCluster(1, 1, sys.argv[1]) as c:
        print(json.dumps([c.pid("worker", 0), c.pid("ps", 0)]), flush=True)
        while True:
            time.sleep(1)
    """
)


def _run_coordinator_script(tmp_path: pathlib.Path) -> tuple[subprocess.Popen, list[int]]:
    script = tmp_path / "coordinator.py"
    script.write_text(COORDINATOR_SCRIPT)
    process = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "logs")],
        env=_subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline()
    if not line:
        process.wait(timeout=30)
        pytest.fail(f"coordinator script printed no pids: {process.stderr.read()}")
    pids = json.loads(line)
    assert not any(_gone(pid) for pid in pids)
    return process, pids


@pytest.mark.cluster
def test_sigterm_to_coordinator_stops_the_cluster(tmp_path):
    process, pids = _run_coordinator_script(tmp_path)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 128 + signal.SIGTERM
    assert _wait_all_gone(pids, timeout=5) == []


@pytest.mark.cluster
def test_sigkill_of_coordinator_kills_the_cluster(tmp_path):
    process, pids = _run_coordinator_script(tmp_path)
    process.kill()
    assert process.wait(timeout=30) == -signal.SIGKILL
    assert _wait_all_gone(pids) == []
