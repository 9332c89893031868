"""Watching the tasks of a ``tf_config`` cluster from the coordinator, over the network.

A dead machine or a cut link drops packets without closing connections, and TensorFlow's
gRPC channels carry no keepalive, so a call to such a task would wait until the kernel
gives up on the connection (about 15 minutes with Linux's defaults). :class:`TaskWatch`
probes every task's address (a TCP connection, once a second). A task unreachable for
``lost_after`` seconds is reported lost: a worker's items go to the other workers (its
connection is left alone, since closing it makes ``ClusterCoordinator`` rebuild its view
of the cluster and stall every worker); for a parameter server the run waits. A task
that answers again is reported back; one unreachable for ``give_up_after`` seconds ends
the run with exit code 4. See docs/multi-machine.md.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from recsys_dist import scratch
from recsys_dist.errors import ClusterLost

log = logging.getLogger(__name__)

PROBE_SECONDS = 1.0
#: Seconds without a probe of this thread after which the native thread acts for it (one
#: probe of an unreachable task takes PROBE_SECONDS).
STALE_SECONDS = 3 * PROBE_SECONDS


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _reachable(address: str, timeout: float) -> bool:
    try:
        with socket.create_connection(_host_port(address), timeout=timeout):
            return True
    except OSError:
        return False


@dataclasses.dataclass(frozen=True)
class ImmediateRestart:
    """How to start the command again at once, from any thread, when a worker of the run
    is lost before the first step (``restart.ProcessRestart.immediate`` makes it).

    Attributes:
      now: Starts it again from a Python thread (says so, waits, replaces the process).
      argv: The command line of the process that replaces this one, for the native
        watch when no Python thread can run; ``argv[0]`` is the program.
      variable: The environment variable set for it, to ``value`` (its restart number).
      value: See ``variable``.
      then: The end of its ``restart`` line, after "<task> was lost before the first
        step".
      pause: Seconds it waits before the restart.
    """

    now: Callable[[ClusterLost], None]
    argv: tuple[str, ...]
    variable: str
    value: str
    then: str
    pause: float


class TaskWatch:
    """Probes the tasks of a cluster from a background thread (see the module docstring).

    Args:
      spec: ``{job: [address, ...]}``; the ``worker`` and ``ps`` jobs are watched.
      lost_after: Seconds unreachable before a task is reported lost.
      give_up_after: Seconds unreachable before the run ends (this also bounds a start on
        a cluster with a task that never comes up; a rerun resumes from the last checkpoint).
      report: Called with each one-line message (default: this module's logger).
      give_up: Called with the final message instead of ending the process (tests).
      back: Called with ``(job, index)`` of a task that answers again after it was
        reported lost, in a thread of its own.
      restart: Starts the command again, without the worker, when a worker of the run
        is lost before :meth:`first_step` (the chief's start-up waits on every worker:
        see ``runtime._tf_config_cluster``). None: the run waits, as during training.
      native_library: The op library's path: also watch from its native thread
        (:func:`_native_watch`).
    """

    def __init__(
        self,
        spec: Mapping[str, Sequence[str]],
        lost_after: float,
        give_up_after: float,
        report: Callable[[str], None] | None = None,
        give_up: Callable[[str], None] | None = None,
        back: Callable[[str, int], None] | None = None,
        restart: ImmediateRestart | None = None,
        native_library: str | None = None,
    ):
        self._tasks = [
            (job, i, a) for job in ("worker", "ps") for i, a in enumerate(spec.get(job, []))
        ]
        self._lost_after, self._give_up_after = lost_after, give_up_after
        self._report = report or log.info
        self._give_up = give_up or _end_run
        self._back, self._restart = back, restart
        self._first_step = threading.Event()
        self._stop = threading.Event()
        self._down_since: dict[tuple[str, int], float] = {}
        self._reported: set[tuple[str, int]] = set()
        self._failed_at: dict[tuple[str, int], float] = {}
        self._last_probe: dict[tuple[str, int], tuple[float, bool]] = {}
        self._outside: set[tuple[str, int]] = set()
        self._thread = threading.Thread(target=self._loop, name="TaskWatch", daemon=True)
        self._native = _native_watch(self._tasks, lost_after, give_up_after, native_library)

    def __enter__(self) -> TaskWatch:
        if self._native is not None:
            self._native.start()
            if self._restart is not None:
                self._native.restart_before_first_step(self._restart)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._native is not None:
            self._native.recsys_watch_tasks_stop()
        self._thread.join(timeout=5)

    def first_step(self) -> None:
        """The run's first step is back: a worker lost from now on is waited for."""
        self._first_step.set()
        if self._native is not None:
            self._native.recsys_watch_tasks_first_step()

    def leave_out(self, job: str, index: int) -> None:
        """The task is not in the run (a worker missing at its start): it is still probed
        and named, but never ends the run."""
        self._outside.add((job, index))
        if self._native is not None:
            position = [(j, i) for j, i, _ in self._tasks].index((job, index))
            self._native.recsys_watch_tasks_outside(position)

    def tasks(self) -> list[tuple[str, int]]:
        """Every watched task, as ``(job, index)``."""
        return [(job, index) for job, index, _ in self._tasks]

    def lost(self) -> list[tuple[str, int]]:
        """The tasks reported lost and not back yet, as ``(job, index)``."""
        return sorted(self._reported)

    def unreachable(self) -> list[tuple[str, int]]:
        """The tasks whose last probe failed or that are reported lost, as ``(job, index)``.

        A worker is unreachable at once, before it is reported lost: the training loop
        asks this (and :meth:`workers_answer`) before the coordinator ops that wait for
        every worker (a summary write, a checkpoint) and holds them until all answer.
        """
        return sorted(self._down_since)  # (a task reported lost is down too)

    def unreachable_within(self, seconds: float) -> list[tuple[str, int]]:
        """The tasks that failed a probe in the last ``seconds`` (or are unreachable now)."""
        now = time.monotonic()
        recent = {key for key, at in list(self._failed_at.items()) if now - at <= seconds}
        return sorted(recent | set(self._down_since))

    def workers_answer(
        self, indices: Sequence[int] | None = None, timeout: float = PROBE_SECONDS
    ) -> bool:
        """Whether every worker (or those of ``indices``) accepts a connection now."""
        answers = self.probe_now(timeout)
        return all(
            up
            for (job, index), up in answers.items()
            if job == "worker" and (indices is None or index in indices)
        )

    def probe_now(self, timeout: float = PROBE_SECONDS) -> dict[tuple[str, int], bool]:
        """Whether each task accepts a connection now (probed at once, in parallel)."""
        answers: dict[tuple[str, int], bool] = {}

        def probe(job: str, index: int, address: str) -> None:
            answers[job, index] = _reachable(address, timeout)

        threads = [threading.Thread(target=probe, args=t, daemon=True) for t in self._tasks]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout + 1)
        return {(job, index): answers.get((job, index), False) for job, index, _ in self._tasks}

    def answered_since(self, job: str, index: int, since: float) -> bool:
        """Whether the task's last probe, made after ``since`` (``time.monotonic()``),
        reached it."""
        last = self._last_probe.get((job, index))
        return last is not None and last[0] > since and last[1]

    def workers_at_start(self, report: Callable[[str], None] | None = None) -> list[int]:
        """Waits until every parameter server and at least one worker answer, and returns
        the workers that answer then: a run starts with them, and a worker missing at the
        start joins it when it answers (``Runtime.joining``). While a parameter server (or
        every worker) is missing, says so once; this watch ends the run if one stays away
        for ``give_up_after``."""
        report = report or self._report
        said = False
        while True:
            answers = self.probe_now()
            servers_away = [i for (job, i), up in answers.items() if job == "ps" and not up]
            workers = [i for (job, i), up in answers.items() if job == "worker" and up]
            if not servers_away and workers:
                return workers
            if not said:
                away = [f"ps {i}" for i in servers_away] if servers_away else ["any worker"]
                report(
                    f"wait\tfor {', '.join(away)} to answer before the run starts (it stops "
                    f"if a task is away for {self._give_up_after:g} s, "
                    "cluster.give_up_after_seconds)"
                )
                said = True
            self._stop.wait(PROBE_SECONDS / 2)
            if self._stop.is_set():
                raise ClusterLost("the task watch stopped before the cluster answered")

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            for job, index, address in self._tasks:
                if self._stop.is_set():
                    return
                if self._native is not None:
                    self._native.recsys_watch_tasks_beat()
                self._check(job, index, address, _reachable(address, PROBE_SECONDS))
            self._stop.wait(max(0.0, PROBE_SECONDS - (time.monotonic() - started)))

    def _check(self, job: str, index: int, address: str, up: bool) -> None:
        key, now = (job, index), time.monotonic()
        self._last_probe[key] = (now, up)
        if up:
            since = self._down_since.pop(key, None)
            away = None if since is None else now - since
            said_by_native = False
            if self._native is not None:  # it may have said "lost" while this thread could not
                native_away = ctypes.c_double(0)
                position = self._tasks.index((job, index, address))
                said_by_native = bool(
                    self._native.recsys_watch_tasks_take_back(position, ctypes.byref(native_away))
                )
                if said_by_native:  # it saw the whole time; this thread may have missed it
                    away = max(away or 0.0, native_away.value)
            if key in self._reported or said_by_native:
                self._reported.discard(key)
                self._report(
                    f"back\t{job} {index} ({address}) answers again after "
                    f"{away:.0f} s unreachable"
                    + ("; it takes work again" if job == "worker" else "; training goes on")
                )
                if self._back is not None:  # in a thread: it may wait on the task
                    threading.Thread(
                        target=self._back, args=key, name="TaskBack", daemon=True
                    ).start()
            return
        self._failed_at[key] = now
        since = self._down_since.setdefault(key, now)
        away = now - since
        if away >= self._give_up_after and key not in self._outside:
            self._give_up(
                f"{job} {index} ({address}) has been unreachable for {away:.0f} s "
                f"(cluster.give_up_after_seconds = {self._give_up_after:g}); "
                "the run stops. Bring the task back, then run the command again "
                "to resume from the last checkpoint"
            )
            self._stop.set()
        elif away >= self._lost_after and key not in self._reported:
            self._reported.add(key)
            position = self._tasks.index((job, index, address))
            said_by_native = self._native is not None and self._native.recsys_watch_tasks_reported(
                position
            )
            if not said_by_native:  # else the native thread said it while this one could not
                self._say_lost(job, index, address, away)
            restart = self._restart
            if job == "worker" and key not in self._outside and restart is not None:
                if not self._first_step.is_set():
                    self._first_step.set()  # one restart, however many workers are lost
                    lost = ClusterLost(f"{job} {index} ({address}) was lost before the first step")
                    threading.Thread(target=restart.now, args=(lost,), daemon=True).start()

    def _say_lost(self, job: str, index: int, address: str, away: float) -> None:
        if (job, index) in self._outside:
            self._report(
                f"lost\t{job} {index} ({address}): unreachable for {away:.0f} s; the "
                "run goes on without it and takes it in when it answers"
            )
        elif job == "worker":
            self._report(
                f"lost\t{job} {index} ({address}): unreachable for "
                f"{away:.0f} s; the other workers take its work until it answers "
                f"again (the run stops if it is not back within "
                f"{self._give_up_after:g} s, cluster.give_up_after_seconds)"
            )
        else:
            self._report(
                f"lost\t{job} {index} ({address}): unreachable for "
                f"{away:.0f} s; training waits for it (its variables are "
                f"there) and stops if it is not back within "
                f"{self._give_up_after:g} s (cluster.give_up_after_seconds)"
            )


def _native_watch(tasks, lost_after: float, give_up_after: float, library: str | None):
    """The op library with its task watch's functions typed and ``start`` bound to
    ``tasks``, or None without a library.

    A thread that holds the GIL inside TensorFlow (connecting to a server that does not
    answer, creating variables on it, the first trace) keeps the Python watch from
    running at all, so a native thread probes the same tasks and, when the Python
    thread has not run for :data:`STALE_SECONDS`, reports and ends the run the same way.
    """
    if library is None:
        return None
    native = ctypes.CDLL(library)
    native.recsys_watch_tasks.argtypes = [
        ctypes.c_char_p,
        ctypes.c_double,
        ctypes.c_double,
        ctypes.c_double,
        ctypes.c_int,
    ]
    native.recsys_watch_tasks_reported.argtypes = [ctypes.c_int]
    native.recsys_watch_tasks_outside.argtypes = [ctypes.c_int]
    native.recsys_watch_tasks_take_back.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
    native.recsys_watch_tasks_restart_before_first_step.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_double,
        ctypes.c_char_p,
        ctypes.c_int,
    ]
    lines = "".join(f"{job} {index} {address}\n" for job, index, address in tasks).encode()

    def start() -> None:
        failed = native.recsys_watch_tasks(
            lines, lost_after, give_up_after, STALE_SECONDS, ClusterLost.exit_code
        )
        if failed:
            raise OSError(failed, f"the native task watch did not start: {os.strerror(failed)}")

    def restart_before_first_step(restart: ImmediateRestart) -> None:
        native.recsys_watch_tasks_restart_before_first_step(
            restart.then.encode(),
            restart.variable.encode(),
            restart.value.encode(),
            restart.pause,
            b"".join(arg.encode() + b"\0" for arg in restart.argv),
            len(restart.argv),
        )

    native.start = start
    native.restart_before_first_step = restart_before_first_step
    return native


def _end_run(message: str) -> None:
    """Ends the process at once with one line and :class:`ClusterLost`'s exit code: the
    main thread may be blocked in a call to the lost task that never returns."""
    try:
        scratch.remove()
        sys.stdout.flush()
        sys.stderr.write(f"error: {message}\n")
        sys.stderr.flush()
    finally:
        os._exit(ClusterLost.exit_code)
