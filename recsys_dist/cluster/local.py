"""A local training cluster: one server process per worker and parameter server.

Every task runs what ``python -m recsys_dist.cluster.server`` runs, on ``127.0.0.1``,
forked from one process that has imported TensorFlow once (:mod:`server_forks`), and
writes its output to ``log_dir/{job}-{index}.log``. The calling process is the
coordinator.

No task outlives the coordinator: the forking process and each task ask the kernel to
SIGKILL them when their parent dies (``PR_SET_PDEATHSIG``), :meth:`LocalCluster.stop`
runs at interpreter exit,
and :func:`terminate_on_signals` turns SIGTERM / SIGHUP into a normal ``SystemExit`` so
context managers tear the cluster down.

Example:
  >>> with terminate_on_signals(), LocalCluster(workers=2, ps=1, log_dir="logs") as c:
  ...     strategy = tf.distribute.ParameterServerStrategy(c.cluster_resolver())
"""

from __future__ import annotations

import atexit
import json
import os
import pathlib
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import recsys_dist
from recsys_dist import scratch
from recsys_dist.cluster.server import SERVER_JOBS, ClusterError
from recsys_dist.cluster.server_forks import ForkedTask, ServerForks

if TYPE_CHECKING:
    import tensorflow as tf

_HOST = "127.0.0.1"
_LOG_TAIL_LINES = 20
_START_TIMEOUT = 90.0
_POLL_SECONDS = 0.2
_PROJECT_ROOT = str(pathlib.Path(recsys_dist.__file__).resolve().parent.parent)

_TaskKey = tuple[str, int]
"""``(job, index)`` of one task."""


class LocalCluster:
    """Worker and parameter-server processes on 127.0.0.1 for one coordinator.

    The forking process dies with the thread that started it (``PR_SET_PDEATHSIG``
    follows the parent *thread*), and the tasks with it, so call :meth:`start` and
    :meth:`restart` from a thread that lives as long as the cluster, normally the main
    thread.

    Stop the cluster only after the ``ClusterCoordinator`` is idle: ``join()`` can
    return while TensorFlow is still reconnecting to a restarted worker, and if the
    servers vanish during that reconnection the coordinator's destructor hangs.

    Args:
      workers: Number of worker tasks, >= 1.
      ps: Number of parameter-server tasks, >= 1.
      log_dir: Directory for the ``{job}-{index}.log`` files; created if missing.
      env: Extra environment variables for the tasks, merged over ``os.environ``.
      inter_op_threads: Inter-op threads per server; defaults to ``workers + 2``.
      intra_op_threads: Threads one op may use in each server; defaults to
        :func:`shared_intra_op_threads` (the machine's cores split between the tasks). 0
        leaves it to TensorFlow: one thread per core in every task.
      start_timeout: Seconds to wait for all tasks to accept connections.

    Raises:
      ValueError: An argument is out of range.

    Example:
      >>> with LocalCluster(workers=2, ps=1, log_dir="/tmp/logs") as cluster:
      ...     print(cluster.cluster_spec["ps"])
      ['127.0.0.1:41235']
    """

    def __init__(
        self,
        workers: int,
        ps: int,
        log_dir: str | os.PathLike,
        *,
        env: Mapping[str, str] | None = None,
        inter_op_threads: int | None = None,
        intra_op_threads: int | None = None,
        start_timeout: float = _START_TIMEOUT,
    ):
        _check_count("workers", workers)
        _check_count("ps", ps)
        if inter_op_threads is not None:
            _check_count("inter_op_threads", inter_op_threads)
        if intra_op_threads is None:
            intra_op_threads = shared_intra_op_threads(workers + ps)
        _check_count(
            "intra_op_threads", intra_op_threads, minimum=0, hint=" (0: TensorFlow's default)"
        )
        if not start_timeout > 0:
            raise ValueError(f"start_timeout must be > 0 seconds, got {start_timeout!r}")
        self._counts = {"worker": workers, "ps": ps}
        self._log_dir = pathlib.Path(log_dir)
        self._env = dict(env or {})
        self._inter_op_threads = inter_op_threads
        self._intra_op_threads = intra_op_threads
        self._start_timeout = start_timeout
        self._ports: dict[_TaskKey, int] = {}
        self._processes: dict[_TaskKey, ForkedTask] = {}
        self._forks: ServerForks | None = None
        self._supervisor: threading.Thread | None = None
        self._stopping = threading.Event()
        self.restarts: list[tuple[float, str, int, int]] = []  # (time, job, index, exit code)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> LocalCluster:
        """Picks free ports, spawns every task and waits until all accept connections.

        Also sets ``GRPC_FAIL_FAST=use_caller`` in this process's environment (unless
        set) so the coordinator's gRPC channels fail fast on a dead task.

        Returns:
          self, started.

        Raises:
          RuntimeError: The cluster is already running.
          ClusterError: A task exited early or did not come up within
            ``start_timeout``; every task already started is stopped first.
        """
        if any(_running(process) for process in self._processes.values()):
            raise RuntimeError("LocalCluster is already running; call stop() first")
        os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
        self._log_dir.mkdir(parents=True, exist_ok=True)
        keys = [(job, index) for job in SERVER_JOBS for index in range(self._counts[job])]
        self._ports = dict(zip(keys, free_ports(len(keys))))
        self._processes = {}
        atexit.register(self.stop)
        self._forks = _take_early_forks(self._child_env()) or ServerForks(
            self._child_env(), self._start_timeout
        )
        try:
            for key in keys:
                self._spawn(key)
            self._wait_ready(keys)
        except BaseException:
            self.stop()
            self._ports = {}
            raise
        return self

    def stop(self, grace: float = 5.0) -> None:
        """Stops every task: SIGTERM, then SIGKILL after ``grace`` seconds; reaps all.

        Safe to call more than once, and on a cluster that never started.

        Args:
          grace: Seconds the tasks get to exit after SIGTERM.
        """
        atexit.unregister(self.stop)
        self._stopping.set()
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(timeout=grace)
        self._supervisor = None
        running = [process for process in self._processes.values() if _running(process)]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in running:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._forks is not None:
            self._forks.stop(grace)
        scratch.remove_left_by(process.pid for process in self._processes.values())

    @property
    def cluster_spec(self) -> dict[str, list[str]]:
        """``{"worker": ["127.0.0.1:port", ...], "ps": [...]}`` of the started cluster."""
        self._require_started()
        return {
            job: [_address(self._ports[job, index]) for index in range(self._counts[job])]
            for job in SERVER_JOBS
        }

    def cluster_resolver(self) -> tf.distribute.cluster_resolver.SimpleClusterResolver:
        """Returns a gRPC cluster resolver for ``ParameterServerStrategy``."""
        import tensorflow as tf

        return tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(self.cluster_spec), rpc_layer="grpc"
        )

    def pid(self, job: str, index: int) -> int:
        """Returns the process id of a task (of its latest start)."""
        return self._process(job, index).pid

    def kill(self, job: str, index: int, sig: int = signal.SIGKILL) -> None:
        """Sends ``sig`` to a task, e.g. to test fault tolerance.

        With SIGKILL the call returns once the task is dead and reaped, so
        :meth:`alive` reports it dead right away. Other signals are only sent.

        Args:
          job: ``"worker"`` or ``"ps"``.
          index: Task index within its job.
          sig: Signal number to send.
        """
        process = self._process(job, index)
        process.send_signal(sig)
        if sig == signal.SIGKILL:
            process.wait()

    def restart(self, job: str, index: int) -> None:
        """Starts a dead task again on the same port and waits until it serves.

        Args:
          job: ``"worker"`` or ``"ps"``.
          index: Task index within its job.

        Raises:
          ClusterError: The task is still running, or it did not come back (it is
            killed then; the rest of the cluster keeps running).
        """
        process = self._process(job, index)
        if _running(process):
            raise ClusterError(f"{job}:{index} is still running (pid {process.pid}); kill it first")
        scratch.remove_left_by([process.pid])  # what the dead task left in TMPDIR
        self._spawn((job, index))
        try:
            self._wait_ready([(job, index)])
        except BaseException:
            self._processes[job, index].kill()
            self._processes[job, index].wait()
            raise

    def supervise_workers(
        self, interval: float = 0.5, report: Callable[[str], None] | None = None
    ) -> None:
        """Restarts any worker that dies, from a background thread, until :meth:`stop`.

        ``ClusterCoordinator`` re-runs a lost worker's closures on the others and lets
        the worker rejoin once it serves again. Parameter servers are not restarted
        here: their variables are gone, so the coordinator must restart from a
        checkpoint (the ``train`` command does).

        Args:
          interval: Seconds between checks.
          report: Called with a one-line message when a worker is found dead, and again
            when it serves again or did not come back (a forked server serves within
            a second; a run may still end before the second message).
        """
        self._require_started()
        self._stopping.clear()

        def loop() -> None:
            while not self._stopping.wait(interval):
                for index in range(self._counts["worker"]):
                    process = self._processes["worker", index]
                    code = process.poll()
                    if code is None or self._stopping.is_set():
                        continue
                    if report:
                        report(f"worker {index} exited with code {code}; restarting it")
                    try:
                        self.restart("worker", index)
                    except ClusterError as exc:
                        if report and not self._stopping.is_set():
                            report(f"worker {index} did not come back: {exc}")
                        continue
                    self.restarts.append((time.time(), "worker", index, code))
                    if report:
                        report(
                            f"worker {index} is back (pid {self._processes['worker', index].pid})"
                        )

        self._supervisor = threading.Thread(target=loop, name="worker-supervisor", daemon=True)
        self._supervisor.start()

    def alive(self) -> dict[str, list[bool]]:
        """Returns ``{"worker": [running?, ...], "ps": [...]}``."""
        self._require_started()
        return {
            job: [_running(self._processes[job, index]) for index in range(self._counts[job])]
            for job in SERVER_JOBS
        }

    def log_path(self, job: str, index: int) -> pathlib.Path:
        """Returns the path of a task's combined stdout / stderr log."""
        self._check_task(job, index)
        return self._log_dir / f"{job}-{index}.log"

    def _check_task(self, job: str, index: int) -> None:
        if job not in self._counts:
            raise ValueError(f"job must be one of {SERVER_JOBS}, got {job!r}")
        if not 0 <= index < self._counts[job]:
            raise ValueError(
                f"index {index} is out of range: "
                f"the cluster has {self._counts[job]} {job!r} task(s)"
            )

    def _require_started(self) -> None:
        if not self._ports:
            raise RuntimeError("LocalCluster is not started; call start() or use `with`")

    def _process(self, job: str, index: int) -> ForkedTask:
        self._check_task(job, index)
        self._require_started()
        return self._processes[job, index]

    def _server_flags(self, key: _TaskKey) -> list[str]:
        """The flags of ``python -m recsys_dist.cluster.server`` for one task."""
        job, index = key
        command = [
            "--job", job, "--index", str(index),
            "--cluster-spec", json.dumps(self.cluster_spec, separators=(",", ":")),
        ]  # fmt: skip
        if self._inter_op_threads is not None:
            command += ["--inter-op-threads", str(self._inter_op_threads)]
        command += ["--intra-op-threads", str(self._intra_op_threads)]
        return command

    def _child_env(self) -> dict[str, str]:
        return _task_env(self._env)

    def _spawn(self, key: _TaskKey) -> None:
        job, index = key
        self._processes[key] = self._forks.spawn(
            self._server_flags(key), self.log_path(job, index), f"{job}-{index}"
        )

    def _wait_ready(self, keys: list[_TaskKey]) -> None:
        """Blocks until every task in ``keys`` accepts TCP connections on its port."""
        deadline = time.monotonic() + self._start_timeout
        pending = list(keys)
        while pending:
            for key in list(pending):
                returncode = self._processes[key].poll()
                if returncode is not None:
                    raise ClusterError(self._failure(key, f"exited with code {returncode}"))
                if _accepts_connections(self._ports[key]):
                    pending.remove(key)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    self._failure(pending[0], f"did not serve within {self._start_timeout:g} s")
                )
            time.sleep(_POLL_SECONDS)

    def _failure(self, key: _TaskKey, what: str) -> str:
        job, index = key
        log_path = self.log_path(job, index)
        return (
            f"local cluster task {job}:{index} ({_address(self._ports[key])}) {what}; "
            f"last lines of {log_path}:\n{_tail(log_path, _LOG_TAIL_LINES)}"
        )


_early_forks: ServerForks | None = None


def start_forks_early() -> None:
    """Starts the forking process of the local cluster this command is about to start, so
    that its import of TensorFlow runs beside the command's own, on the other core.
    :meth:`LocalCluster.start` takes it over when its tasks' environment is the one it
    was started with (no ``env`` of the cluster's own), and stops it otherwise; it ends
    with this process at the latest."""
    global _early_forks
    if _early_forks is None:
        _early_forks = ServerForks(_task_env({}), _START_TIMEOUT).launch()


def _take_early_forks(env: Mapping[str, str]) -> ServerForks | None:
    global _early_forks
    forks, _early_forks = _early_forks, None
    if forks is not None and forks.env != env:
        forks.stop()
        return None
    return forks


def _task_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = child_env(extra)
    env.setdefault("GRPC_FAIL_FAST", "use_caller")
    return env


def shared_intra_op_threads(tasks: int) -> int:
    """Threads per op for each of ``tasks`` servers on this machine: its cores split evenly.

    TensorFlow gives every process one intra-op thread per core. With several servers on
    one machine that oversubscribes the cores: on 2 cores, 2 workers and 2 parameter
    servers would run up to 8 op threads. On the demo model one thread per task trains
    faster and with less spread (docs/cluster.md#threads-of-a-local-cluster).
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // max(1, tasks))


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a TensorFlow child process on this machine: this one's with
    ``extra``, no GPU unless asked, TensorFlow's C++ logs at warnings and above, and this
    very recsys_dist importable, installed or not."""
    env = {**os.environ, **extra}
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    paths = [_PROJECT_ROOT, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def _check_count(name: str, value: object, minimum: int = 1, hint: str = "") -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}{hint}, got {value!r}")


def free_ports(count: int) -> list[int]:
    """Returns ``count`` distinct ports that are free right now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((_HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


def _address(port: int) -> str:
    return f"{_HOST}:{port}"


def _running(process: ForkedTask) -> bool:
    return process.poll() is None


def _tail(path: pathlib.Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"<cannot read log: {e}>"
    return "\n".join(text.splitlines()[-lines:]) or "<empty log>"


def child_pids(parent: int) -> list[int]:
    """Pids of the live child processes of ``parent`` (from /proc, Linux).

    Used to check from outside that a coordinator's servers are gone after it ends.
    """
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # the process ended while we looked
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.append(int(entry.name))
    return found


def server_pids(coordinator: int) -> dict[tuple[str, int], int]:
    """The live server tasks of the local cluster of the process ``coordinator``, by
    ``(job, index)`` (from /proc, Linux): the children of its forking process, each
    named ``{job}-{index}`` (``ps -o comm`` shows the name too)."""
    found = {}
    for forks in child_pids(coordinator):
        for pid in child_pids(forks):
            try:
                name = pathlib.Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue  # the task ended while we looked
            job, _, index = name.rpartition("-")
            if job in SERVER_JOBS and index.isdigit():
                found[job, int(index)] = pid
    return found
