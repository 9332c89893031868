"""A checkpoint staged or written to a local disk that fills up (a 2 MB tmpfs mounted for
the test; skipped where mounting is not allowed): one error naming the directory and the
space needed, no partial files left, the previous checkpoint whole and restorable."""

from __future__ import annotations

import os
import subprocess
import tempfile

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist.checkpoint.restore import restore
from recsys_dist.checkpoint.store import CheckpointManager
from recsys_dist.storage_io import StorageError

SMALL, LARGE = 100_000, 1_000_000  # floats: 0.4 MB fits the 2 MB disk, 4 MB does not


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _checkpoint(size: int, value: float) -> tf.train.Checkpoint:
    return tf.train.Checkpoint(v=tf.Variable(tf.fill([size], value)))


def assert_previous_is_whole(manager: CheckpointManager) -> None:
    latest = manager.latest()
    assert latest is not None and latest.step == 1
    target = _checkpoint(SMALL, 0.0)
    restore(target, latest)
    np.testing.assert_array_equal(target.v.numpy(), np.ones([SMALL], np.float32))


def test_a_full_staging_disk_is_named_with_the_space_needed(small_disk, s3_server, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(small_disk))  # where StagedDir stages
    manager = CheckpointManager(f"s3://{s3_server['bucket']}/disk-full/{small_disk.parent.name}")
    manager.save(_checkpoint(SMALL, 1.0), 1, {})
    with pytest.raises(StorageError) as failed:
        manager.save(_checkpoint(LARGE, 2.0), 2, {})
    message = str(failed.value)
    assert message.startswith(f"{small_disk}/recsys_dist_stage_"), message
    assert (
        ": no space left on the device to write the checkpoint of step 2: it needs about 3.8 MB, "
        in message
        and message.endswith(" free there; staging is under TMPDIR: point TMPDIR at a larger disk")
    ), message
    assert os.listdir(small_disk) == []  # the partial staging files are gone
    assert_previous_is_whole(manager)


def test_a_full_local_model_dir_is_named_and_the_torn_save_removed(small_disk):
    manager = CheckpointManager(str(small_disk / "run"))
    manager.save(_checkpoint(SMALL, 1.0), 1, {})
    with pytest.raises(StorageError) as failed:
        manager.save(_checkpoint(LARGE, 2.0), 2, {})
    directory = small_disk / "run" / "checkpoints" / "ckpt-000000000002"
    assert str(failed.value).startswith(
        f"{directory}: no space left on the device to write the checkpoint of step 2: it "
        "needs about 3.8 MB, "
    ), str(failed.value)
    assert not directory.exists()
    assert sorted(os.listdir(small_disk / "run" / "checkpoints")) == ["ckpt-000000000001"]
    assert_previous_is_whole(manager)
