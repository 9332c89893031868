"""Signals of a command that runs a cluster: SIGTERM, SIGHUP and SIGINT end the process at
once with one line, ``error: stopped by SIG...``, and exit code 128 + signum; the
servers it started die with it (``PR_SET_PDEATHSIG``, ``cluster/local.py``)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

from recsys_dist import scratch
from recsys_dist.tf_log_filter import unfilter_before_exit


@contextlib.contextmanager
def terminate_on_signals(
    signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT),
) -> Iterator[None]:
    """Ends the process on SIGTERM, SIGHUP and SIGINT while active: one line
    ``error: stopped by SIG...``, exit code 128 + signum (see :func:`_exit_now`), within
    moments of the signal wherever the process's threads are.

    A Python signal handler runs only in the main thread, between two bytecodes. A main
    thread that waits inside native code (TensorFlow waiting on a server that does not
    answer) runs none, and the kernel may hand the signal to any of TensorFlow's threads,
    which does not interrupt that wait. So the signal also reaches a thread of its own
    (:func:`_watch_signals`, through Python's wakeup fd), which ends the process itself.

    SIGINT too: Python's ``KeyboardInterrupt`` raised inside TensorFlow's C code can come
    out as another error, with a traceback. Previous handlers are restored when the
    block ends. Must be used in the main thread.

    Args:
      signals: The signals to handle.

    Example:
      >>> with terminate_on_signals(), LocalCluster(2, 1, "logs") as cluster:
      ...     train(cluster)
    """
    _watch_signals()
    previous = {sig: signal.signal(sig, _exit_on) for sig in signals}
    _arm_native(signals)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _arm_native(signals)


_received_signal: int | None = None
_exiting = threading.Lock()
_watching = False
_forward_fd: int | None = None  # where the watching thread reads the signals
_native = None  # the library of the native watching thread, once it runs
#: Seconds the Python threads get to end the process, with its cleanup, before the
#: native thread ends it without.
NATIVE_GRACE_SECONDS = 2.0


def _exit_on(signum: int, frame: FrameType | None) -> None:
    """The handler :func:`terminate_on_signals` installs."""
    _exit_now(signum)


def _watch_signals() -> None:
    """Starts, once per process, the thread that ends it on a signal whose handler is
    :func:`_exit_on`: every signal with a Python handler writes its number to the
    wakeup fd from whichever thread the kernel chose, and this thread reads it."""
    global _watching, _forward_fd
    if _watching:
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    threading.Thread(
        target=_end_on_signals, args=(read_fd,), name="signal-watcher", daemon=True
    ).start()
    _watching, _forward_fd = True, write_fd


def watch_signals_natively(library_path: str) -> None:
    """Also ends the process from a native thread (``ops/exit_on_signals.cc`` in the op
    library at ``library_path``), :data:`NATIVE_GRACE_SECONDS` after a signal that
    :func:`terminate_on_signals` handles, if the Python threads have not ended it by
    then: a thread that holds the GIL inside TensorFlow (waiting for a server that never
    answers) keeps every other Python thread from running. That exit skips the removal
    of the run-scoped temporary directory, which the next command removes
    (``scratch.remove_stale``). Call it from the main thread once TensorFlow is loaded;
    once per process."""
    global _native
    if _native is not None or not _watching:
        return
    library = ctypes.CDLL(library_path)
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    failed = library.recsys_watch_signals(read_fd, _forward_fd, int(NATIVE_GRACE_SECONDS * 1000))
    if failed:
        os.close(read_fd)
        os.close(write_fd)
        return
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    _native = library
    _arm_native((signal.SIGTERM, signal.SIGHUP, signal.SIGINT))


def forget_in_child() -> None:
    """In a child forked from a process whose signals are watched: the watching threads
    did not come along, so signals stop going to their pipe, and the child starts
    watching anew when it enters :func:`terminate_on_signals`."""
    global _watching, _forward_fd, _native, _received_signal, _exiting
    signal.set_wakeup_fd(-1)
    _watching, _forward_fd, _native, _received_signal = False, None, None, None
    _exiting = threading.Lock()


def _arm_native(signals) -> None:
    if _native is not None:
        for sig in signals:
            _native.recsys_arm_signal(int(sig), int(signal.getsignal(sig) is _exit_on))


def _end_on_signals(read_fd: int) -> None:
    while True:
        for signum in os.read(read_fd, 64):
            if 0 < signum < signal.NSIG and signal.getsignal(signum) is _exit_on:
                _exit_now(signum)


def _exit_now(signum: int) -> None:
    """Ends the process at once, with one line and exit code 128 + ``signum``; called
    by the main thread's handler or the watching thread, whichever runs first.

    Its servers die with it (``PR_SET_PDEATHSIG``), and a checkpoint being written has no
    ``_COMPLETE`` marker yet, so it is never restored. It does not unwind with
    ``SystemExit``: a signal that lands while TensorFlow's C code calls back into Python
    can have its ``SystemExit`` turned into a printed ``SystemError`` and swallowed, and
    the run would train on. What an immediate exit skips, the removal of the run-scoped
    temporary directory (``TMPDIR``: autograph's files, staging directories such as
    ``recsys_dist_stage_*``), is done first (``recsys_dist/scratch.py``).
    """
    global _received_signal
    if not _exiting.acquire(blocking=False):
        threading.Event().wait()  # the other caller is ending the process
    _received_signal = signum
    try:
        scratch.remove()
        sys.stdout.flush()
        unfilter_before_exit()
        sys.stderr.write(f"error: stopped by {signal.Signals(signum).name}\n")
        sys.stderr.flush()
    finally:
        os._exit(128 + signum)


def termination_signal() -> int | None:
    """The signal :func:`terminate_on_signals` turned into ``SystemExit``, if one came.

    The ``SystemExit`` is raised wherever the main thread is when the signal arrives.
    Inside some of TensorFlow's C code it comes out as another error (such as a
    ``SystemError`` from ``nest`` while a step traces); the caller can still
    tell that the signal is what stopped it.
    """
    return _received_signal
