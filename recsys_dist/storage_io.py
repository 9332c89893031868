"""Run outputs on local disk, ``s3://`` or ``hdfs://``: files, markers and staged directories.

Every output a user can point at a path goes through this module: checkpoints and their
markers, ``train_result.json``, summaries, evaluation reports, SavedModel exports,
publications, manifests and decision files. It uses the fsspec filesystems of
:func:`recsys_dist.filesystems.filesystem` (S3 settings from the standard AWS
variables), so one code path serves every scheme; TensorFlow's own file system
(``tf.io.gfile``) is never used for outputs, because without tensorflow-io it has no
``s3://`` or ``hdfs://``.

TensorFlow itself writes only local files (checkpoints, SavedModels, summaries). For a
remote destination they are written to a local staging directory
(:class:`StagedDir`, under ``TMPDIR``) and uploaded file by file with
:func:`upload_dir`; a commit marker (a checkpoint's ``_COMPLETE``, an export's
``export.json``) is uploaded last, so a cut upload never looks complete.

Object stores have no directories: :func:`makedirs` does nothing there (fsspec's would
try to create a missing bucket), and a missing bucket shows up as an error on the first
write, naming the path. Every filesystem failure is raised as :class:`StorageError`
(``<path>: <reason>``), which the command line prints as one line.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import http.client
import os
import posixpath
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from fsspec.core import split_protocol

from recsys_dist.errors import RecsysError
from recsys_dist.filesystems import backoff_seconds, filesystem, is_remote, join, s3_max_attempts

T = TypeVar("T")

__all__ = [
    "StorageError",
    "StagedDir",
    "check_bucket",
    "check_writable",
    "download_dir",
    "errors_named",
    "exists",
    "is_remote",
    "isdir",
    "join",
    "listdir",
    "local_scratch",
    "makedirs",
    "open_file",
    "read_again_when_cut",
    "read_text",
    "remove",
    "rmtree",
    "space_named",
    "upload_dir",
    "write_text",
]

#: Schemes whose "directories" are only key prefixes.
_OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"})


class StorageError(RecsysError):
    """A path cannot be read or written (missing bucket, no permission, endpoint down).

    Attributes:
      reason: What the filesystem said, without the path.
    """

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = reason or message


def _errors_caught() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [OSError, http.client.HTTPException]
    with contextlib.suppress(ImportError):
        from botocore.exceptions import BotoCoreError, ClientError

        errors += [BotoCoreError, ClientError]
    with contextlib.suppress(ImportError):
        from aiohttp import ClientError as HttpClientError

        errors.append(HttpClientError)
    with contextlib.suppress(ImportError):
        from fsspec.exceptions import FSTimeoutError

        errors.append(FSTimeoutError)
    return tuple(errors)


def _cut_reads() -> tuple[type[BaseException], ...]:
    """Errors of an answer cut in its body (after its headers came), which botocore does
    not retry: the connection reset or timed out while the body was read."""
    errors: list[type[BaseException]] = [http.client.IncompleteRead, ConnectionError, TimeoutError]
    with contextlib.suppress(ImportError):
        from aiohttp import ClientPayloadError, ServerDisconnectedError

        errors += [ClientPayloadError, ServerDisconnectedError]
    with contextlib.suppress(ImportError):
        from fsspec.exceptions import FSTimeoutError

        errors.append(FSTimeoutError)
    with contextlib.suppress(ImportError):
        from botocore.exceptions import IncompleteReadError, ResponseStreamingError

        errors += [IncompleteReadError, ResponseStreamingError]
    return tuple(errors)


_ERRORS = _errors_caught()
_CUT_READS = _cut_reads()


def read_again_when_cut(read: Callable[[], T], path: str) -> T:
    """``read()``, called again (after a jittered backoff) while its answer is cut in its
    body, up to ``AWS_MAX_ATTEMPTS`` calls in all for a remote ``path``; the last error
    is raised."""
    attempts = s3_max_attempts() if is_remote(path) else 1
    for attempt in range(attempts):
        try:
            return read()
        except _CUT_READS:
            if attempt + 1 >= attempts:
                raise
            time.sleep(backoff_seconds(attempt))
    raise AssertionError("unreachable")


def _client_error(exc: BaseException):
    """The botocore ``ClientError`` behind ``exc`` (s3fs raises its own OSError from it)."""
    seen = 0
    while exc is not None and seen < 5:
        if type(exc).__name__ == "ClientError" and hasattr(exc, "response"):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _reason(exc: BaseException) -> str:
    answer = _client_error(exc)
    if answer is not None:
        error, meta = answer.response.get("Error", {}), answer.response.get("ResponseMetadata", {})
        status, code = meta.get("HTTPStatusCode"), error.get("Code", "")
        text = error.get("Message") or str(answer)
        attempts = meta.get("RetryAttempts") or 0
        tried = f" (after {attempts + 1} attempts)" if attempts else ""
        return f"{status} {code}: {text}{tried}".strip()[:300]
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, FileNotFoundError) and "bucket" not in str(exc).lower():
        return "No such file or directory"  # as the OS says it (s3fs gives only the key)
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


@contextlib.contextmanager
def errors_named(path: str, action: str = "") -> Iterator[None]:
    """Turns a filesystem error inside the block into ``StorageError("<path>: ...")``."""
    try:
        yield
    except StorageError:
        raise
    except _ERRORS as exc:
        what = f"cannot {action}: " if action else ""
        reason = _reason(exc)
        raise StorageError(f"{path}: {what}{reason}", reason) from None


def _object_store(path: str) -> bool:
    protocol, _ = split_protocol(path)
    return protocol in _OBJECT_STORES


def _fs(path: str, fresh: bool = False):
    """(filesystem, path in its terms); ``fresh`` drops cached listings of ``path`` first,
    so files another process wrote meanwhile are seen."""
    fs, stripped = filesystem(path)
    if fresh and is_remote(path):
        fs.invalidate_cache(stripped)
    return fs, stripped


def exists(path: str) -> bool:
    """Whether a file or directory (or, on an object store, a key prefix) is at ``path``."""
    with errors_named(path, "check it"):
        fs, stripped = _fs(path, fresh=True)
        return fs.exists(stripped)


def isdir(path: str) -> bool:
    """Whether ``path`` is a directory (on an object store: a prefix holding keys)."""
    with errors_named(path, "check it"):
        fs, stripped = _fs(path, fresh=True)
        return fs.isdir(stripped)


def listdir(path: str) -> list[str]:
    """Names (not paths) of the entries of directory ``path``; empty when there is no
    directory there."""
    with errors_named(path, "list it"):
        fs, stripped = _fs(path, fresh=True)
        try:
            entries = fs.ls(stripped, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
    return sorted(
        posixpath.basename(e.rstrip("/")) for e in entries if e.rstrip("/") != stripped.rstrip("/")
    )


def check_bucket(path: str) -> None:
    """On an object store, fails naming ``path`` when its bucket does not exist (called
    where nothing was found at ``path``, so that a missing bucket is not reported as a
    missing file); nothing to do elsewhere.

    Raises:
      StorageError: ``<path>: the bucket '<name>' does not exist (NoSuchBucket)``.
    """
    if not _object_store(path):
        return
    from fsspec.asyn import sync

    fs, stripped = _fs(path)
    bucket = stripped.split("/", 1)[0]
    with errors_named(path, "check its bucket"):
        try:
            sync(fs.loop, fs._call_s3, "head_bucket", Bucket=bucket)
        except FileNotFoundError:
            reason = f"the bucket '{bucket}' does not exist (NoSuchBucket)"
            raise StorageError(f"{path}: {reason}", reason) from None


def makedirs(path: str) -> None:
    """Creates directory ``path`` and its parents; nothing to do on an object store."""
    if _object_store(path):
        return
    with errors_named(path, "create the directory"):
        fs, stripped = _fs(path)
        fs.makedirs(stripped, exist_ok=True)


def read_text(path: str) -> str:
    """The text of file ``path`` (UTF-8).

    Raises:
      StorageError: it is missing or cannot be read.
    """
    with errors_named(path, "read it"):
        fs, stripped = _fs(path)
        data = read_again_when_cut(lambda: fs.cat_file(stripped), path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StorageError(f"{path}: not UTF-8 text ({exc})") from None


def write_text(path: str, text: str) -> None:
    """Writes ``text`` to file ``path`` whole: locally through a temporary file renamed into
    place, on an object store as one object (a reader sees the old or the new text)."""
    data = text.encode("utf-8")
    with errors_named(path, "write it"):
        if not is_remote(path):
            local = filesystem(path)[1]
            os.makedirs(os.path.dirname(local), exist_ok=True)
            temporary = f"{local}.tmp{os.getpid()}"
            with open(temporary, "wb") as handle:
                handle.write(data)
            os.replace(temporary, local)
            return
        makedirs(posixpath.dirname(path))
        fs, stripped = _fs(path)
        fs.pipe_file(stripped, data)


@contextlib.contextmanager
def open_file(path: str, mode: str = "rb") -> Iterator:
    """An open binary file at ``path`` (e.g. for Parquet); ``"wb"`` creates parents."""
    with errors_named(path, "open it"):
        if "w" in mode:
            makedirs(
                posixpath.dirname(path)
                if is_remote(path)
                else os.path.dirname(os.path.abspath(path))
            )
        fs, stripped = _fs(path)
        handle = fs.open(stripped, mode)
    with errors_named(path, "write it" if "w" in mode else "read it"), handle:
        yield handle


def remove(path: str) -> None:
    """Removes file ``path``, if it exists."""
    with errors_named(path, "remove it"):
        fs, stripped = _fs(path, fresh=True)
        try:
            fs.rm_file(stripped)
        except FileNotFoundError:
            pass


def rmtree(path: str) -> None:
    """Removes directory ``path`` and everything under it, if it exists."""
    with errors_named(path, "remove it"):
        fs, stripped = _fs(path, fresh=True)
        if not is_remote(path):
            shutil.rmtree(stripped, ignore_errors=not os.path.isdir(stripped))
        elif _object_store(path):
            # Key by key: fsspec's recursive rm would read "[", "*", "?" in a path as a glob.
            for key in fs.find(stripped):
                fs.rm_file(key)
        elif fs.exists(stripped):
            fs.rm(stripped, recursive=True)


def check_writable(directory: str, what: str) -> None:
    """Writes and removes a probe file in ``directory`` (created if missing).

    Lets a command fail at once, naming the path, before it starts a cluster whose work a
    later write would lose (a missing bucket, a read-only directory, bad credentials).

    Raises:
      StorageError: ``<directory>: cannot write <what> there: <reason>``.
    """
    probe = join(directory, f".write-check-{os.getpid()}")
    try:
        makedirs(directory)
        write_text(probe, "")
        remove(probe)
    except StorageError as exc:
        raise StorageError(
            f"{directory}: cannot write {what} there: {exc.reason}", exc.reason
        ) from None


def _put_file(fs, local: str, remote: str) -> None:
    """Uploads one file (the unit :func:`upload_dir` works in)."""
    fs.put_file(local, remote)


def upload_dir(local_dir: str, path: str, last: Sequence[str] = ()) -> list[str]:
    """Copies every file under ``local_dir`` to directory ``path``, the ``last`` ones (paths
    relative to ``local_dir``) after all others, in that order.

    Returns:
      The relative paths uploaded, in order.

    Raises:
      StorageError: a file could not be uploaded; the ones before it stay uploaded, and
        the ``last`` ones were not, so a marker among them is absent.
    """
    files = sorted(
        os.path.relpath(os.path.join(d, f), local_dir).replace(os.sep, "/")
        for d, _, names in os.walk(local_dir)
        for f in names
    )
    order = [f for f in files if f not in last] + [f for f in last if f in files]
    fs, root = _fs(path)
    made: set[str] = set()
    for relative in order:
        target = join(path, relative)
        with errors_named(target, "upload it"):
            parent = posixpath.dirname(join(root, relative))
            if not _object_store(path) and parent not in made:
                fs.makedirs(parent, exist_ok=True)
                made.add(parent)
            _put_file(fs, os.path.join(local_dir, relative), join(root, relative))
    return order


def download_dir(path: str, local_dir: str, select=None) -> list[str]:
    """Copies the files under directory ``path`` (those whose relative path ``select``
    accepts, if given) into ``local_dir``; returns their relative paths.

    Raises:
      StorageError: ``path`` cannot be listed or a file cannot be read.
    """
    with errors_named(path, "list it"):
        fs, root = _fs(path, fresh=True)
        found = [f for f in fs.find(root) if f.rstrip("/") != root.rstrip("/")]
    copied = []
    for remote in sorted(found):
        relative = posixpath.relpath(remote, root.rstrip("/"))
        if select is not None and not select(relative):
            continue
        local = os.path.join(local_dir, *relative.split("/"))
        os.makedirs(os.path.dirname(local), exist_ok=True)
        with errors_named(join(path, relative), "download it"):
            read_again_when_cut(functools.partial(fs.get_file, remote, local), path)
        copied.append(relative)
    return copied


def _no_space(exc: BaseException) -> bool:
    return (
        isinstance(exc, OSError) and exc.errno == errno.ENOSPC
    ) or "No space left on device" in str(exc)


def _megabytes(size: int) -> str:
    return f"{size / 2**20:,.1f} MB"


@contextlib.contextmanager
def space_named(
    directory: str, what: str, needed: Callable[[], int | None] = lambda: None, staged: bool = False
) -> Iterator[None]:
    """Turns a full local disk inside the block (``ENOSPC``, also as TensorFlow's
    ``ResourceExhaustedError``) into one :class:`StorageError` naming ``directory``, the
    space ``needed()`` (bytes; None when unknown) and the space free there.

    The caller removes what was written: a :class:`StagedDir` removes itself.
    """
    try:
        yield
    except Exception as exc:
        if not _no_space(exc):
            raise
        probe = directory
        while probe and not os.path.exists(probe):
            probe = os.path.dirname(probe)
        free = shutil.disk_usage(probe or "/").free
        size = needed()
        need = f"it needs about {_megabytes(size)}, " if size else ""
        hint = (
            "; staging is under TMPDIR: point TMPDIR at a larger disk"
            if staged
            else "; free some space or choose another directory"
        )
        raise StorageError(
            f"{directory}: no space left on the device to {what}: {need}"
            f"{_megabytes(free)} free there{hint}",
            "No space left on device",
        ) from None


def local_scratch(prefix: str) -> str:
    """A new empty directory on local disk (under ``TMPDIR``) for staged or downloaded files."""
    return tempfile.mkdtemp(prefix=prefix)


class StagedDir:
    """A local directory that stands in for ``path`` while TensorFlow writes into it.

    For a local ``path`` it is ``path`` itself (created if missing) and :meth:`sync` does
    nothing. For a remote one it is a new temporary directory (under ``TMPDIR``) that
    :meth:`sync` uploads to ``path``; :meth:`close` (or leaving the ``with`` block)
    removes it.

    Args:
      path: The destination directory, local or remote.
    """

    def __init__(self, path: str):
        self.path = path
        self.remote = is_remote(path)
        if self.remote:
            self.local = local_scratch("recsys_dist_stage_")
        else:
            self.local = filesystem(path)[1]  # also for file:// paths
            with errors_named(path, "create the directory"):
                os.makedirs(self.local, exist_ok=True)

    def sync(self, last: Sequence[str] = ()) -> list[str]:
        """Uploads the staged files to ``path`` (``last`` ones last); see :func:`upload_dir`."""
        return upload_dir(self.local, self.path, last) if self.remote else []

    def close(self) -> None:
        if self.remote:
            shutil.rmtree(self.local, ignore_errors=True)

    def __enter__(self) -> StagedDir:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
