"""Child processes forked from this one, instead of started afresh, while that is safe.

A process that starts with ``python -m ...`` imports TensorFlow again, seconds of CPU.
A command that has imported TensorFlow but not yet started its runtime (no op run, no
device listed) can fork its TensorFlow children instead: a forked child behaves as a
fresh one would, with the imports already done. :func:`can_fork` says when that holds
for an environment; :func:`fork_child` forks a child that runs a Python function with
the given environment and standard streams, and returns a :class:`ForkedChild`, the part
of ``subprocess.Popen`` the cluster code uses.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from typing import NoReturn

from recsys_dist.cluster import signals

#: Environment variables a process reads while Python, TensorFlow or gRPC load: a child
#: whose value differs from this process's must start afresh.
READ_AT_IMPORT = ("TF_", "PYTHON", "OMP_", "KMP_", "MKL", "LD_", "GRPC_", "CUDA_", "MALLOC")
#: Of those, the variables read only when used (the cluster, gRPC's fail-fast choice, the
#: visible GPUs) or naming where the imported package came from.
READ_WHEN_USED = ("TF_CONFIG", "PYTHONPATH", "GRPC_FAIL_FAST", "CUDA_VISIBLE_DEVICES")
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_POLL_SECONDS = 0.05


def read_at_import(name: str) -> bool:
    """Whether a changed value of the variable ``name`` needs a freshly started process."""
    return name.startswith(READ_AT_IMPORT) and name not in READ_WHEN_USED


def name_process(name: str, prctl=None) -> None:
    """Names this process ``name`` (its ``comm``, the first 15 bytes; Linux only), as
    ``ps -o comm`` and ``/proc/PID/comm`` show it."""
    if prctl is None:
        if not sys.platform.startswith("linux"):
            return
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def can_fork(env: Mapping[str, str]) -> bool:
    """Whether a child forked now with ``env`` behaves as one started with it: TensorFlow
    is imported, its runtime has not started, and ``env`` differs from this process's
    environment only in variables read when used."""
    if "tensorflow" not in sys.modules or not hasattr(os, "fork"):
        return False
    context = sys.modules.get("tensorflow.python.eager.context")
    current = context.context_safe() if context is not None else None
    if current is not None and current._initialized:
        return False
    names = set(env) | set(os.environ)
    return not any(read_at_import(n) and env.get(n) != os.environ.get(n) for n in names)


def returncode_of(status: int) -> int:
    """A ``waitpid`` status as ``subprocess`` reports it (negative: the ending signal)."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def end_fork_with(body: Callable[..., int], *args) -> NoReturn:
    """In a child just forked from a forking process: runs ``body(*args)`` and ends the process
    with its exit code (a ``SystemExit``'s code; 1 after the traceback of any other
    error), running only the exit functions registered since the fork."""
    code = 1
    try:
        atexit._clear()  # the forking process's exit functions are not the child's
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        code = body(*args)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class Signalled:
    """``send_signal`` and ``kill`` as ``subprocess.Popen`` has them, for a child with
    ``pid`` and ``poll``: a child that has ended gets no signal."""

    pid: int

    def poll(self) -> int | None:
        raise NotImplementedError

    def send_signal(self, sig: int) -> None:
        """Sends ``sig`` to the child unless it has ended."""
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """Sends SIGKILL."""
        self.send_signal(signal.SIGKILL)


class ForkedChild(Signalled):
    """A child of :func:`fork_child`: ``pid``, ``returncode``, the parent's ends of piped
    streams (``stdin``, ``stdout``, ``stderr``), ``poll``, ``wait``, ``send_signal``,
    ``kill``, as ``subprocess.Popen`` has them."""

    def __init__(self, pid: int, args: str, streams: dict):
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self.stdin = streams.get(0)
        self.stdout = streams.get(1)
        self.stderr = streams.get(2)

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: it has ended, code unknown
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid == self.pid:
                self.returncode = returncode_of(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(_POLL_SECONDS)
        return self.returncode


def fork_child(
    body: Callable[[], int],
    *,
    env: Mapping[str, str],
    name: str,
    stdin=None,
    stdout=None,
    stderr=None,
    text: bool = False,
    new_session: bool = False,
) -> ForkedChild:
    """Forks a child that runs ``body()`` with ``env`` as its environment and ends with its
    exit code; call it when :func:`can_fork` says so.

    The child dies with this process (``PR_SET_PDEATHSIG``), is named ``name`` (its
    ``comm``, 15 bytes), starts with default signal handlers, no blocked signal and none
    of this process's exit functions (``server_forks.end_fork_with``).

    Args:
      body: What the child runs.
      env: The child's whole environment.
      name: The child's process name.
      stdin, stdout, stderr: Each None (this process's), ``subprocess.PIPE``,
        ``subprocess.DEVNULL``, ``subprocess.STDOUT`` (stderr only), a file descriptor or
        an object with ``fileno()``.
      text: Piped streams in text mode, line-buffered.
      new_session: The child starts a session of its own.
    """
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork
    parent = os.getpid()
    ends: dict[int, tuple[int, int]] = {}  # child fd -> (child end, parent end) of a pipe
    targets: dict[int, int] = {}
    for fd, spec in ((0, stdin), (1, stdout), (2, stderr)):
        if spec is None:
            continue
        if spec == subprocess.PIPE:
            read_end, write_end = os.pipe()
            ends[fd] = (read_end, write_end) if fd == 0 else (write_end, read_end)
            targets[fd] = ends[fd][0]
        elif spec == subprocess.DEVNULL:
            targets[fd] = os.open(os.devnull, os.O_RDWR)
        elif spec == subprocess.STDOUT and fd == 2:
            targets[fd] = -1  # the child's fd 1, once set
        else:
            targets[fd] = spec if isinstance(spec, int) else spec.fileno()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        end_fork_with(_become_child, body, env, name, targets, new_session, parent, prctl)
    for child_end, _ in ends.values():
        os.close(child_end)
    for fd, spec in ((0, stdin), (1, stdout), (2, stderr)):
        if spec == subprocess.DEVNULL:
            os.close(targets[fd])
    streams = {}
    for fd, (_, parent_end) in ends.items():
        mode = ("w" if fd == 0 else "r") + ("" if text else "b")
        streams[fd] = os.fdopen(parent_end, mode, buffering=1 if text else -1)
    return ForkedChild(pid, name, streams)


def _become_child(
    body: Callable[[], int],
    env: Mapping[str, str],
    name: str,
    targets: dict[int, int],
    new_session: bool,
    parent: int,
    prctl,
) -> int:
    prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)
    name_process(name, prctl)
    if new_session:
        os.setsid()
    for fd in (0, 1, 2):
        if fd in targets:
            os.dup2(targets[fd] if targets[fd] >= 0 else 1, fd)
    sys.stdin = open(0, closefd=False) if 0 in targets else sys.stdin  # noqa: SIM115
    sys.stdout = open(1, "w", buffering=1, closefd=False) if 1 in targets else sys.stdout  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False) if 2 in targets else sys.stderr  # noqa: SIM115
    signals.forget_in_child()
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(env)
    return body()
