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
  stderr before the process dies (``faulthandler``), so a bug report has a place.

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
from recsys_dist.errors import RecsysError


def add_verbose_argument(parser: argparse.ArgumentParser) -> None:
    """Adds ``-v/--verbose``: keep TensorFlow's own Python log messages (see
    :func:`quiet_tensorflow`)."""
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="keep TensorFlow's own Python log messages (hidden by default: "
                             "errors are reported as one clear line)")


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


def run_command(main: Callable[[], int],
                before_exit: Callable[[int], None] | None = None) -> NoReturn:
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
    from recsys_dist.cluster.local import terminate_on_signals, termination_signal
    from recsys_dist.tf_log_filter import filter_stderr_for_life

    scratch.start()  # TMPDIR: autograph's files and staging dirs go there, removed at exit
    filter_stderr_for_life()  # TF_CPP_MIN_LOG_LEVEL for TensorFlow's Abseil lines too
    faulthandler.enable()  # a native crash leaves the Python stacks on stderr
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
