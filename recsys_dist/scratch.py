"""A run-scoped temporary directory for every process of the package.

:func:`start` (called by every entry point) creates ``<temp dir>/recsys_dist-<pid>-<random>``
and points ``tempfile.tempdir`` and ``TMPDIR`` at it, so whatever this process and its
children write "to /tmp" goes there: autograph files, staging directories, temporary
copies. :func:`remove` deletes it at exit (``atexit``, and the exits that skip it call
it). A child started with this ``TMPDIR`` makes its own directory inside its parent's. A
process killed with SIGKILL removes nothing: its parent removes what it left
(:func:`remove_left_by`), and so does any later :func:`start` beside it
(:func:`remove_stale`). Only ``recsys_dist-<pid>-<random>`` directories are ever deleted,
and only when nobody holds their lock file.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Iterable
from types import FrameType

PREFIX = "recsys_dist-"
_NAME = re.compile(re.escape(PREFIX) + r"(\d+)-[a-z0-9_]{8}")
_LOCK_FILE = ".lock"

_dir: str | None = None
_owner: int | None = None  # the pid that created _dir (a forked child must not remove it)
_lock: int | None = None
_previous: tuple[str | None, str | None] = (None, None)  # TMPDIR, tempfile.tempdir
_lasting: list[str] = []  # lasting_directory()'s, removed when the command succeeds


def start() -> str:
    """Creates this process's run-scoped directory (once per process), removes the stale
    ones beside it, points ``tempfile`` and ``TMPDIR`` at it; returns its path."""
    global _dir, _owner, _lock, _previous
    if _dir is not None and _owner == os.getpid():
        return _dir
    base, env = tempfile.gettempdir(), os.environ.get("TMPDIR")
    left = _NAME.fullmatch(os.path.basename(base))
    if left is not None and int(left.group(1)) == os.getpid():
        # The directory of the program this process replaced (a restart from a thread):
        # its lock went with it; this one goes beside it, and it is removed below.
        base = env = os.path.dirname(base)
        tempfile.tempdir = None
    remove_stale(base)
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base)
    _lock = os.open(os.path.join(path, _LOCK_FILE), os.O_CREAT | os.O_WRONLY, 0o600)
    fcntl.flock(_lock, fcntl.LOCK_EX)
    _previous = (env, tempfile.tempdir)
    _dir, _owner = path, os.getpid()
    os.environ["TMPDIR"] = path
    tempfile.tempdir = path
    atexit.register(remove)
    return path


def lasting_directory(prefix: str) -> str:
    """A new directory for files a command tells the user about, which must outlive it
    when the command fails (the server logs of a job whose model dir is remote): in the
    system's temporary directory, outside every run-scoped one. A command that succeeds
    removes it (:func:`release_lasting`); one that fails, or is killed, leaves it."""
    base = tempfile.gettempdir()
    while _NAME.fullmatch(os.path.basename(base)):
        base = os.path.dirname(base)
    path = tempfile.mkdtemp(prefix=prefix, dir=base)
    _lasting.append(path)
    return path


def release_lasting() -> None:
    """Removes this process's :func:`lasting_directory` directories (its work succeeded,
    nobody needs their files)."""
    while _lasting:
        shutil.rmtree(_lasting.pop(), ignore_errors=True)


def directory() -> str | None:
    """This process's run-scoped directory, None before :func:`start`."""
    return _dir if _owner == os.getpid() else None


def remove() -> None:
    """Deletes this process's directory with everything in it and restores ``TMPDIR`` and
    ``tempfile.tempdir``. Safe to call more than once, and in a forked child (it does
    nothing there)."""
    global _dir, _owner, _lock
    if _dir is None or _owner != os.getpid():
        return
    path, _dir, _owner = _dir, None, None
    atexit.unregister(remove)
    env, tempdir = _previous
    if os.environ.get("TMPDIR") == path:
        if env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = env
    if tempfile.tempdir == path:
        tempfile.tempdir = tempdir
    shutil.rmtree(path, ignore_errors=True)
    if _lock is not None:
        os.close(_lock)
        _lock = None


def remove_stale(base: str) -> None:
    """Deletes the ``recsys_dist-<pid>-*`` directories in ``base`` whose process is gone."""
    _remove_gone(base, None)


def remove_left_by(pids: Iterable[int], base: str | None = None) -> None:
    """Deletes the directories that the processes ``pids`` (children this process started,
    with its ``TMPDIR``) left in ``base`` (default: this process's temporary directory)
    when they are gone; those of live ones are kept."""
    _remove_gone(base or tempfile.gettempdir(), {int(pid) for pid in pids})


def _remove_gone(base: str, pids: set[int] | None) -> None:
    """Deletes the ``recsys_dist-<pid>-*`` directories in ``base`` of a gone process (one
    of ``pids``, or any when None)."""
    try:
        entries = list(os.scandir(base))
    except OSError:
        return
    for entry in entries:
        match = _NAME.fullmatch(entry.name)
        if not match or not entry.is_dir(follow_symlinks=False):
            continue
        pid = int(match.group(1))
        if (pids is None or pid in pids) and _stale(entry.path, pid):
            shutil.rmtree(entry.path, ignore_errors=True)


def exit_on_signals(
    signals: Iterable[signal.Signals] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP),
) -> None:
    """For a process without a command's signal handling (a server task started with
    ``python -m``): the signals among ``signals`` that would end it without cleanup
    (default actions) end it with exit code 128 + signum after :func:`remove`."""
    for sig in signals:
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(sig, _exit)


def _exit(signum: int, frame: FrameType | None) -> None:
    try:
        remove()
    finally:
        os._exit(128 + signum)


def _stale(path: str, pid: int) -> bool:
    """The directory's process is dead here and nobody holds its lock (each process keeps
    its lock file locked with ``flock`` while it lives, so the directory of a live process
    in another pid namespace sharing the temporary directory is never taken for stale). A
    directory of this pid other than this process's own was left by the program this
    process replaced (``os.execv``, a restart): its lock went with that program."""
    if path == _dir or (pid != os.getpid() and _alive(pid)):
        return False
    try:
        handle = os.open(os.path.join(path, _LOCK_FILE), os.O_RDONLY)
    except FileNotFoundError:
        return True  # killed before it took its lock
    except OSError:
        return False
    try:
        fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return True
    except OSError:
        return False  # a live process elsewhere (another pid namespace) holds it
    finally:
        os.close(handle)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
