"""Errors that the command line reports as a clear message with a non-zero exit code.

Every error a user can cause (a bad config, bad data, a missing file) is raised as a
subclass of :class:`RecsysError`. The CLI prints ``error: <message>`` and exits with
the class's ``exit_code``; it never prints a traceback for these.
"""

from __future__ import annotations

import re


class RecsysError(Exception):
    """Base class for errors caused by user input rather than by a bug."""

    exit_code = 2


class ConfigError(RecsysError):
    """A config file is malformed, has an unknown key, a bad value or a broken reference.

    Args:
      file: The YAML file the problem is in.
      path: Dotted key path inside the file, e.g. ``features.tags.combiner``.
      message: What is wrong and what is allowed.
      line: 1-based line number in ``file`` when known.
    """

    def __init__(self, file: str, path: str, message: str, line: int | None = None):
        self.file = str(file)
        self.path = path
        self.line = line
        where = self.file if line is None else f"{self.file}:{line}"
        key = f" {path}:" if path else ""
        super().__init__(f"{where}:{key} {message}")


class DataError(RecsysError):
    """Input data is missing, unreadable or does not match the feature config."""

    exit_code = 3


class ClusterLost(RecsysError):
    """A parameter server (or the cluster) was lost; state on the servers is gone.

    The ``train`` command restarts itself from its last checkpoint on this error (up to
    ``train.max_restarts`` times); everything else reports it and exits 4.
    """

    exit_code = 4


class WorkerJoins(ClusterLost):
    """A worker missing when the run started answers now: the run wrote a checkpoint and
    starts again with every worker. Not a fault, so it does not count against
    ``train.max_restarts``."""


_STATUS_LINE = re.compile(r"^(?:\(\d+\) )?[A-Z_]+:\s*(.+)$")
_NOT_THE_REASON = (
    "Graph execution error",
    "Detected at node",
    "File ",
    "[[",
    "[Op:",
    "Additional GRPC error information",
    "0 successful operations",
    "0 derived errors ignored",
)


def op_error_reason(message: str, fallback: str = "unknown error") -> str:
    """The line of a TensorFlow op error's message that says what went wrong.

    A graph's error message starts with ``Graph execution error:`` and the Python stack of
    the op; the op's own status comes after it, sometimes behind a status code
    (``INVALID_ARGUMENT: ...``), a ``{{function_node ...}}`` tag or followed by
    ``[[{{node ...}}]]``. Those wrappers are dropped; the first line left is returned
    (at most 300 characters), or ``fallback`` when nothing is left.
    """
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for line in lines:
        status = _STATUS_LINE.match(line)
        if status:
            return _unwrapped(status.group(1))[:300]
    for line in lines:
        if not line.startswith(_NOT_THE_REASON):
            return _unwrapped(line)[:300] or fallback
    return fallback


def _unwrapped(line: str) -> str:
    line = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", line)
    return re.sub(r"\s*\[Op:[^\]]*\]$", "", line).strip()
