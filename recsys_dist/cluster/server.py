"""One TensorFlow server task (a worker or a parameter server) of a training cluster.

The coordinator of ``ParameterServerStrategy`` runs no server of its own; every other
task is a plain ``tf.distribute.Server`` that executes the functions the coordinator
sends it. This module starts such a server in the current process and blocks for ever.

Run it as::

    python -m recsys_dist.cluster.server --job worker --index 0 \\
        --cluster-spec '{"worker": ["127.0.0.1:2222"], "ps": ["127.0.0.1:2223"]}'

or as ``recsys-dist server`` with the same flags (:func:`add_server_arguments`), or, one
process per machine or pod, with ``TF_CONFIG`` set and no flags::

    TF_CONFIG='{"cluster": {...}, "task": {"type": "ps", "index": 0}}' \\
        python -m recsys_dist.cluster.server

Bad input (a malformed spec or ``TF_CONFIG``, an unknown job, an index out of range)
prints ``error: <message>`` on stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import resource
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import recsys_dist  # noqa: F401  sets TF env defaults before TensorFlow is imported
from recsys_dist import scratch
from recsys_dist.errors import RecsysError

SERVER_JOBS = ("worker", "ps")
"""Jobs that run a server. The chief (coordinator) and evaluator run none."""

log = logging.getLogger(__name__)


class ClusterError(RecsysError):
    """A cluster spec, ``TF_CONFIG`` or server task is wrong or failed to start."""


def validate_cluster_spec(
    cluster_spec: Any, source: str = "cluster spec", jobs: Sequence[str] = SERVER_JOBS
) -> dict[str, list[str]]:
    """Checks a cluster spec and returns it as a ``{job: [address, ...]}`` dict.

    Args:
      cluster_spec: Parsed JSON, e.g. ``{"worker": ["h1:2222"], "ps": ["h2:2222"]}``.
        Jobs other than ``worker`` and ``ps`` (e.g. ``chief``) are kept as given.
      source: What the spec came from, used in error messages.
      jobs: The jobs it must have.

    Returns:
      A copy of the spec with every job's addresses as a list of strings.

    Raises:
      ClusterError: The spec is not a mapping of job names to non-empty lists of
        ``host:port`` strings, or lacks one of ``jobs``.
    """
    if not isinstance(cluster_spec, Mapping):
        raise ClusterError(
            f"{source} must be a JSON object mapping job names to address lists, "
            f"got {type(cluster_spec).__name__}"
        )
    for job in jobs:
        if job not in cluster_spec:
            raise ClusterError(f"{source} has no {job!r} job (jobs: {sorted(cluster_spec)})")
    spec: dict[str, list[str]] = {}
    for job, addresses in cluster_spec.items():
        if not isinstance(addresses, list) or not addresses:
            raise ClusterError(
                f"{source} job {job!r} must be a non-empty list of 'host:port' strings, "
                f"got {addresses!r}"
            )
        for address in addresses:
            if not isinstance(address, str) or not _is_host_port(address):
                raise ClusterError(
                    f"{source} job {job!r} has a bad address {address!r}; expected 'host:port'"
                )
        spec[str(job)] = list(addresses)
    return spec


def _is_host_port(address: str) -> bool:
    host, sep, port = address.rpartition(":")
    return bool(host) and bool(sep) and port.isdigit() and 0 < int(port) < 65536


def parse_tf_config(
    text: str | None, jobs: Sequence[str] = SERVER_JOBS
) -> tuple[dict[str, list[str]], str, int]:
    """Reads the cluster spec and this process's task from a ``TF_CONFIG`` value.

    Args:
      text: The ``TF_CONFIG`` JSON, or None when the variable is not set.
      jobs: The jobs its cluster must have.

    Returns:
      ``(cluster_spec, task_type, task_index)``.

    Raises:
      ClusterError: ``TF_CONFIG`` is missing, not JSON, or lacks a valid ``cluster``,
        ``task.type`` or ``task.index``.
    """
    if not text:
        raise ClusterError("TF_CONFIG is not set and no --cluster-spec was given")
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ClusterError(f"TF_CONFIG is not valid JSON: {e}") from None
    if not isinstance(config, dict):
        raise ClusterError(f"TF_CONFIG must be a JSON object, got {type(config).__name__}")
    if "cluster" not in config:
        raise ClusterError("TF_CONFIG has no 'cluster' key")
    cluster_spec = validate_cluster_spec(config["cluster"], source="TF_CONFIG cluster", jobs=jobs)
    task = config.get("task")
    if not isinstance(task, dict):
        raise ClusterError("TF_CONFIG has no 'task' object with 'type' and 'index'")
    task_type, task_index = task.get("type"), task.get("index")
    if not isinstance(task_type, str):
        raise ClusterError(f"TF_CONFIG task.type must be a string, got {task_type!r}")
    if not isinstance(task_index, int) or isinstance(task_index, bool):
        raise ClusterError(f"TF_CONFIG task.index must be an integer, got {task_index!r}")
    return cluster_spec, task_type, task_index


def _check_task(job: str, index: int, cluster_spec: Mapping[str, Sequence[str]]) -> None:
    if job not in SERVER_JOBS:
        raise ClusterError(
            f"task type {job!r} runs no server; only {' and '.join(SERVER_JOBS)} tasks do "
            "(the chief runs the coordinator)"
        )
    count = len(cluster_spec[job])
    if not 0 <= index < count:
        raise ClusterError(
            f"task index {index} is out of range: the cluster has {count} {job!r} task(s)"
        )


def default_inter_op_threads(cluster_spec: Mapping[str, Sequence[str]]) -> int:
    """Returns the default inter-op thread count of a server: ``num_workers + 2``.

    A worker server with fewer than ``num_workers + 1`` inter-op threads can deadlock
    ``ClusterCoordinator.join()`` on a machine with few cores.
    """
    return len(cluster_spec["worker"]) + 2


def _raise_open_file_limit() -> None:
    """Raises the soft RLIMIT_NOFILE to the hard limit (one open file per Parquet file)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as e:
        log.warning(
            "recsys_dist server: could not raise the open-file limit from %d to %d: %s",
            soft,
            hard,
            e,
        )


def _checked_threads(
    job: str, spec: dict[str, list[str]], inter_op_threads: int | None, intra_op_threads: int
) -> int:
    """The server's inter-op thread count (default ``num_workers + 2``), after checking
    both counts; warns when a worker has too few threads for ``join()``."""
    threads = default_inter_op_threads(spec) if inter_op_threads is None else inter_op_threads
    if threads < 1:
        raise ClusterError(f"inter_op_threads must be >= 1, got {threads}")
    if intra_op_threads < 0:
        raise ClusterError(
            f"intra_op_threads must be >= 0 (0: TensorFlow's default), got {intra_op_threads}"
        )
    if job == "worker" and threads <= len(spec["worker"]):
        log.warning(
            "recsys_dist server: inter_op_threads=%d < num_workers + 1 = %d; "
            "ClusterCoordinator.join() may hang",
            threads,
            len(spec["worker"]) + 1,
        )
    return threads


def serve(
    job: str,
    index: int,
    cluster_spec: Mapping[str, Sequence[str]],
    inter_op_threads: int | None = None,
    intra_op_threads: int = 0,
) -> None:
    """Starts the TensorFlow server of one task and blocks until the process is killed.

    Args:
      job: ``"worker"`` or ``"ps"``.
      index: The task's index within its job.
      cluster_spec: ``{job: ["host:port", ...]}`` of the whole cluster.
      inter_op_threads: Inter-op thread pool size of the server; defaults to
        ``num_workers + 2``.
      intra_op_threads: Threads one op (a MatMul, a gather) may use; 0 lets TensorFlow
        choose (one per core), right for one task per machine.

    Raises:
      ClusterError: The spec, job, index or thread count is invalid.

    Example:
      >>> serve("ps", 0, {"worker": ["127.0.0.1:2222"], "ps": ["127.0.0.1:2223"]})
    """
    spec = validate_cluster_spec(cluster_spec)
    _check_task(job, index, spec)
    threads = _checked_threads(job, spec, inter_op_threads, intra_op_threads)
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    _raise_open_file_limit()

    import tensorflow as tf

    from recsys_dist import ops

    ops.load()  # the Parquet op: dataset graphs the coordinator sends run it here
    server = tf.distribute.Server(
        tf.train.ClusterSpec(spec),
        job_name=job,
        task_index=index,
        protocol="grpc",
        config=tf.compat.v1.ConfigProto(
            inter_op_parallelism_threads=threads, intra_op_parallelism_threads=intra_op_threads
        ),
        start=True,
    )
    log.info(
        "recsys_dist server %s:%d serving on %s (pid %d, inter-op threads %d, intra-op threads %s)",
        job,
        index,
        spec[job][index],
        os.getpid(),
        threads,
        intra_op_threads or "TensorFlow default",
    )
    # Wait here rather than in the server's C++ join(): Python runs a signal handler (the
    # one `recsys-dist server` installs for SIGTERM, SIGINT and SIGHUP) only between
    # bytecodes, so inside join() a SIGTERM was ignored. Short sleeps: the kernel may
    # hand the signal to one of TensorFlow's threads, and then nothing wakes this one;
    # the handler runs when its sleep ends. This frame keeps the server object alive.
    while server is not None:
        time.sleep(0.25)


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of a server task (``--job``, ``--index``, ``--cluster-spec``,
    ``--inter-op-threads``, ``--intra-op-threads``) to ``parser``: used by
    ``python -m recsys_dist.cluster.server`` and ``recsys-dist server``."""
    parser.add_argument("--job", choices=SERVER_JOBS, help="job of this task (default: TF_CONFIG)")
    parser.add_argument("--index", type=int, help="task index within its job (default: TF_CONFIG)")
    parser.add_argument(
        "--cluster-spec",
        help='JSON, e.g. {"worker": ["h1:2222"], "ps": ["h2:2222"]}; default: TF_CONFIG "cluster"',
    )
    parser.add_argument(
        "--inter-op-threads", type=int, help="inter-op thread pool size (default: workers + 2)"
    )
    parser.add_argument(
        "--intra-op-threads",
        type=int,
        default=0,
        help="threads per op (default 0: TensorFlow's choice, one per core; set it when "
        "several tasks share a machine)",
    )


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m recsys_dist.cluster.server",
        description="Run one TensorFlow server task (worker or ps) until killed.",
    )
    add_server_arguments(parser)
    return parser.parse_args(argv)


def _resolve_task(args: argparse.Namespace) -> tuple[str, int, dict[str, list[str]]]:
    """Combines the flags and ``TF_CONFIG`` into ``(job, index, cluster_spec)``."""
    if args.cluster_spec is None:
        cluster_spec, job, index = parse_tf_config(os.environ.get("TF_CONFIG"))
        return args.job or job, index if args.index is None else args.index, cluster_spec
    if args.job is None or args.index is None:
        raise ClusterError("--cluster-spec needs --job and --index")
    try:
        parsed = json.loads(args.cluster_spec)
    except json.JSONDecodeError as e:
        raise ClusterError(f"--cluster-spec is not valid JSON: {e}") from None
    return args.job, args.index, validate_cluster_spec(parsed, source="--cluster-spec")


def run_task(args: argparse.Namespace) -> int:
    """Runs the server task that the arguments of :func:`add_server_arguments` (and
    ``TF_CONFIG``) describe; blocks until killed. Returns the exit status of a user
    error, after printing ``error: <message>`` on stderr."""
    faulthandler.enable()  # a native crash leaves the Python stacks in the task's log
    scratch.start()  # a run-scoped TMPDIR, removed at exit (recsys_dist/scratch.py)
    # No handler of a command: SIGTERM, SIGINT (Ctrl-C) and SIGHUP end the task at once,
    # without a traceback, after removing that directory.
    scratch.exit_on_signals()
    try:
        job, index, cluster_spec = _resolve_task(args)
        serve(job, index, cluster_spec, args.inter_op_threads, args.intra_op_threads)
    except RecsysError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status on a user error.

    Args:
      argv: Arguments without the program name; defaults to ``sys.argv[1:]``.
    """
    # A task started as a module (cluster/local.py) logs its lines on stderr, unadorned.
    logging.basicConfig(stream=sys.stderr, format="%(message)s", level=logging.INFO)
    return run_task(_parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
