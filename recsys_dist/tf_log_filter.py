"""Applies ``TF_CPP_MIN_LOG_LEVEL`` to the lines TensorFlow's libraries log while they load.

From TensorFlow 2.17 on, the native libraries log through Abseil, and lines logged while a
library loads (before anything could call ``absl::InitializeLog``) go to stderr whatever
``TF_CPP_MIN_LOG_LEVEL`` says. On a CPU machine every ``import tensorflow`` then prints
about six lines, twice::

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 00:00:1795443766.826175    1391 port.cc:153] oneDNN custom operations are on. ...
    I0000 00:00:1795443766.826469    1391 cudart_stub.cc:31] Could not find cuda drivers ...

so a command's one-line error was no longer one line. :func:`install` filters them: while
TensorFlow's top-level module runs, file descriptor 2 goes through a pipe, and a thread
passes every line on except Abseil log lines of a severity below the level (I=0, W=1, E=2,
F=3, as TensorFlow defines the variable) and, from level 1, the banner above. Every other
line (Python warnings, errors, anything not in Abseil's format) passes unchanged and at
once, so a crash during the import still shows what was written before it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import re
import sys
import threading

_ABSL_LINE = re.compile(rb"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [^\]\s]+\] ")
_SEVERITY = {b"I": 0, b"W": 1, b"E": 2, b"F": 3}
_BANNER = b"WARNING: All log messages before absl::InitializeLog() is called"


def min_log_level() -> int:
    """``TF_CPP_MIN_LOG_LEVEL`` as TensorFlow reads it (0 when unset or not a number)."""
    try:
        return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        return 0


def hidden(line: bytes, level: int) -> bool:
    """Whether ``line`` is an Abseil log line (or its banner) below ``level``."""
    if line.startswith(_BANNER):
        return level >= 1
    match = _ABSL_LINE.match(line)
    return match is not None and _SEVERITY[match.group(1)] < level


class _FilteredStderr:
    """Context manager: fd 2 goes through a pipe whose lines are filtered by :func:`hidden`."""

    def __init__(self, level: int):
        self.level = level

    def __enter__(self) -> None:
        sys.stderr.flush()
        read_end, write_end = os.pipe()
        self.saved = os.dup(2)
        os.dup2(write_end, 2)
        os.close(write_end)
        self.relay = threading.Thread(target=self._relay, args=(read_end,), daemon=True,
                                      name="tf-log-filter")
        self.relay.start()

    def _relay(self, read_end: int) -> None:
        with os.fdopen(read_end, "rb", buffering=0) as source:
            pending = b""
            while chunk := source.read(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if not hidden(line, self.level):
                        os.write(self.saved, line + b"\n")
            if pending and not hidden(pending, self.level):
                os.write(self.saved, pending)

    def __exit__(self, *exc) -> None:
        sys.stderr.flush()
        os.dup2(self.saved, 2)  # closes the pipe's write end: the relay reads to its end
        self.relay.join(timeout=10)
        os.close(self.saved)


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
    TensorFlow is not imported yet and the level hides anything."""
    if "tensorflow" in sys.modules or min_log_level() == 0:
        return
    if not any(isinstance(finder, _FirstTensorFlowImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _FirstTensorFlowImport())
