"""Atomic checkpoints in a model directory, local or ``s3://``.

Layout::

    MODEL_DIR/checkpoints/ckpt-000000001200/
        variables.index, variables.data-*   # tf.train.Checkpoint: whole tables, dense
                                            # weights, optimizer slots, global step
        state.json                          # data position, model signature, figures,
                                            # size and CRC-32 of each variables file
        _COMPLETE                           # written last

Only a checkpoint with ``_COMPLETE`` is restored, so a save cut short (S3 has no atomic
rename) never is; a file damaged later fails its size or CRC-32 check and the checkpoint
is marked ``_DAMAGED``. Tables are saved whole, so a checkpoint restores into any number
of parameter servers. A remote model dir is staged locally on the coordinator and
uploaded. See docs/fault-tolerance.md and
docs/multi-machine.md#model-directories-on-s3-or-hdfs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import posixpath
import re
import shutil
import time
import zlib
from collections.abc import Iterator

import tensorflow as tf

from recsys_dist import storage_io
from recsys_dist.errors import RecsysError, op_error_reason

CHECKPOINTS = "checkpoints"
VARIABLES = "variables"
STATE = "state.json"
COMPLETE = "_COMPLETE"
DAMAGED = "_DAMAGED"
_NAME = re.compile(r"^ckpt-(\d{12})$")


class CheckpointError(RecsysError):
    """A checkpoint cannot be used by this run."""


class DamagedCheckpoint(CheckpointError):
    """A complete checkpoint whose files changed after they were written."""

    def __init__(self, directory: str, problem: str):
        self.directory = directory
        super().__init__(f"{directory}: damaged checkpoint: {problem}")


@dataclasses.dataclass(frozen=True)
class SavedCheckpoint:
    """A complete checkpoint.

    Attributes:
      directory: Its directory.
      step: Global step it holds.
      state: Its ``state.json``.
    """

    directory: str
    step: int
    state: dict

    @property
    def prefix(self) -> str:
        """The ``tf.train.Checkpoint`` prefix to read."""
        return _join(self.directory, VARIABLES)


_join = storage_io.join


def io_options() -> tf.train.CheckpointOptions:
    """Options that make this process read and write every checkpoint file (for files on
    this process's local disk: a staged save, a downloaded checkpoint).

    The I/O device is this process's own CPU: ``/job:chief/replica:0/task:0/device:CPU:0``
    on a coordinator (``ParameterServerStrategy`` names its job ``chief``), the local
    host's otherwise. Both the staged save and the read of a downloaded checkpoint need
    it: without it each parameter server would write or look for its shards at the path
    on its own machine.
    """
    return tf.train.CheckpointOptions(experimental_io_device=tf.constant(0).device)


def tf_reason(exc: tf.errors.OpError) -> str:
    return op_error_reason(exc.message, type(exc).__name__)


def _crc32(path: str) -> str:
    crc = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            crc = zlib.crc32(chunk, crc)
    return f"{crc:08x}"


def file_manifest(local_dir: str) -> dict[str, dict]:
    """``{name: {"bytes": size, "crc32": hex}}`` of the variables files in ``local_dir``."""
    return {
        name: {
            "bytes": os.path.getsize(os.path.join(local_dir, name)),
            "crc32": _crc32(os.path.join(local_dir, name)),
        }
        for name in sorted(os.listdir(local_dir))
        if name.startswith(VARIABLES + ".")
    }


def verify_files(saved: SavedCheckpoint, local_dir: str) -> None:
    """Checks the variables files in ``local_dir`` (``saved``'s own directory, or where it
    was downloaded) against the manifest in its ``state.json``.

    Raises:
      DamagedCheckpoint: a file is missing, or its size or CRC-32 differs.
    """
    expected = saved.state.get("files")
    if expected is None:
        return  # written before checkpoints had a manifest
    for name, want in sorted(expected.items()):
        path = os.path.join(local_dir, name)
        if not os.path.exists(path):
            raise DamagedCheckpoint(saved.directory, f"{name} is missing")
        size = os.path.getsize(path)
        if size != want["bytes"]:
            raise DamagedCheckpoint(
                saved.directory,
                f"{name} is {size:,} bytes, "
                f"{want['bytes']:,} when it was written (truncated or "
                "changed after the save)",
            )
        if _crc32(path) != want["crc32"]:
            raise DamagedCheckpoint(
                saved.directory,
                f"{name} has CRC-32 {_crc32(path)}, "
                f"{want['crc32']} when it was written (changed after "
                "the save)",
            )


def _remove(directory: str) -> None:
    storage_io.remove(_join(directory, COMPLETE))  # un-complete first: a cut cleanup
    storage_io.rmtree(directory)  # leaves no torn checkpoint


@contextlib.contextmanager
def local_prefix(saved: SavedCheckpoint | str) -> Iterator[str]:
    """A local path of a checkpoint's variables prefix, to read with TensorFlow.

    A local checkpoint is read in place. A remote one (``s3://``, ``hdfs://``) is
    downloaded into a temporary directory, removed when the block ends.

    Raises:
      CheckpointError: the remote checkpoint has no variables files.
      StorageError: they cannot be downloaded.
    """
    prefix = saved.prefix if isinstance(saved, SavedCheckpoint) else saved
    if not storage_io.is_remote(prefix):
        if isinstance(saved, SavedCheckpoint):
            verify_files(saved, storage_io.filesystem(saved.directory)[1])
        yield prefix
        return
    directory, name = posixpath.split(prefix.rstrip("/"))
    scratch = storage_io.local_scratch("recsys_dist_restore_")
    try:
        copied = storage_io.download_dir(
            directory, scratch, select=lambda relative: relative.startswith(name + ".")
        )
        if not copied:
            raise CheckpointError(
                f"{prefix}: cannot read the checkpoint: no {name}.* files in {directory}"
            )
        if isinstance(saved, SavedCheckpoint):
            verify_files(saved, scratch)
        yield os.path.join(scratch, name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class CheckpointManager:
    """Saves, finds and prunes the checkpoints of one model directory.

    Args:
      model_dir: The run's directory (local path or ``s3://``).
      keep: Complete checkpoints to keep.

    Attributes:
      pinned: Steps whose checkpoints are kept beyond ``keep`` (early stopping's best pass).
    """

    def __init__(self, model_dir: str, keep: int = 3):
        self.model_dir = model_dir
        self.root = _join(model_dir, CHECKPOINTS)
        self.keep = keep
        self.pinned: set[int] = set()

    def _entries(self) -> list[tuple[int, str, bool]]:
        """(step, directory, complete) of every checkpoint directory, oldest first."""
        entries = []
        for name in storage_io.listdir(self.root):
            match = _NAME.match(name)
            if match:
                directory = _join(self.root, name)
                complete = storage_io.exists(_join(directory, COMPLETE))
                entries.append((int(match.group(1)), directory, complete))
        return sorted(entries)

    def all_complete(self) -> list[SavedCheckpoint]:
        return [
            self._load(step, directory) for step, directory, complete in self._entries() if complete
        ]

    def latest(self) -> SavedCheckpoint | None:
        """The newest complete checkpoint, or None."""
        for step, directory, complete in reversed(self._entries()):
            if complete:
                return self._load(step, directory)
        return None

    def at_step(self, step: int) -> SavedCheckpoint | None:
        """The complete checkpoint of global step ``step``, or None."""
        for entry_step, directory, complete in self._entries():
            if entry_step == step and complete:
                return self._load(step, directory)
        return None

    def _load(self, step: int, directory: str) -> SavedCheckpoint:
        path = _join(directory, STATE)
        try:
            state = json.loads(storage_io.read_text(path))
        except (storage_io.StorageError, ValueError) as exc:
            raise DamagedCheckpoint(
                directory,
                f"{STATE} is unreadable ({exc}); the "
                "checkpoint is marked complete, so its files were changed "
                "after it was written",
            ) from None
        return SavedCheckpoint(directory, step, state)

    def newest_first(self) -> Iterator[tuple[str, SavedCheckpoint | DamagedCheckpoint]]:
        """(directory, checkpoint) of every complete checkpoint, newest first; the
        checkpoint is a :class:`DamagedCheckpoint` when its ``state.json`` is unreadable."""
        for step, directory, complete in reversed(self._entries()):
            if complete:
                try:
                    yield directory, self._load(step, directory)
                except DamagedCheckpoint as exc:
                    yield directory, exc

    def mark_damaged(self, damage: DamagedCheckpoint) -> None:
        """Takes a damaged checkpoint out of use, keeping its files: its ``_COMPLETE``
        marker becomes ``_DAMAGED``, which holds the reason. The files stay until a save at
        its step or a newer complete checkpoint replaces it, as for a torn save."""
        storage_io.write_text(_join(damage.directory, DAMAGED), f"{damage}\n")
        storage_io.remove(_join(damage.directory, COMPLETE))

    def save(self, checkpoint: tf.train.Checkpoint, step: int, state: dict) -> SavedCheckpoint:
        """Writes a checkpoint at ``step``; returns it once it is complete.

        The variables go first (to a remote model dir: written locally, then uploaded),
        then ``state.json``, then the ``_COMPLETE`` marker; then older checkpoints beyond
        ``keep`` (and torn ones) are removed.

        Raises:
          CheckpointError: TensorFlow cannot write the variables.
          StorageError: a file cannot be written or uploaded (no marker is written).
        """
        directory = _join(self.root, f"ckpt-{step:012d}")
        _remove(directory)  # a torn save at this step from an earlier attempt
        start = time.perf_counter()
        with storage_io.StagedDir(directory) as staged:
            try:
                with storage_io.space_named(
                    staged.local,
                    f"write the checkpoint of step {step}",
                    lambda: self._bytes_needed(checkpoint),
                    staged=staged.remote,
                ):
                    # A staged save is on this process's disk: it writes every shard itself.
                    # A local model dir is not staged: each server writing its own shards
                    # in place is the faster save.
                    checkpoint.write(
                        os.path.join(staged.local, VARIABLES),
                        options=io_options() if staged.remote else None,
                    )
            except storage_io.StorageError:
                if not staged.remote:
                    _remove(directory)  # the partial files (staged ones go with the stage)
                raise
            except tf.errors.OpError as exc:
                raise CheckpointError(
                    f"{directory}: cannot write the checkpoint: {tf_reason(exc)}"
                ) from None
            written = time.perf_counter()
            files = file_manifest(staged.local)
            staged.sync()
        state = dict(
            state,
            step=step,
            saved_at=time.time(),
            save_seconds=round(written - start, 3),
            files=files,
        )
        if staged.remote:
            state["upload_seconds"] = round(time.perf_counter() - written, 3)
        storage_io.write_text(_join(directory, STATE), json.dumps(state, indent=1))
        storage_io.write_text(_join(directory, COMPLETE), f"{step}\n")
        self._prune()
        return SavedCheckpoint(directory, step, state)

    def _bytes_needed(self, checkpoint: tf.train.Checkpoint) -> int | None:
        """About what a checkpoint takes: the variables' sizes (slots included), or the
        newest complete checkpoint's files if larger (tables that are not variables)."""
        estimate = variable_bytes(checkpoint)
        with contextlib.suppress(CheckpointError, storage_io.StorageError):
            latest = self.latest()
            if latest is not None:
                estimate = max(
                    estimate, sum(f["bytes"] for f in (latest.state.get("files") or {}).values())
                )
        return estimate or None

    def _prune(self) -> None:
        entries = self._entries()
        complete = [e for e in entries if e[2]]
        newest = complete[-1][0] if complete else -1
        keep = {e[1] for e in complete[-self.keep :]} | {
            e[1] for e in complete if e[0] in self.pinned
        }
        for step, directory, is_complete in entries:
            if directory in keep:
                continue
            if is_complete or step < newest:
                _remove(directory)


def variable_bytes(root: tf.Module | tf.train.Checkpoint) -> int:
    """Bytes of every variable ``root`` tracks (slots included): about what a checkpoint
    or a SavedModel of it needs on disk."""
    total = 0
    for item in tf.train.TrackableView(root).descendants():
        if isinstance(item, tf.Variable) and item.shape.is_fully_defined():
            total += item.shape.num_elements() * item.dtype.size
    return total


def find_checkpoint(model_dir: str, checkpoint: str | None = None) -> SavedCheckpoint:
    """``checkpoint`` if given, else the newest complete checkpoint of ``model_dir``.

    Args:
      model_dir: The training run's directory.
      checkpoint: A checkpoint directory (``.../checkpoints/ckpt-000000000123``) or its
        variables prefix (``.../ckpt-000000000123/variables``).

    Raises:
      CheckpointError: No complete checkpoint in ``model_dir``, or ``checkpoint`` does not
        exist or is not complete (no ``_COMPLETE`` marker).
    """
    if checkpoint is None:
        manager = CheckpointManager(model_dir)
        saved = manager.latest()
        if saved is None:
            raise CheckpointError(
                f"{model_dir}: no complete checkpoint in {manager.root}; "
                "train the model first (recsys-dist train)"
            )
        return saved
    path = checkpoint.rstrip("/")
    directory = path if storage_io.isdir(path) else posixpath.dirname(path)
    if not storage_io.isdir(directory) or not (
        _NAME.match(posixpath.basename(directory))
        or storage_io.exists(_join(directory, STATE))
        or storage_io.exists(_join(directory, COMPLETE))
    ):
        raise CheckpointError(
            f"{checkpoint}: no such checkpoint (expected a checkpoint "
            "directory like MODEL_DIR/checkpoints/ckpt-000000000123 or its "
            "'variables' prefix)"
        )
    if not storage_io.exists(_join(directory, COMPLETE)):
        raise CheckpointError(
            f"{directory}: not a complete checkpoint (no {COMPLETE} marker: "
            "its save was cut short or is still running)"
        )
    match = _NAME.match(posixpath.basename(directory))
    manager = CheckpointManager(posixpath.dirname(posixpath.dirname(directory)))
    return manager._load(int(match.group(1)) if match else -1, directory)


def checkpoint_at(path: str, what: str) -> SavedCheckpoint:
    """The checkpoint ``path`` names: the newest complete one of a model dir, or a
    checkpoint directory (or its ``variables`` prefix).

    Raises:
      CheckpointError: naming ``what`` (e.g. ``--warm-start``) and ``path``, when there is
        no complete checkpoint there.
    """
    path = path.rstrip("/")
    try:
        if storage_io.isdir(_join(path, CHECKPOINTS)):
            return find_checkpoint(path)
        return find_checkpoint(path, path)
    except DamagedCheckpoint:
        raise
    except CheckpointError as exc:
        raise CheckpointError(
            f"{what}: {exc} (give a model dir holding {CHECKPOINTS}/, or "
            "one of its checkpoint directories)"
        ) from None
