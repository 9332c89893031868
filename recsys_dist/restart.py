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
      execv: Replaces the process (``os.execv``).
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
        execv: Callable[[str, list[str]], object] = os.execv,
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

    def after_lost(self, exc: ClusterLost, max_restarts: int) -> int:
        """Handles a lost task: keeps its error, says so, waits, and returns
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
        print(
            f"restart  {exc}; starting the cluster again and resuming from the last "
            f"checkpoint (restart {restart + 1} of at most {max_restarts})",
            flush=True,
        )
        self.restart_as = restart + 1
        self._sleep(min(30, 2**restart))
        return RESTART_EXIT

    def due(self, code: int) -> bool:
        """Whether a command that exits with ``code`` is to start again."""
        return code == RESTART_EXIT and self.restart_as is not None

    @staticmethod
    def argv() -> list[str]:
        """The command line of the process that starts again: this command's arguments."""
        return [sys.executable, "-m", "recsys_dist.cli", *sys.argv[1:]]

    def exec_if_due(self, code: int) -> None:
        """Replaces this process by the command started again when :meth:`after_lost`
        asked for it (``code`` is the command's exit code); otherwise returns."""
        if not self.due(code):
            return
        sys.stdout.flush()
        sys.stderr.flush()
        self.environ[RESTART_VARIABLE] = str(self.restart_as)
        self._execv(sys.executable, self.argv())
