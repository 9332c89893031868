"""``recsys-dist`` commands for the tests, forked from one process that has imported
TensorFlow and the package.

A test that runs ``recsys-dist train`` as a subprocess pays TensorFlow's import, 4-5 s of
CPU on a 2-core machine, before the command does anything; the cluster tests run a few
hundred commands. :func:`popen` and :func:`run` take the arguments of
``subprocess.Popen`` and ``subprocess.run`` and, for a ``recsys-dist`` command, fork it
from a process that has imported them once (one per test process, started on first use):
the command runs the console script's own entry point (:func:`recsys_dist.cli.run`) in a
fresh child, with the test's arguments, environment, working directory and standard
streams, and is a real process to kill, stop or signal like any other. Its exit code comes
back as ``subprocess`` gives it (negative: the signal that ended it).

What stays a plain subprocess: anything that is not a ``recsys-dist`` command, a command
run through another one (``ip netns exec``, a shell), and a command whose environment
differs from the forking process's in a variable read while TensorFlow or Python load
(``recsys_dist.cluster.child_fork.read_at_import``), since the fork has loaded them already. Setting
``RECSYS_DIST_TESTS_FORK=0`` runs every command as a plain subprocess.

The forking process (``python -m tests.support.command_forks SOCKET``) listens on a Unix
socket: each request is one connection carrying a JSON header (``argv``, ``env``, ``cwd``,
``new_session``) and the three standard streams' file descriptors; it answers
``started <pid>`` on the connection, and ``exited <returncode>`` when the command has
ended. It stays single-threaded, so a fork copies no lock another thread holds, and it
dies with the test process that started it.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence

from recsys_dist.cluster.child_fork import Signalled, read_at_import
from tests.support.paths import CLI, REPO

#: The ``subprocess.Popen`` arguments a forked command takes (others run it plainly).
_POPEN_ARGUMENTS = frozenset(
    ("stdout", "stderr", "stdin", "env", "cwd", "text", "universal_newlines", "start_new_session")
)
_START_TIMEOUT = 180.0
_HEADER_LIMIT = 1 << 20


class ForkedCommand(Signalled):
    """A forked ``recsys-dist`` command: the part of ``subprocess.Popen`` the tests use."""

    def __init__(
        self, args: list[str], connection: socket.socket, pid: int, answer: bytes, streams: dict
    ):
        """``answer``: what the forking process sent after ``started`` (its ``exited`` line
        already, when the command ended at once)."""
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self.stdin = None
        self.stdout = streams.get("stdout")
        self.stderr = streams.get("stderr")
        self._connection = connection
        self._answer = answer
        self._lock = threading.Lock()

    def _collect(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            deadline = None if timeout is None else time.monotonic() + timeout
            while b"\n" not in self._answer:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                readable, _, _ = select.select([self._connection], [], [], left)
                if not readable:
                    return None
                chunk = self._connection.recv(256)
                if not chunk:  # the forking process died: so did the command (PDEATHSIG)
                    self._answer += b"exited -9\n"
                self._answer += chunk
            words = self._answer.split(b"\n", 1)[0].split()
            self.returncode = int(words[1])
            self._connection.close()
            return self.returncode

    def poll(self) -> int | None:
        return self._collect(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return code

    def communicate(self, input=None, timeout: float | None = None):  # noqa: A002
        """Reads the piped streams to their end and waits, as ``Popen.communicate``."""
        assert input is None, "forked commands read no stdin"
        out: dict[str, object] = {}
        readers = []
        for name in ("stdout", "stderr"):
            stream = getattr(self, name)
            if stream is not None:
                thread = threading.Thread(
                    target=lambda n=name, s=stream: out.__setitem__(n, s.read()), daemon=True
                )
                thread.start()
                readers.append(thread)
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in readers:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        for name in ("stdout", "stderr"):
            stream = getattr(self, name)
            if stream is not None:
                stream.close()
        return out.get("stdout"), out.get("stderr")

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def __enter__(self) -> ForkedCommand:
        return self

    def __exit__(self, *exc) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


class _Forks:
    """The test process's forking process, started on first use."""

    def __init__(self):
        self._process: subprocess.Popen | None = None
        self._env: dict[str, str] = {}
        self._socket_path = ""
        self._lock = threading.Lock()

    def _start(self) -> None:
        from recsys_dist.cluster.server_forks import die_with_parent
        from tests.support.processes import subprocess_env

        self._env = subprocess_env()
        directory = tempfile.mkdtemp(prefix="recsys_dist_command_forks_")
        self._socket_path = os.path.join(directory, "socket")
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.command_forks", self._socket_path],
            stdout=subprocess.PIPE,
            env=self._env,
            cwd=str(REPO),
            preexec_fn=die_with_parent(os.getpid()),
            start_new_session=True,
        )
        ready, _, _ = select.select([process.stdout], [], [], _START_TIMEOUT)
        line = process.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            process.kill()
            raise RuntimeError(f"the tests' command forking process did not start: {line!r}")
        self._process = process
        atexit.register(self.stop)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def forkable(self, argv: Sequence[str], env: Mapping[str, str] | None) -> bool:
        if os.environ.get("RECSYS_DIST_TESTS_FORK", "1") == "0":
            return False
        if not argv or str(argv[0]) != CLI:
            return False
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._start()
        if env is None:
            return True
        names = set(env) | set(self._env)
        return not any(
            read_at_import(name) and env.get(name) != self._env.get(name) for name in names
        )

    def spawn(self, argv: list[str], env: Mapping[str, str], cwd, new_session: bool, fds):
        header = json.dumps(
            {
                "argv": argv,
                "env": dict(env),
                "cwd": str(cwd) if cwd is not None else os.getcwd(),
                "new_session": new_session,
            }
        ).encode()
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(self._socket_path)
        socket.send_fds(connection, [len(header).to_bytes(8, "little") + header], fds)
        answer = b""
        while b"\n" not in answer:
            chunk = connection.recv(256)
            if not chunk:
                raise RuntimeError(f"the tests' command forking process refused {argv}")
            answer += chunk
        line, rest = answer.split(b"\n", 1)
        words = line.split()
        if words[:1] != [b"started"]:
            raise RuntimeError(f"the tests' command forking process said {line!r}")
        return connection, int(words[1]), rest


_FORKS = _Forks()


def _child_end(value, inherited: int, text: bool, close: list[int]):
    """The child's end of one standard stream and, when it is piped, the caller's end; a
    descriptor opened here is added to ``close`` (closed here once the child has it)."""
    if value == subprocess.PIPE:
        read_end, write_end = os.pipe()
        close.append(write_end)
        return write_end, open(read_end, "r" if text else "rb")  # noqa: SIM115  the caller's
    if value == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        close.append(fd)
        return fd, None
    if value is None:
        return inherited, None
    return (value if isinstance(value, int) else value.fileno()), None


def popen(args: Sequence[str], **kwargs):
    """``subprocess.Popen(args, **kwargs)``, forked when it is a ``recsys-dist`` command
    (see the module); the keyword arguments the tests use: ``stdout``, ``stderr``,
    ``stdin`` (None or DEVNULL), ``env``, ``cwd``, ``text``/``universal_newlines``,
    ``start_new_session``."""
    args = [str(a) for a in args]
    env = kwargs.get("env")
    if (
        set(kwargs) - _POPEN_ARGUMENTS
        or kwargs.get("stdin") not in (None, subprocess.DEVNULL)
        or not _FORKS.forkable(args, env)
    ):
        return subprocess.Popen(args, **kwargs)
    text = bool(kwargs.get("text") or kwargs.get("universal_newlines"))
    close: list[int] = []
    stdin, _ = _child_end(subprocess.DEVNULL, 0, text, close)
    stdout, out_stream = _child_end(kwargs.get("stdout"), 1, text, close)
    if kwargs.get("stderr") == subprocess.STDOUT:
        stderr, err_stream = stdout, None
    else:
        stderr, err_stream = _child_end(kwargs.get("stderr"), 2, text, close)
    try:
        connection, pid, answer = _FORKS.spawn(
            args,
            os.environ if env is None else env,
            kwargs.get("cwd"),
            bool(kwargs.get("start_new_session")),
            [stdin, stdout, stderr],
        )
    finally:
        for fd in close:
            os.close(fd)
    streams = {"stdout": out_stream, "stderr": err_stream}
    return ForkedCommand(args, connection, pid, answer, streams)


def run(args: Sequence[str], *, timeout: float | None = None, check: bool = False, **kwargs):
    """``subprocess.run(args, ...)`` through :func:`popen`; ``capture_output`` too."""
    if "input" in kwargs:
        return subprocess.run(args, timeout=timeout, check=check, **kwargs)
    if kwargs.pop("capture_output", False):
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    process = popen(args, **kwargs)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise subprocess.TimeoutExpired(process.args, timeout, output=out, stderr=err) from None
    result = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    if check:
        result.check_returncode()
    return result


# The forking process.


def _run_command(request: dict, fds: list[int], prctl) -> int:
    """In a forked child: becomes ``recsys-dist *argv`` (through :func:`end_fork_with`)."""
    if request["new_session"]:
        os.setsid()
    prctl(15, b"recsys-dist", 0, 0, 0)  # PR_SET_NAME, as the console script's process
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    import recsys_dist
    from recsys_dist.cli import run

    recsys_dist.COMMAND_STARTED_AT = time.time()
    run()  # ends the process itself
    return 0


def _serve(socket_path: str) -> int:
    # isort: off
    import recsys_dist  # noqa: F401  TensorFlow's environment defaults, before it loads
    import tensorflow  # noqa: F401
    import recsys_dist.cli  # noqa: F401
    import recsys_dist.commands  # noqa: F401

    # isort: on
    from recsys_dist.cluster.child_fork import end_fork_with, returncode_of

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG: dies with the test process
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([listener], [], [], 0.05)
        if readable:
            connection, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(connection, _HEADER_LIMIT + 8, 3)
            size = int.from_bytes(message[:8], "little")
            payload = message[8:]
            while len(payload) < size:
                payload += connection.recv(size - len(payload))
            request = json.loads(payload)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                for other in children.values():
                    other.close()
                connection.close()
                end_fork_with(_run_command, request, fds, prctl)
            for fd in fds:
                os.close(fd)
            children[pid] = connection
            connection.sendall(f"started {pid}\n".encode())
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            connection = children.pop(pid, None)
            if connection is not None:
                try:
                    connection.sendall(f"exited {returncode_of(status)}\n".encode())
                except OSError:
                    pass
                connection.close()


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1]))
