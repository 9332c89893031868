"""Errors that the command line reports as a clear message with a non-zero exit code.

Every error a user can cause (a bad config, bad data, a missing file) is raised as a
subclass of :class:`RecsysError`. The CLI prints ``error: <message>`` and exits with
the class's ``exit_code``; it never prints a traceback for these.
"""

from __future__ import annotations


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
