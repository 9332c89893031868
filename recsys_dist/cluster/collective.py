"""Synchronous training across worker processes: ``cluster.strategy: multi_worker_mirrored``.

Every worker process holds a copy of every variable, and the workers exchange gradients
each step with TensorFlow's collective ops over gRPC (``MultiWorkerMirroredStrategy``;
``TF_CONFIG`` names workers only). There is no coordinator: each worker runs the same
training loop, so every worker must take the same decisions in the same order. Worker 0
(the chief) decides when to log, write summaries or checkpoint and sends it to the others
(:func:`agree`, :func:`from_chief`); the others write their checkpoints, which take part
in collectives, into a scratch directory (:func:`scratch_dir`). A step is one
``tf.function`` call, since the collective all-gather of sparse gradients fails inside
an in-graph loop of steps. :func:`launch` runs a local cluster. See
docs/cluster.md#multi_worker_mirrored.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import tensorflow as tf

from recsys_dist import scratch
from recsys_dist.cluster.child_fork import can_fork, fork_child
from recsys_dist.cluster.local import _tail, child_env, free_ports, shared_intra_op_threads
from recsys_dist.cluster.server import ClusterError, parse_tf_config
from recsys_dist.cluster.server_forks import die_with_parent
from recsys_dist.errors import ClusterLost, RecsysError

#: Environment variable naming the run file a worker process reads.
RUN_FILE_ENV = "RECSYS_DIST_COLLECTIVE_RUN"
#: Threads per op of a local worker process (this machine's cores split over the workers).
INTRA_OP_THREADS_ENV = "RECSYS_DIST_INTRA_OP_THREADS"
#: What the chief writes for the launcher when the run ends: :class:`RunOutcome` fields.
OUTCOME_FILE = "collective_outcome.json"
_HOST = "127.0.0.1"
_LOG_TAIL_LINES = 20


def collective_task() -> tuple[dict[str, list[str]], int] | None:
    """``(cluster spec, worker index)`` when ``TF_CONFIG`` makes this process a worker of
    a ``multi_worker_mirrored`` job, else None (``TF_CONFIG`` unset).

    Raises:
      ClusterError: ``TF_CONFIG`` names parameter servers or a chief, or this task is
        not a worker.
    """
    text = os.environ.get("TF_CONFIG")
    if not text:
        return None
    spec, task_type, index = parse_tf_config(text, jobs=("worker",))
    others = sorted(set(spec) - {"worker"})
    if others:
        raise ClusterError(
            f"TF_CONFIG names {', '.join(repr(o) for o in others)} tasks, but "
            "cluster.strategy: multi_worker_mirrored runs on workers only (every "
            "worker trains; no parameter servers, no chief); use "
            "cluster.strategy: parameter_server for a cluster with ps tasks"
        )
    if task_type != "worker":
        raise ClusterError(
            f"TF_CONFIG task.type is {task_type!r}; under cluster.strategy: "
            "multi_worker_mirrored every process is a 'worker'"
        )
    if not 0 <= index < len(spec["worker"]):
        raise ClusterError(
            f"TF_CONFIG task.index {index} is out of range: the cluster has "
            f"{len(spec['worker'])} workers"
        )
    return spec, index


@functools.cache
def collective_strategy():
    """The ``MultiWorkerMirroredStrategy`` of this worker (one replica: its CPU), one per
    process: TensorFlow configures collective ops only before its first op, so a worker
    makes it before it plans its input, which may run ops
    (:func:`recsys_dist.cluster.runtime.prepare_devices`), and ``connect`` gets the same.

    Raises:
      ClusterError: the worker has several devices (GPUs): untested, so refused.
    """
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING
        )
    )
    devices = strategy.extended.worker_devices
    if len(devices) != 1:
        raise ClusterError(
            f"cluster.strategy: multi_worker_mirrored runs one replica per "
            f"worker, but this worker has {len(devices)} devices "
            f"({', '.join(devices)}); several GPUs per worker are not supported"
        )
    return strategy


def agree(strategy, flags: tuple[bool, ...], chief: bool) -> tuple[bool, ...]:
    """The chief's ``flags`` on every worker (one all-reduce; call on all workers at once)."""
    return tuple(v > 0.5 for v in from_chief(strategy, tuple(float(f) for f in flags), chief))


def from_chief(strategy, values: tuple[float, ...], chief: bool) -> tuple[float, ...]:
    """The chief's ``values`` on every worker: the others pass anything of the same length
    (one all-reduce of the chief's values and the others' zeros; call on all workers at
    once)."""
    fn = getattr(strategy, "_recsys_from_chief", None)
    if fn is None:

        @tf.function
        def fn(values):
            per_replica = strategy.run(lambda v: v, args=(values,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        strategy._recsys_from_chief = fn  # pylint: disable=protected-access
    mine = tf.constant([v if chief else 0.0 for v in values], tf.float64)
    return tuple(float(v) for v in fn(mine).numpy())


# ---- the local launcher ------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CollectiveRun:
    """What every worker process of a local run trains (written as JSON for them)."""

    config_file: str  # the resolved config (absolute paths)
    data_path: str | None  # --data, which the resolved config does not keep
    model_dir: str
    evaluate: bool
    warm_start_from: str | None
    on_table_resize: str


def launch(run: CollectiveRun, workers: int, log_dir: str, module: str) -> dict[str, Any]:
    """Runs ``run`` on ``workers`` local worker processes (``python -m module``, which
    reads the run from :data:`RUN_FILE_ENV`); returns the chief's outcome.

    The workers are named ``collective-{index}`` and run on 127.0.0.1, forked from this
    process when it has imported TensorFlow and run nothing (``child_fork.can_fork``).
    Worker 0's output goes to this process's stdout; worker ``i``'s to
    ``log_dir/worker-i.log``. If a worker dies, the others are stopped and the command
    starts again from the last checkpoint (``train.max_restarts``).

    Raises:
      ClusterLost: a worker died from a signal or lost its peers (start again to resume).
      RecsysError: a worker stopped on an error (bad data, a bad checkpoint, ...): its
        message, as worker 0 printed it.
    """
    os.makedirs(log_dir, exist_ok=True)
    run_file = os.path.join(log_dir, "collective_run.json")
    with open(run_file, "w", encoding="utf-8") as handle:
        json.dump(dataclasses.asdict(run), handle, indent=2)
    ports = free_ports(workers)
    spec = {"worker": [f"{_HOST}:{p}" for p in ports]}
    outcome_path = os.path.join(log_dir, OUTCOME_FILE)
    if os.path.exists(outcome_path):
        os.remove(outcome_path)
    processes: list[subprocess.Popen] = []
    logs: list[pathlib.Path] = []
    try:
        for index in range(workers):
            env = _worker_env(spec, index, run_file)
            log = pathlib.Path(log_dir) / f"worker-{index}.log"
            logs.append(log)
            streams = {"stdin": subprocess.DEVNULL, "stderr": subprocess.STDOUT}
            with open(log, "ab") as out:
                streams["stdout"] = subprocess.PIPE if index == 0 else out
                if can_fork(env):  # this process has imported TensorFlow: no second import
                    process = fork_child(
                        functools.partial(_run_as_main, module),
                        env=env,
                        name=worker_name(index),
                        new_session=True,
                        **streams,
                    )
                else:
                    process = subprocess.Popen(
                        [sys.executable, "-m", module],
                        env=env,
                        preexec_fn=die_with_parent(os.getpid()),
                        start_new_session=True,
                        **streams,
                    )
                processes.append(process)
        echo = threading.Thread(target=_echo, args=(processes[0], logs[0]), daemon=True)
        echo.start()
        failed = _wait_all(processes)
        echo.join(timeout=5)
    finally:
        _stop(processes)
    if failed is None:
        with open(outcome_path, encoding="utf-8") as handle:
            return json.load(handle)
    index, code = failed
    if code < 0 or code == ClusterLost.exit_code:
        what = f"was killed by {signal.Signals(-code).name}" if code < 0 else "lost its peers"
        raise ClusterLost(
            f"worker {index} of {workers} (multi_worker_mirrored) {what}; last "
            f"lines of {logs[index]}:\n{_tail(logs[index], _LOG_TAIL_LINES)}"
        )
    error = WorkerFailed(
        f"worker {index} of {workers} (multi_worker_mirrored) stopped with "
        f"exit code {code}"
        + (
            "; its error is printed above"
            if index == 0
            else f"; last lines of {logs[index]}:\n{_tail(logs[index], _LOG_TAIL_LINES)}"
        )
    )
    error.exit_code = code
    raise error


def _run_as_main(module: str) -> int:
    """In a forked worker: runs ``module`` as ``python -m module`` would."""
    sys.argv = [module]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


def worker_name(index: int) -> str:
    """The process name (``comm``, as ``ps -o comm`` shows it) of local worker ``index``."""
    return f"collective-{index}"


def _stop(processes: list[subprocess.Popen]) -> None:
    """Kills the workers still running and removes what they left in ``TMPDIR``."""
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()
    scratch.remove_left_by(process.pid for process in processes)


class WorkerFailed(RecsysError):
    """A worker of a local ``multi_worker_mirrored`` run stopped on an error; the command
    exits with the worker's exit code."""


def _worker_env(spec: dict, index: int, run_file: str) -> dict[str, str]:
    env = child_env(
        {
            "TF_CONFIG": json.dumps({"cluster": spec, "task": {"type": "worker", "index": index}}),
            RUN_FILE_ENV: run_file,
            INTRA_OP_THREADS_ENV: str(shared_intra_op_threads(len(spec["worker"]))),
        }
    )
    env.pop("RECSYS_DIST_RESTART", None)  # the launcher counts restarts, not its workers
    return env


def _echo(process: subprocess.Popen, log: pathlib.Path) -> None:
    """Copies the chief's output to this process's stdout and to its log."""
    with open(log, "ab") as out:
        for line in iter(process.stdout.readline, b""):
            out.write(line)
            out.flush()
            sys.stdout.write(line.decode(errors="replace"))
            sys.stdout.flush()


def _wait_all(processes: list[subprocess.Popen]) -> tuple[int, int] | None:
    """Waits until every worker exited 0 (None), or one failed: ``(index, exit code)``
    of the one that failed first (the others are then stopped by the caller).

    Failures seen at the same poll are told by their cause: a worker killed by a signal
    first, then one that stopped on an error, and last one that only lost its peers (the
    survivors of a killed worker exit so within a fraction of a second)."""
    while True:
        codes = [p.poll() for p in processes]
        failed = [(index, code) for index, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            return min(
                failed,
                key=lambda f: (0 if f[1] < 0 else 2 if f[1] == ClusterLost.exit_code else 1, f[0]),
            )
        if all(code == 0 for code in codes):
            return None
        time.sleep(0.2)


def scratch_dir(model_dir: str, worker: int) -> str:
    """An empty directory for what worker ``worker`` of a run into ``model_dir`` writes and
    nobody reads: the same path for every attempt of the run, so an attempt killed before
    it removed its directory leaves nothing behind the next one."""
    digest = hashlib.sha1(model_dir.encode()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f"recsys_dist_worker_{digest}_{worker}")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path
