"""The console runner shared by ``recsys-dist`` and the scripts in ``pipelines/``.

A command is a function returning its exit code. :func:`run_command` runs it the way
every console entry point must:

- TensorFlow's C++ log lines on stderr are filtered (``TF_CPP_MIN_LOG_LEVEL``, also for
  the Abseil lines that ignore it);
- SIGTERM, SIGHUP and SIGINT end the process at any moment with ``error: stopped by
  SIG...`` and exit code 128 + signum;
- ``SystemExit`` (argparse's usage errors and ``--help``) becomes its exit code;
- the process ends through ``os._exit`` after flushing;
- it gets a run-scoped temporary directory (``TMPDIR``; ``recsys_dist/scratch.py``),
  removed on every way out: the normal end, ``SystemExit``, the signals above;
- a crash in native code (SIGSEGV, SIGABRT, ...) prints every Python thread's stack on
  stderr before the process dies (``faulthandler``), so a bug report has a place;
  SIGUSR1 prints the same stacks and the command goes on (what is a stuck run doing?).

Inside, :func:`reporting_errors` turns a :class:`~recsys_dist.errors.RecsysError` into
``error: <message>`` on stderr and the error's exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
from typing import Callable, NoReturn

from recsys_dist import scratch
from recsys_dist.cluster.signals import terminate_on_signals, termination_signal
from recsys_dist.errors import RecsysError
from recsys_dist.tf_log_filter import filter_stderr_for_life, unfilter_before_exit

#: The logger every module of the package logs under (``logging.getLogger(__name__)``).
PACKAGE_LOGGER = "recsys_dist"


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``-q/--quiet`` and ``-v/--verbose`` to ``parser`` and to every command under
    it, so they may come before or after the command's name. A command that declares its
    own ``--quiet`` keeps it (same meaning)."""
    _add_output_options(parser, default=False)


def _add_output_options(parser: argparse.ArgumentParser, default) -> None:
    known = parser._option_string_actions  # noqa: SLF001  argparse has no public view
    if "--quiet" not in known:
        parser.add_argument(
            "-q",
            "--quiet",
            action="store_true",
            default=default,
            help="print warnings and results only, no progress lines",
        )
    if "--verbose" not in known:
        parser.add_argument(
            "-v",
            "--verbose",
            action="store_true",
            default=default,
            help="print debug lines and TensorFlow's own Python log messages "
            "(hidden by default: errors are reported as one clear line)",
        )
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for command in action.choices.values():
                # SUPPRESS: a command's parser leaves the value given before its name
                _add_output_options(command, default=argparse.SUPPRESS)


class LineFormatter(logging.Formatter):
    """The command line's format: a message's first word, when a tab follows it, is
    aligned to nine columns (``resume   from ...``); a warning starts with
    ``warning  ``, an error with ``error: ``."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        word, tab, rest = message.partition("\t")
        if tab:
            message = f"{word:<8} {rest}"
        if record.levelno >= logging.ERROR:
            message = f"error: {message}"
        elif record.levelno >= logging.WARNING:
            message = f"warning  {message}"
        if record.exc_info and record.levelno <= logging.DEBUG:
            message += "\n" + self.formatException(record.exc_info)
        return message


class _StandardOutput(logging.StreamHandler):
    """A handler writing to whatever ``sys.stdout`` is when a line is logged (a test may
    have replaced it)."""

    def __init__(self):
        super().__init__(sys.stdout)

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, value):  # StreamHandler sets it; the property reads sys.stdout
        pass


def configure_output(quiet: bool = False, verbose: bool = False) -> None:
    """Installs the one handler that prints the package's log lines on standard output in
    :class:`LineFormatter`'s format: info and above (``verbose``: debug too; ``quiet``:
    warnings and errors only). TensorFlow's Python log messages are hidden unless
    ``verbose``. A program embedding recsys_dist does not call this: the package's
    loggers then follow the program's own ``logging`` configuration."""
    logger = logging.getLogger(PACKAGE_LOGGER)
    for handler in [h for h in logger.handlers if isinstance(h, _StandardOutput)]:
        logger.removeHandler(handler)
    handler = _StandardOutput()
    handler.setFormatter(LineFormatter())
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    logger.propagate = False
    quiet_tensorflow(verbose)


def quiet_tensorflow(verbose: bool) -> None:
    """Hides TensorFlow's Python log messages unless ``verbose``: e.g.
    ``ClusterCoordinator`` logs every failed closure with its graph stack, and the
    command reports the cause itself."""
    if not verbose:
        logging.getLogger("tensorflow").setLevel(logging.CRITICAL)


def reporting_errors(action: Callable[[], int]) -> int:
    """Runs ``action``; a :class:`RecsysError` becomes ``error: <message>`` on stderr and
    its exit code (never a traceback), Ctrl-C exit code 130."""
    try:
        return action()
    except RecsysError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


def exit_now(code: int) -> NoReturn:
    """Removes the run-scoped temporary directory, flushes and exits through ``os._exit``
    (see :func:`run_command`)."""
    scratch.remove()
    sys.stdout.flush()
    unfilter_before_exit()
    sys.stderr.flush()
    os._exit(code)


def _stopped_by(signum: int) -> int:
    print(f"error: stopped by {signal.Signals(signum).name}", file=sys.stderr)
    return 128 + signum


def _exit_code(exc: SystemExit) -> int:
    """The exit code of a ``SystemExit``: its int code, 0 for None, 1 for a message
    (printed on stderr, as Python does)."""
    if isinstance(exc.code, str):
        print(exc.code, file=sys.stderr)
    return 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1


def run_command(
    main: Callable[[], int], before_exit: Callable[[int], None] | None = None
) -> NoReturn:
    """Runs ``main`` as a console command and ends the process with its exit code.

    Exits through ``os._exit`` after flushing, also on ``SystemExit`` (SIGTERM and
    SIGHUP raise it, see ``cluster/local.py``; so does argparse): after its servers are
    gone, a ``ClusterCoordinator`` hangs in its destructor at interpreter exit (its
    failure handler holds a lock while it waits for the lost workers to come back), so a
    SIGTERM mid-training never ended the process. (Arrow's S3 client, used by the
    Parquet op, is finalized by an exit handler the op registers; ``os._exit`` skips
    exit handlers, which is safe for a process about to end.)

    Args:
      main: The command; returns its exit code.
      before_exit: Called with the exit code just before the process ends (it may
        replace the process, e.g. to restart the command).
    """
    scratch.start()  # TMPDIR: autograph's files and staging dirs go there, removed at exit
    filter_stderr_for_life()  # TF_CPP_MIN_LOG_LEVEL for TensorFlow's Abseil lines too
    faulthandler.enable()  # a native crash leaves the Python stacks on stderr
    # `kill -USR1 <pid>` prints every thread's Python stack on stderr; the command goes on
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        with terminate_on_signals():  # SIGTERM, SIGHUP and SIGINT at any moment
            code = main()
    except SystemExit as exc:
        signum = termination_signal()
        if signum is not None and exc.code == 128 + signum:
            code = _stopped_by(signum)
        else:
            code = _exit_code(exc)
    except BaseException:  # noqa: BLE001  re-raised unless a signal caused it
        signum = termination_signal()
        if signum is None:
            raise
        # The signal's SystemExit surfaced from TensorFlow's C code as another error;
        # the signal is what happened, and the cleanup on the way out has run.
        code = _stopped_by(signum)
    if code == 0:
        scratch.release_lasting()  # logs kept for a failed command only
    scratch.remove()  # before_exit may replace the process (os.execv), skipping exit_now
    if before_exit is not None:
        before_exit(code)
    exit_now(code)
