"""The strategy and coordinator of a job, on a local cluster or on a ``TF_CONFIG`` cluster.

``cluster.mode: local`` starts the servers as subprocesses on 127.0.0.1 and tears them
down when the job ends (also on SIGTERM and Ctrl-C). ``cluster.mode: in_process`` runs
them inside this process (``in_process.py``). ``cluster.mode: tf_config`` joins a
cluster of ``recsys_dist.cluster.server`` tasks started elsewhere (one per machine or
pod); this process is the chief (coordinator). ``cluster.strategy: mirrored`` starts
no servers: its replicas are devices of this process (``mirrored.py``). Under
``multi_worker_mirrored`` this process is one of the workers (``collective.py``); a
process that is not (``evaluate``, ``export``) scores on one device of its own.

Embedding tables are sharded over the parameter servers by a ``MinSizePartitioner``:
a table is cut into shards of at least ``min_shard_bytes``, at most one per parameter
server, so small tables stay whole and large ones spread over every server. Dense
variables are never sharded (``cluster/placement.py`` says why).
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from recsys_dist import ops, scratch, storage_io
from recsys_dist.cluster.collective import collective_strategy, collective_task
from recsys_dist.cluster.executor_scope import borrowed_executors_do_not_wait
from recsys_dist.cluster.in_process import InProcessCluster
from recsys_dist.cluster.liveness import PROBE_SECONDS, ImmediateRestart, TaskWatch
from recsys_dist.cluster.local import LocalCluster
from recsys_dist.cluster.mirrored import SynchronousCoordinator, mirrored_strategy, split_cpu
from recsys_dist.cluster.placement import TablePartitioner
from recsys_dist.cluster.server import ClusterError, parse_tf_config
from recsys_dist.cluster.signals import terminate_on_signals, watch_signals_natively
from recsys_dist.config.sections import ClusterSpec
from recsys_dist.errors import ClusterLost
from recsys_dist.ops.build import library_path

log = logging.getLogger(__name__)

#: A worker whose link was down counts as recently away for this long after its last
#: failed probe.
RECENTLY_AWAY_SECONDS = 120.0

#: How long the end of training waits, once every worker answers, for the calls still
#: out on a worker that was recently away: longer than TCP's longest retransmission
#: back-off (120 s), after which a call sent before the cut arrives if it ever will.
WORK_BACK_SECONDS = 150.0


@dataclasses.dataclass
class Runtime:
    """A connected cluster.

    Attributes:
      strategy: The ``ParameterServerStrategy`` (or ``MirroredStrategy``).
      coordinator: Its ``ClusterCoordinator`` (or a ``SynchronousCoordinator``).
      num_workers: Worker tasks.
      num_ps: Parameter-server tasks.
      mode: The config's ``cluster.mode``, or ``mirrored`` or ``multi_worker_mirrored``.
      log_dir: Where the servers write their logs (local mode), else None.
      local: The local cluster, in local mode (for fault injection in tests).
      task_index: This worker's index under ``multi_worker_mirrored`` (0 is the chief,
        which writes the model dir), else 0.
      watch: The probe of the tasks' addresses (``tf_config`` mode), else None.
      members: The ``TF_CONFIG`` indices of the workers this run started with, in the
        order of the strategy's workers (``tf_config`` mode); None: every worker.
    """

    strategy: tf.distribute.Strategy
    coordinator: Any
    num_workers: int
    num_ps: int
    mode: str = "local"
    log_dir: str | None = None
    local: LocalCluster | None = None
    task_index: int = 0
    watch: TaskWatch | None = None
    members: tuple[int, ...] | None = None
    started_at: float = dataclasses.field(default_factory=time.monotonic)

    def _member(self, job: str, index: int) -> bool:
        return job == "worker" and (self.members is None or index in self.members)

    def first_step_back(self) -> None:
        """Told by the training loop when its first step is back: from now on a lost worker
        is waited for (``tf_config`` mode; before, the command starts again without it)."""
        if self.watch is not None:
            self.watch.first_step()

    def worker_unreachable(self) -> bool:
        """Whether a worker of the run failed its last probe or is reported lost
        (``tf_config`` mode): a closure on it may be stuck until its link returns."""
        return self.watch is not None and any(
            self._member(job, i) for job, i in self.watch.unreachable()
        )

    def workers_unreachable_within(self, seconds: float) -> list[int]:
        """The run's workers that failed a probe in the last ``seconds`` (``tf_config``
        mode)."""
        if self.watch is None:
            return []
        return [i for job, i in self.watch.unreachable_within(seconds) if self._member(job, i)]

    def workers_answer(self) -> bool:
        """Whether every worker of the run answers a probe now (always, outside
        ``tf_config`` mode)."""
        return self.watch is None or self.watch.workers_answer(self.members)

    def joining(self) -> list[int]:
        """The workers missing at the start that answer now (``tf_config`` mode): the run
        takes them in by starting again from a checkpoint."""
        if self.watch is None or self.members is None:
            return []
        return [
            i
            for job, i in self.watch.tasks()
            if job == "worker"
            and i not in self.members
            and self.watch.answered_since(job, i, self.started_at)
        ]

    def wait_for_workers(self, before: str) -> None:
        """Waits until every worker answers again, saying so once; ``TaskWatch`` ends the
        run if one stays away for ``cluster.give_up_after_seconds``."""
        said = False
        while self.worker_unreachable() or not self.workers_answer():
            if not said:
                away = [i for job, i in self.watch.unreachable() if job == "worker"]
                log.info(
                    "wait\tfor worker %s to answer again: %s needs every worker (the run "
                    "stops if one is away for cluster.give_up_after_seconds)",
                    ", ".join(map(str, away)) or "?",
                    before,
                )
                said = True
            time.sleep(PROBE_SECONDS / 2)

    def join(self, timeout: float = WORK_BACK_SECONDS) -> None:
        """Waits for every closure, as ``coordinator.join()`` does. When a worker was away
        within :data:`RECENTLY_AWAY_SECONDS`, a call the chief sent it before its link went
        down may never come back (its connection died with the link); after ``timeout``
        seconds this raises :class:`ClusterLost`, so the run restarts from its last
        checkpoint instead of waiting for ever."""
        away = self.workers_unreachable_within(RECENTLY_AWAY_SECONDS)
        if not away:
            self.coordinator.join()
            return
        deadline = time.monotonic() + timeout
        while not self.coordinator.done():
            if time.monotonic() > deadline:
                log.warning(
                    "the coordinator's threads, for a bug report (work that never came back "
                    "is not expected):"
                )
                faulthandler.dump_traceback(all_threads=True)
                raise ClusterLost(
                    f"work sent to worker {', '.join(map(str, away))} before its link went "
                    f"down has not come back {timeout:g} s after every worker answered "
                    "again"
                )
            time.sleep(0.1)

    @property
    def lockstep(self) -> bool:
        """Whether every worker runs the training loop itself (``multi_worker_mirrored``)."""
        return self.mode == "multi_worker_mirrored"

    @property
    def is_chief(self) -> bool:
        """Whether this process writes the model dir (always, except on workers 1.. of a
        ``multi_worker_mirrored`` job)."""
        return self.task_index == 0

    def describe(self) -> str:
        """One line for the console, e.g. ``2 workers + 2 ps (local; server logs in X)``."""
        if self.mode == "mirrored":
            devices = ", ".join(
                d.rsplit("device:", 1)[-1] for d in self.strategy.extended.worker_devices
            )
            return (
                f"{self.strategy.num_replicas_in_sync} replicas in this process "
                f"(mirrored, synchronous: {devices})"
            )
        if self.lockstep:
            return (
                f"worker {self.task_index} of {self.num_workers} (multi_worker_mirrored, "
                "synchronous: one replica per worker process)"
            )
        where = {
            "local": f"local; server logs in {self.log_dir}",
            "in_process": "in_process: servers inside this process",
        }.get(self.mode, self.mode)
        if self.members is not None:
            indices = ", ".join(map(str, self.members))
            where += f"; workers {indices} of TF_CONFIG until the others answer"
        workers = "1 worker" if self.num_workers == 1 else f"{self.num_workers} workers"
        return f"{workers} + {self.num_ps} ps ({where})"


def log_dir_for(output_dir: str) -> str:
    """Where a local cluster's servers log for a job writing to ``output_dir``:
    ``output_dir/logs``, or when ``output_dir`` is remote a new directory in the system's
    temporary directory that outlives the run (the logs of a server that failed are what
    the user reads next)."""
    if storage_io.is_remote(output_dir):
        return scratch.lasting_directory("recsys_dist_logs_")
    return os.path.join(output_dir, "logs")


def make_strategy(
    resolver, num_ps: int, min_shard_bytes: int
) -> tf.distribute.experimental.ParameterServerStrategy:
    """A ParameterServerStrategy whose variables shard over up to ``num_ps`` servers."""
    partitioner = TablePartitioner(min_shard_bytes=min_shard_bytes, max_shards=num_ps)
    return tf.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=partitioner
    )


def cluster_coordinator(strategy) -> tf.distribute.experimental.coordinator.ClusterCoordinator:
    """The coordinator of a parameter-server ``strategy``, with its worker threads kept
    from waiting on each other (``cluster/executor_scope.py``)."""
    borrowed_executors_do_not_wait()
    return tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)


def _call_again(job: str, index: int) -> None:
    """Sends one call to a task whose link came back, over the chief's own connection.

    While a link is down the task may close its end of that connection (a write failed),
    and nothing tells the chief: a call the chief sent before the cut then waits for an
    answer that never comes, until TensorFlow's next keep-alive (every 300 s) writes to
    the connection and the reset fails the call, which the coordinator then runs again.
    This call writes at once, so a dead connection fails now and is made anew.

    The call is an op that does nothing, run on the task. TensorFlow's own check
    (``context().check_alive``) keeps Python's lock while it waits for the answer, so a
    task slow to answer froze the whole coordinator for as long: its progress, its
    probes and :meth:`Runtime.join`'s limit. An op lets go of the lock while it waits."""
    try:
        with tf.device(f"/job:{job}/replica:0/task:{index}/device:CPU:0"):
            tf.raw_ops.NoOp()
    except Exception as error:  # noqa: BLE001 - a failed call is the point; log it
        log.info("check of %s %d after its link came back: %s", job, index, error)


def _tf_config_resolver():
    spec, task_type, _ = parse_tf_config(os.environ.get("TF_CONFIG"))
    if task_type != "chief":
        raise ClusterError(
            f"this process runs the coordinator, so TF_CONFIG task.type must be "
            f"'chief', got {task_type!r}; start workers and parameter servers "
            "with python -m recsys_dist.cluster.server"
        )
    return tf.distribute.cluster_resolver.TFConfigClusterResolver(), spec


def prepare_devices(cluster: ClusterSpec) -> None:
    """Sets this process up for ``cluster`` before anything runs a TensorFlow op, which
    fixes its devices and its collective ops: the replicas of ``mirrored``; on a worker of
    ``multi_worker_mirrored``, its strategy. A command that will :func:`connect` calls it
    before it plans its input, which may run ops (a string vocabulary's fingerprints)."""
    if cluster.strategy == "mirrored":
        split_cpu(cluster.workers)
    elif cluster.strategy == "multi_worker_mirrored" and collective_task() is not None:
        collective_strategy()


@contextlib.contextmanager
def connect(
    cluster: ClusterSpec,
    log_dir: str,
    min_shard_bytes: int,
    env: dict[str, str] | None = None,
    restart_now: ImmediateRestart | None = None,
) -> Iterator[Runtime]:
    """Starts or joins the cluster and yields its :class:`Runtime`.

    Args:
      cluster: The config's cluster section.
      log_dir: Where a local cluster writes its server logs (see :func:`log_dir_for`).
      min_shard_bytes: Minimum embedding shard size.
      env: Extra environment for local server processes.
      restart_now: Starts the command again at once when a worker is lost before the
        first step (``tf_config`` mode); the new process starts without it. None: the
        run waits for the worker, as during training.
    """
    ops.load()  # TensorFlow registers its ops before ctypes opens it too
    watch_signals_natively(library_path())  # a wait inside TensorFlow may hold the GIL
    if cluster.strategy in ("mirrored", "multi_worker_mirrored"):
        task = collective_task() if cluster.strategy == "multi_worker_mirrored" else None
        with terminate_on_signals():
            if task is not None:  # a worker of a multi_worker_mirrored job
                spec, index = task
                yield Runtime(
                    collective_strategy(),
                    SynchronousCoordinator(),
                    len(spec["worker"]),
                    0,
                    "multi_worker_mirrored",
                    task_index=index,
                )
            else:  # mirrored; or evaluate / export of a multi_worker_mirrored run: one device
                replicas = cluster.workers if cluster.strategy == "mirrored" else 1
                yield Runtime(
                    mirrored_strategy(replicas), SynchronousCoordinator(), 1, 0, "mirrored"
                )
        return
    if cluster.mode == "in_process":
        servers = InProcessCluster(cluster.workers, cluster.ps)
        strategy = make_strategy(servers.cluster_resolver(), cluster.ps, min_shard_bytes)
        coordinator = cluster_coordinator(strategy)
        with terminate_on_signals():
            yield Runtime(strategy, coordinator, cluster.workers, cluster.ps, cluster.mode)
        return
    if cluster.mode == "local":
        with (
            terminate_on_signals(),
            LocalCluster(cluster.workers, cluster.ps, log_dir, env=env) as local,
        ):
            local.supervise_workers(report=log.info)
            strategy = make_strategy(local.cluster_resolver(), cluster.ps, min_shard_bytes)
            coordinator = cluster_coordinator(strategy)
            yield Runtime(
                strategy, coordinator, cluster.workers, cluster.ps, cluster.mode, log_dir, local
            )
        return
    with _tf_config_cluster(cluster, min_shard_bytes, restart_now) as runtime:
        yield runtime


@contextlib.contextmanager
def _tf_config_cluster(
    cluster: ClusterSpec, min_shard_bytes: int, restart_now: ImmediateRestart | None
) -> Iterator[Runtime]:
    """Joins the ``TF_CONFIG`` cluster as its chief, watched from before it connects: a
    task that never answers ends the run; a worker missing at the start is left out
    (:meth:`Runtime.joining` takes it in); a worker lost before the first step starts
    the command again (``restart_now``), without it.

    A lost worker stalls the chief's start-up, not only its own work: TensorFlow sends
    each function the chief defines (the first trace, a summary writer, an eager op of a
    new kind) to every remote task, and that send waits while a task's link is down.
    Once the first step is back the loop has traced what it runs, and the other workers
    take the lost one's work."""
    resolver, spec = _tf_config_resolver()
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    members: tuple[int, ...] | None = None

    def back(job: str, index: int) -> None:  # a task whose link came back
        if job == "worker" and members is not None:
            if index not in members:
                return  # not in the run: the training loop takes it in (Runtime.joining)
            index = members.index(index)
        _call_again(job, index)

    with (
        terminate_on_signals(),
        TaskWatch(
            spec,
            cluster.lost_after_seconds,
            cluster.give_up_after_seconds,
            back=back,
            restart=restart_now,
            native_library=library_path(),
        ) as watch,
    ):
        answering = watch.workers_at_start()
        if len(answering) < len(spec["worker"]):
            members = tuple(answering)
            missing = [i for i in range(len(spec["worker"])) if i not in members]
            for index in missing:
                watch.leave_out("worker", index)
                log.info(
                    "start\twithout worker %d (%s): it does not answer; the run trains on "
                    "the other workers and takes it in when it answers",
                    index,
                    spec["worker"][index],
                )
            resolver = _resolver_of(spec, members)
        strategy = make_strategy(resolver, len(spec["ps"]), min_shard_bytes)
        coordinator = cluster_coordinator(strategy)
        yield Runtime(
            strategy,
            coordinator,
            len(members) if members is not None else len(spec["worker"]),
            len(spec["ps"]),
            cluster.mode,
            watch=watch,
            members=members,
        )


def _resolver_of(spec: dict[str, list[str]], workers: tuple[int, ...]):
    """A resolver for the chief of ``spec`` with only ``workers`` (``TF_CONFIG`` indices),
    numbered from 0 in that order: a worker server takes the task name the chief gives it
    when the chief connects."""
    cluster = {job: list(addresses) for job, addresses in spec.items()}
    cluster["worker"] = [spec["worker"][i] for i in workers]
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc"
    )
