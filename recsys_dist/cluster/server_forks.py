"""Server tasks forked from one process that has imported TensorFlow.

Importing TensorFlow costs each process seconds of CPU, paid by every task of a local
cluster before its first step and again for every task started after a loss.
:class:`ServerForks` starts one process that imports TensorFlow once and forks every task
from it: a task serves a fraction of a second after it is asked for, and shares the
imported pages with its siblings. TensorFlow's own multi-process tests start their tasks
the same way, from a fork server that has imported TensorFlow and run no op. The forking
process is ``python -m recsys_dist.cluster.server_forks``, or a fork of this process when
that is safe (``child_fork.can_fork``); its protocol is :func:`_serve`'s.
"""

from __future__ import annotations

import collections
import ctypes
import json
import os
import pathlib
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from recsys_dist.cluster import server
from recsys_dist.cluster.child_fork import (
    Signalled,
    can_fork,
    end_fork_with,
    fork_child,
    returncode_of,
)
from recsys_dist.cluster.server import ClusterError

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_REAP_SECONDS = 0.05
_ERROR_LINES = 20


class ForkedTask(Signalled):
    """A task of :class:`ServerForks`: the part of ``subprocess.Popen`` a local cluster
    uses (``pid``, ``poll``, ``wait``, ``send_signal``, ``kill``)."""

    def __init__(self, forks: ServerForks, pid: int):
        self._forks = forks
        self.pid = pid

    def poll(self) -> int | None:
        """The task's return code, or None while it runs."""
        return self._forks.returncode(self.pid)

    def wait(self, timeout: float | None = None) -> int:
        """Waits until the task has ended and returns its return code.

        Raises:
          subprocess.TimeoutExpired: It still runs after ``timeout`` seconds.
        """
        return self._forks.wait_for(self.pid, timeout)


class ServerForks:
    """The forking process of one local cluster and the tasks it has forked.

    Args:
      env: The environment of the forking process and so of every task.
      start_timeout: Seconds it may take to import TensorFlow.
    """

    def __init__(self, env: Mapping[str, str], start_timeout: float):
        self.env = dict(env)
        self._start_timeout = start_timeout
        self._process: subprocess.Popen | None = None
        self._ready = False
        self._changed = threading.Condition()
        self._answers: list[str] = []
        self._errors: collections.deque[str] = collections.deque(maxlen=_ERROR_LINES)
        self._errors_closed = False
        self._ended: dict[int, int] = {}
        self._tasks: set[int] = set()
        self._lock = threading.Lock()  # one request at a time

    def launch(self) -> ServerForks:
        """Starts the forking process without waiting for its import (:meth:`spawn`
        waits); does nothing while it runs. Returns self."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._launch()
        return self

    def spawn(self, argv: Sequence[str], log_path: pathlib.Path, name: str) -> ForkedTask:
        """Forks a server task with ``argv`` (the flags of ``python -m
        recsys_dist.cluster.server``), its output appended to ``log_path``; starts the
        forking process first if it is not running (the first time, or after it died).

        Raises:
          ClusterError: The forking process did not start or did not answer.
        """
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._launch()
            if not self._ready:
                answer = self._next_answer(self._start_timeout)
                if answer != "ready":
                    raise ClusterError(f"the forking process of the local cluster said {answer!r}")
                self._ready = True
            request = {"argv": list(argv), "log": str(log_path), "name": name}
            answer = self._ask(json.dumps(request))
            if not answer.startswith("started "):
                raise ClusterError(f"the forking process of the local cluster refused: {answer}")
            pid = int(answer.split()[1])
            with self._changed:
                self._tasks.add(pid)
            return ForkedTask(self, pid)

    def returncode(self, pid: int) -> int | None:
        with self._changed:
            return self._ended.get(pid)

    def wait_for(self, pid: int, timeout: float | None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while pid not in self._ended:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(f"task {pid}", timeout)
                self._changed.wait(1.0 if left is None else min(left, 1.0))
            return self._ended[pid]

    def stop(self, grace: float = 5.0) -> None:
        """Ends the forking process (its tasks die with it); safe to call more than once."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin:
            try:
                process.stdin.close()
            except OSError:
                pass
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _launch(self) -> None:
        self.stop()
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        if can_fork(self.env):  # this process has imported TensorFlow: no second import
            process = fork_child(
                _serve, env=self.env, name="server-forks", text=True, new_session=True, **pipes
            )
        else:
            process = subprocess.Popen(
                [sys.executable, "-m", "recsys_dist.cluster.server_forks"],
                env=self.env,
                text=True,
                bufsize=1,
                preexec_fn=die_with_parent(os.getpid()),
                start_new_session=True,  # a terminal's Ctrl-C reaches only the coordinator
                **pipes,
            )
        self._process, self._ready = process, False
        with self._changed:
            self._answers.clear()
            self._errors.clear()
            self._errors_closed = False
        for target, name in ((self._read, "reader"), (self._read_errors, "errors")):
            threading.Thread(
                target=target, args=(process,), name=f"server-forks-{name}", daemon=True
            ).start()

    def _ask(self, line: str) -> str:
        try:
            self._process.stdin.write(line + "\n")
            self._process.stdin.flush()
        except (OSError, ValueError):
            raise ClusterError(self._failure("exited before it was asked")) from None
        return self._next_answer(30.0)

    def _next_answer(self, timeout: float) -> str:
        process = self._process
        deadline = time.monotonic() + timeout
        with self._changed:
            while not self._answers:
                if process.poll() is not None:  # after the last lines it wrote on stderr
                    self._changed.wait_for(lambda: self._errors_closed, timeout=5.0)
                    raise ClusterError(self._failure(f"exited with code {process.returncode}"))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ClusterError(self._failure(f"did not answer within {timeout:g} s"))
                self._changed.wait(min(left, 0.2))
            return self._answers.pop(0)

    def _read(self, process: subprocess.Popen) -> None:
        for line in process.stdout:
            words = line.split()
            with self._changed:
                if words[:1] == ["exited"] and len(words) == 3:
                    self._ended[int(words[1])] = int(words[2])
                    self._tasks.discard(int(words[1]))
                else:
                    self._answers.append(line.strip())
                self._changed.notify_all()
        # The forking process is gone, and its tasks with it (PR_SET_PDEATHSIG).
        with self._changed:
            orphans = list(self._tasks)
        for pid in orphans:
            _wait_gone(pid)
        with self._changed:
            for pid in orphans:
                self._ended.setdefault(pid, -signal.SIGKILL)
                self._tasks.discard(pid)
            self._changed.notify_all()

    def _read_errors(self, process: subprocess.Popen) -> None:
        for line in process.stderr:
            with self._changed:
                self._errors.append(line.rstrip("\n"))
        with self._changed:
            self._errors_closed = True
            self._changed.notify_all()

    def _failure(self, what: str) -> str:
        with self._changed:
            tail = "\n".join(self._errors) or "<nothing>"
        return f"the forking process of the local cluster {what}; its last lines:\n{tail}"


def die_with_parent(parent_pid: int) -> Callable[[], None] | None:
    """Returns a ``preexec_fn`` that makes the child get SIGKILL when its parent dies.

    Returns None where ``prctl`` does not exist (not Linux).
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork
    kill_signal = int(signal.SIGKILL)

    def preexec() -> None:
        # Runs in the forked child between fork and exec: keep it minimal.
        prctl(_PR_SET_PDEATHSIG, kill_signal, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os.kill(os.getpid(), kill_signal)

    return preexec


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    """Waits until ``pid`` has exited (gone, or a zombie of its new parent)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(_REAP_SECONDS)


# The forking process.


def _run_task(request: dict, die_with_forks: Callable[[], None], prctl) -> int:
    """In a forked child: becomes the server task of ``request`` (through
    :func:`end_fork_with`)."""
    die_with_forks()
    prctl(_PR_SET_NAME, request["name"].encode()[:15], 0, 0, 0)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    return server.main(request["argv"])


def _serve() -> int:
    """The forking process: prints ``ready`` once imported, then reads one JSON request per
    line on stdin, ``{"argv": [...], "log": path, "name": "worker-0"}``, forks a task that
    runs ``python -m recsys_dist.cluster.server`` with ``argv`` and its output in ``log``,
    and answers ``started <pid>``; when a task ends it prints ``exited <pid> <returncode>``
    (negative: the signal that ended it, as ``subprocess`` reports it). Its own errors go
    to stderr, whose last lines a failure to start quotes.

    It stays single-threaded, so a fork copies no lock another thread holds. It dies with
    its parent, and its tasks die with it (``PR_SET_PDEATHSIG``); it exits when its stdin
    closes.
    """
    # isort: off
    import recsys_dist  # noqa: F401  TensorFlow's environment defaults, before it loads
    import tensorflow  # noqa: F401  the import every task shares

    # isort: on

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    die_with_forks = die_with_parent(os.getpid())
    children: set[int] = set()
    out = sys.stdout
    print("ready", file=out, flush=True)
    stdin = sys.stdin.buffer
    pending = b""
    while True:
        readable, _, _ = select.select([stdin], [], [], _REAP_SECONDS)
        if readable:
            chunk = os.read(stdin.fileno(), 65536)
            if not chunk:
                break
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                out.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    end_fork_with(_run_task, request, die_with_forks, prctl)
                children.add(pid)
                print(f"started {pid}", file=out, flush=True)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            children.discard(pid)
            print(f"exited {pid} {returncode_of(status)}", file=out, flush=True)
    for pid in children:  # stdin closed: the cluster is stopping
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(_serve())
