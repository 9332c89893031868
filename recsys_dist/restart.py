"""Starting a command again as a fresh process after the cluster lost a task: the lost
cluster's coordinator state cannot be reused, so ``train``, ``retrain`` and ``backfill``
resume from their last checkpoint in a new process, up to ``train.max_restarts`` times.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable, MutableMapping
from typing import NoReturn

from recsys_dist import scratch
from recsys_dist.cluster.liveness import ImmediateRestart
from recsys_dist.console import exit_now
from recsys_dist.errors import ClusterLost, WorkerJoins

#: Exit code of a command that asks to be started again (a lost task).
RESTART_EXIT = 75
#: Tells a started-again process which restart it is (unset: the first run).
RESTART_VARIABLE = "RECSYS_DIST_RESTART"


class ProcessRestart:
    """The restart of this process after a lost task, and what must outlive the task.

    A lost task's error is kept (:attr:`lost`) until the process ends or is replaced: its
    frames hold the cluster's resources (variables, the workers' datasets), and freeing
    one calls the task that owns it, which waits for ever on a connection left dead. For
    the same reason the cycle collector is switched off once a task is lost (it would
    free them too); :attr:`collector_off` says so.

    Args:
      environ: The process environment; :data:`RESTART_VARIABLE` in it counts the
        restarts before this process, and is set for the next one.
      execv: Replaces the process (``os.execv``); None: never (a command that asks for
        a restart returns :data:`RESTART_EXIT`, and :meth:`now` ends the process).
      sleep: Waits before a restart (``time.sleep``), so an orchestrator can bring the
        servers back.

    Attributes:
      restart_as: The restart number the next process runs as, once one is due; else
        None.
      lost: The lost-task errors kept alive.
    """

    def __init__(
        self,
        environ: MutableMapping[str, str] = os.environ,
        execv: Callable[[str, list[str]], object] | None = os.execv,
        sleep: Callable[[float], object] = time.sleep,
    ):
        self.environ, self._execv, self._sleep = environ, execv, sleep
        self.restart_as: int | None = None
        self.lost: list[BaseException] = []

    @property
    def restarts_before(self) -> int:
        """Restarts of this command before this process (0 in its first run)."""
        return int(self.environ.get(RESTART_VARIABLE, "0"))

    @property
    def collector_off(self) -> bool:
        """Whether the cycle collector was switched off for a lost task's resources."""
        return bool(self.lost) and not gc.isenabled()

    def keep(self, exc: BaseException) -> None:
        """Notes a lost task: keeps its error, and switches the collector off."""
        self.lost.append(exc)
        gc.disable()

    def after_lost(self, exc: ClusterLost, max_restarts: int, wait: bool = True) -> int:
        """Handles a lost task: keeps its error, says so, waits (unless not ``wait``: a
        worker lost before the first step, which the restart leaves out), and returns
        :data:`RESTART_EXIT` so :meth:`exec_if_due` starts the command again (which resumes
        from the last checkpoint).

        Raises:
          ClusterLost: after ``max_restarts`` restarts (``train.max_restarts``).
        """
        self.keep(exc)
        restart = self.restarts_before
        if isinstance(exc, WorkerJoins):  # not a fault: no wait, not counted
            print(f"restart  {exc}", flush=True)
            self.restart_as = restart
            return RESTART_EXIT
        if restart >= max_restarts:
            raise ClusterLost(
                f"{exc} (gave up after train.max_restarts = {max_restarts} restarts)"
            ) from None
        print(f"restart  {exc}{_then(restart, max_restarts)}", flush=True)
        self.restart_as = restart + 1
        if wait:
            self._sleep(_pause(restart))
        return RESTART_EXIT

    def now(self, exc: ClusterLost, max_restarts: int) -> NoReturn:
        """Starts the command again at once, from any thread: the main thread may be
        blocked in a call that waits on the lost task. Ends the process with ``exc``'s
        ``error:`` line and exit code when it cannot start again (``max_restarts``
        reached, or no ``execv``)."""
        try:
            code = self.after_lost(exc, max_restarts, wait=False)
        except ClusterLost as final:
            exc = final
        else:
            scratch.remove()  # as run_command does before a restart
            self.exec_if_due(code)
        print(f"error: {exc}", file=sys.stderr)
        exit_now(exc.exit_code)

    def immediate(self, max_restarts: int) -> ImmediateRestart | None:
        """The restart a ``tf_config`` chief carries out at once, from any thread, when a
        worker is lost before the first step (:meth:`now`, or the native task watch when
        no Python thread can run), without a wait: the new process leaves the worker out,
        so there is nothing to wait for. None when this process cannot be replaced or has no
        restart left (the run then waits for the worker)."""
        restart = self.restarts_before
        if self._execv is None or restart >= max_restarts:
            return None
        return ImmediateRestart(
            now=lambda exc: self.now(exc, max_restarts),
            argv=tuple(self.argv()),
            variable=RESTART_VARIABLE,
            value=str(restart + 1),
            then=_then(restart, max_restarts),
            pause=0.0,
        )

    def due(self, code: int) -> bool:
        """Whether a command that exits with ``code`` is to start again."""
        return code == RESTART_EXIT and self.restart_as is not None

    @staticmethod
    def argv() -> list[str]:
        """The command line of the process that starts again: this command's arguments."""
        return [sys.executable, "-m", "recsys_dist.cli", *sys.argv[1:]]

    def exec_if_due(self, code: int) -> None:
        """Replaces this process by the command started again when :meth:`after_lost`
        asked for it (``code`` is the command's exit code) and it can; otherwise
        returns."""
        if not self.due(code) or self._execv is None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        self.environ[RESTART_VARIABLE] = str(self.restart_as)
        self._execv(sys.executable, self.argv())


def _then(restart: int, max_restarts: int) -> str:
    """The end of the ``restart`` line of restart number ``restart + 1``."""
    return (
        "; starting the cluster again and resuming from the last checkpoint "
        f"(restart {restart + 1} of at most {max_restarts})"
    )


def _pause(restart: int) -> float:
    """Seconds to wait before restart number ``restart + 1``: an orchestrator may be
    bringing the servers back."""
    return min(30, 2**restart)
