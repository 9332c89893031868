"""The local cluster launcher on real TensorFlow server processes on 127.0.0.1.

One 2-worker / 1-ps cluster is shared by the functional tests (module fixture); the
no-orphan tests run a coordinator script in a subprocess so they can signal it. The
launcher's and the server task's argument checks, which start no cluster, are in
tests/unit/cluster/test_local.py.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from recsys_dist.cluster.local import LocalCluster, shared_intra_op_threads
from recsys_dist.cluster.server import ClusterError
from tests.support.data import free_port, small_table, write_parquet
from tests.support.processes import subprocess_env

pytestmark = pytest.mark.cluster


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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(workers=2, ps=1, log_dir=tmp_path_factory.mktemp("cluster-logs")) as c:
        yield c


@pytest.fixture(scope="module")
def coordinator(cluster):
    import tensorflow as tf

    strategy = tf.distribute.ParameterServerStrategy(cluster.cluster_resolver())
    return tf.distribute.coordinator.ClusterCoordinator(strategy)


def test_cluster_spec_and_processes(cluster):
    spec = cluster.cluster_spec
    assert [len(spec["worker"]), len(spec["ps"])] == [2, 1]
    assert all(address.startswith("127.0.0.1:") for address in spec["worker"] + spec["ps"])
    assert len(set(spec["worker"] + spec["ps"])) == 3
    assert cluster.alive() == {"worker": [True, True], "ps": [True]}
    threads = shared_intra_op_threads(3)  # the cores split between its 3 tasks
    assert f"recsys_dist server ps:0 serving on {spec['ps'][0]} (pid " in logged(
        cluster, "ps", 0, "serving on"
    )
    assert f"intra-op threads {threads})" in logged(cluster, "worker", 1, "serving on")


def logged(cluster, job: str, index: int, text: str, times: int = 1, timeout: float = 30) -> str:
    """The task's log once it holds ``text`` ``times`` times: a task accepts connections
    (which is when the cluster counts it as started) just before it prints its line, and
    under load the line came after the test read the log (an empty worker log failed CI
    once)."""
    deadline = time.monotonic() + timeout
    while True:
        content = cluster.log_path(job, index).read_text()
        if content.count(text) >= times or time.monotonic() > deadline:
            return content
        time.sleep(0.1)


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


def test_the_call_to_a_task_that_answers_again_leaves_the_coordinator_running(cluster, coordinator):
    """The call the chief sends a task whose link came back (``_call_again``,
    ``cluster/runtime.py``) waits for the task's answer without Python's lock: while
    worker 1 is stopped (its kernel accepts, nothing answers) this thread goes on, and
    the call returns once the worker does. TensorFlow's ``check_alive`` kept the lock,
    so the whole coordinator froze until the worker answered."""
    from recsys_dist.cluster.runtime import _call_again

    pid = cluster.pid("worker", 1)
    os.kill(pid, signal.SIGSTOP)
    # resumed by another process: a frozen test could not do it
    subprocess.Popen(["sh", "-c", f"sleep 3; kill -CONT {pid}"])
    start = time.monotonic()
    call = threading.Thread(target=_call_again, args=("worker", 1), daemon=True)
    call.start()
    ticks = []
    while time.monotonic() - start < 2:
        ticks.append(time.monotonic() - start)
        time.sleep(0.05)
    assert ticks[0] < 0.5 and len(ticks) > 20, ticks[:5]
    assert call.is_alive()  # it waits for the stopped worker
    call.join(timeout=30)
    assert not call.is_alive()
    assert time.monotonic() - start >= 2.5  # the answer came after the worker went on


def test_worker_runs_the_parquet_op_on_nulls_and_lists(coordinator, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    import tensorflow as tf

    from recsys_dist import ops

    path = str(tmp_path / "x.parquet")
    pq.write_table(
        pa.table(
            {
                "x": pa.array([1, None, 3], pa.int64()),
                "l": pa.array([[1, None], None, [4]], pa.list_(pa.int64())),
            }
        ),
        path,
    )

    @tf.function
    def read():
        columns = ops.read_rows(path, 0, 3, {"x": tf.int64, "l": tf.int64}, ragged={"l"})
        return (
            columns["x"].values,
            columns["x"].valid,
            columns["l"].values,
            columns["l"].valid,
            columns["l"].row_splits,
        )

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
from recsys_dist.cluster.read_check import read_split
from recsys_dist.errors import RecsysError

spec, config = json.loads(sys.argv[1]), sys.argv[2]
resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(spec),
                                                                rpc_layer="grpc")
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
try:
    read_split(prepare_input(load_config(config), "train", 1), coordinator, 1, 1)
except RecsysError as exc:
    print(f"error: {exc}", flush=True)
"""


def test_a_worker_without_the_parquet_op_gets_a_clear_error(tmp_path, small_config):
    """Servers started without recsys_dist (plain tf.distribute.Server) cannot run the op;
    the job stops with an error that says so, not `Op type not registered`. (The
    coordinator runs in its own process: a strategy connects its whole process to a
    cluster, and the module's shared cluster must stay connected.)"""
    write_parquet(tmp_path / "data" / "dt=2026-01-01" / "a.parquet", small_table(50))
    config = small_config(train={"dates": "2026-01-01"})
    spec = {"worker": [f"127.0.0.1:{free_port()}"], "ps": [f"127.0.0.1:{free_port()}"]}
    bare = (
        "import json, sys, tensorflow as tf; spec = json.loads(sys.argv[1]); "
        "tf.distribute.Server(tf.train.ClusterSpec(spec), job_name=sys.argv[2], "
        "task_index=0, config=tf.compat.v1.ConfigProto(inter_op_parallelism_threads=4)"
        ").join()"
    )
    servers = [
        subprocess.Popen(
            [sys.executable, "-c", bare, json.dumps(spec), job],
            env=subprocess_env(),
            stderr=subprocess.DEVNULL,
        )
        for job in ("worker", "ps")
    ]
    try:
        result = subprocess.run(
            [sys.executable, "-c", BARE_COORDINATOR, json.dumps(spec), config],
            env=subprocess_env(GRPC_FAIL_FAST="use_caller"),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        for server in servers:
            server.kill()
            server.wait()
    assert (
        "error: a worker cannot run the ParquetReadRows op: its process never loaded "
        "recsys_dist's Parquet op library. Start every worker"
    ) in result.stdout, result.stdout[-2000:] + result.stderr[-3000:]


def _workers_that_ran(coordinator, fn, closures: int) -> set[int]:
    results = [coordinator.schedule(fn) for _ in range(closures)]
    coordinator.join()
    return {int(result.fetch()) for result in results}


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
    assert (
        logged(cluster, "worker", 0, f"serving on {address}", 2).count(f"serving on {address}") == 2
    )


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
        assert messages == [
            "worker 0 exited with code -9; restarting it",
            f"worker 0 is back (pid {new_pid})",
        ]
        assert new_pid != old_pid
        assert cluster.alive() == {"worker": [True], "ps": [True]}
        assert [(job, index, code) for _, job, index, code in cluster.restarts] == [
            ("worker", 0, -9)
        ]
        address = cluster.cluster_spec["worker"][0]
        assert (
            logged(cluster, "worker", 0, f"serving on {address}", 2).count(f"serving on {address}")
            == 2
        )


COORDINATOR_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from recsys_dist.cluster.local import LocalCluster
    from recsys_dist.cluster.signals import terminate_on_signals

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
        env=subprocess_env(),
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


def test_sigterm_to_coordinator_stops_the_cluster(tmp_path):
    process, pids = _run_coordinator_script(tmp_path)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 128 + signal.SIGTERM
    assert _wait_all_gone(pids, timeout=5) == []


def test_sigkill_of_coordinator_kills_the_cluster(tmp_path):
    process, pids = _run_coordinator_script(tmp_path)
    process.kill()
    assert process.wait(timeout=30) == -signal.SIGKILL
    assert _wait_all_gone(pids) == []
