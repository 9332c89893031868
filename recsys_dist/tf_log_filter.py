"""Applies ``TF_CPP_MIN_LOG_LEVEL`` to the lines TensorFlow's libraries log while they load.

TensorFlow's native libraries log through Abseil, and lines logged while a library loads
(before anything could call ``absl::InitializeLog``), or later through Abseil, go to
stderr whatever ``TF_CPP_MIN_LOG_LEVEL`` says; a command's one-line error would no longer
be one line. Abseil lines below the level (I=0, W=1, E=2, F=3) and, from level 1, the
``absl::InitializeLog`` banner are dropped; every other line passes unchanged, in order.
:func:`install` filters fd 2 while TensorFlow's top-level module runs;
:func:`filter_stderr_for_life` sends the command's fd 2 through a forked filter process.
See docs/stack.md#tensorflows-start-up-lines.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import re
import signal
import sys
import threading

_ABSL_LINE = re.compile(rb"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [^\]\s]+\] ")
_SEVERITY = {b"I": 0, b"W": 1, b"E": 2, b"F": 3}
_BANNER = b"WARNING: All log messages before absl::InitializeLog() is called"
#: Set to the pid whose fd 2 the life-long filter serves (it survives an ``execv``).
_FILTERED = "RECSYS_DIST_STDERR_FILTERED"


def min_log_level() -> int:
    """``TF_CPP_MIN_LOG_LEVEL`` as TensorFlow reads it (0 when unset or not a number)."""
    try:
        return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        return 0


#: Lines that continue a multi-line log message after its Abseil line: TensorFlow's gRPC
#: errors, and the protobuf text a server logs when a coordinator connects
#: (``eager_service_impl.cc] SessionOptions: device_count {`` and about 20 more lines).
_CONTINUATION = re.compile(
    rb"^(Additional GRPC error information from remote target |"
    rb":\{\"created\":|This could happen if the remote target has been "
    rb"disconnected from the client)"
)
_PROTO_TEXT = re.compile(
    rb"^(\s*[a-z_][a-z0-9_]* \{|\s*\}|\s*[a-z_][a-z0-9_]*: "
    rb"(\"[^\"]*\"|-?[0-9.e+-]+|true|false|[A-Z][A-Z0-9_]*)|)$"
)


def hidden(line: bytes, level: int, after_hidden: bool = False) -> bool:
    """Whether ``line`` is an Abseil log line (or its banner) below ``level``, or, right
    after a hidden line, a continuation line of its message (see ``_CONTINUATION``)."""
    if line.startswith(_BANNER):
        return level >= 1
    match = _ABSL_LINE.match(line)
    if match is not None:
        return _SEVERITY[match.group(1)] < level
    return after_hidden and (
        _CONTINUATION.match(line) is not None or _PROTO_TEXT.match(line) is not None
    )


class _FilteredStderr:
    """Context manager: fd 2 goes through a pipe whose lines are filtered by :func:`hidden`."""

    def __init__(self, level: int):
        self.level = level

    def __enter__(self) -> None:
        global _active
        sys.stderr.flush()
        read_end, write_end = os.pipe()
        self.saved = os.dup(2)
        os.dup2(write_end, 2)
        os.close(write_end)
        self.relay = threading.Thread(
            target=self._relay, args=(read_end,), daemon=True, name="tf-log-filter"
        )
        self.relay.start()
        _active = self

    def _relay(self, read_end: int) -> None:
        _relay(read_end, self.saved, self.level)

    def __exit__(self, *exc) -> None:
        global _active
        _active = None
        sys.stderr.flush()
        os.dup2(self.saved, 2)  # closes the pipe's write end: the relay reads to its end
        self.relay.join(timeout=10)
        os.close(self.saved)


_active: _FilteredStderr | None = None


def unfilter_before_exit() -> None:
    """A process about to end at once (``os._exit``, a signal's last line) while
    TensorFlow loads: fd 2 goes straight where it went before, so its last line does not
    die in the relay thread's pipe with the process."""
    active = _active
    if active is not None:
        sys.stderr.flush()
        os.dup2(active.saved, 2)


def _relay(read_end: int, out: int, level: int) -> None:
    """Copies lines from ``read_end`` to ``out`` until end of file, except hidden ones."""
    after_hidden = False
    with os.fdopen(read_end, "rb", buffering=0) as source:
        pending = b""
        while chunk := source.read(65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            kept = []
            for line in lines:
                after_hidden = hidden(line, level, after_hidden)
                if not after_hidden:
                    kept.append(line + b"\n")
            data = b"".join(kept)
            while data:
                data = data[os.write(out, data) :]
        if pending and not hidden(pending, level, after_hidden):
            os.write(out, pending)


def filter_stderr_for_life() -> None:
    """Sends this process's fd 2 through a forked filter process from now on. Does
    nothing at level 0, or when it already runs for this pid.

    The command line calls it first thing. The filter ignores SIGINT, SIGTERM and SIGHUP
    and ends when the last writer has closed the pipe, so nothing is lost when the
    command exits, however it exits."""
    level = min_log_level()
    if level == 0 or os.environ.get(_FILTERED) == str(os.getpid()):
        return
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the filter: it outlives nothing but its writers
        try:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)
            os.close(write_end)
            _relay(read_end, 2, level)
        finally:
            os._exit(0)
    os.close(read_end)
    os.dup2(write_end, 2)
    os.close(write_end)
    os.environ[_FILTERED] = str(os.getpid())


class _FirstTensorFlowImport(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` as the other finders do, and runs its module filtered; then
    steps aside (later imports find it in ``sys.modules``)."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_module, level = spec.loader.exec_module, min_log_level()

        def exec_module(module):
            with _FilteredStderr(level):
                run_module(module)

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    """Filters the load-time lines of the first ``import tensorflow`` of this process, if
    TensorFlow is not imported yet and the level hides anything (``import recsys_dist``
    calls it): while TensorFlow's top-level module runs, fd 2 goes through a pipe and a
    thread filters it."""
    if (
        "tensorflow" in sys.modules
        or min_log_level() == 0
        or os.environ.get(_FILTERED) == str(os.getpid())
    ):
        return
    if not any(isinstance(finder, _FirstTensorFlowImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _FirstTensorFlowImport())
