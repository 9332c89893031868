"""Checkpoint uploads to a misbehaving S3 (``tests/support/s3_faults.py`` in front of
moto): a transient error costs a retry; an upload cut at any file leaves the previous
checkpoint the newest complete one, whole (size and CRC of every file, values read back),
and the next save cleans the torn one up."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist.checkpoint.restore import restore
from recsys_dist.checkpoint.store import COMPLETE, CheckpointManager
from recsys_dist.storage_io import StorageError
from tests.support.s3_faults import Fault

SIZE = 300_000  # floats: a 1.2 MB data file, so a cut can fall inside it


def _checkpoint(value: float) -> tf.train.Checkpoint:
    return tf.train.Checkpoint(v=tf.Variable(tf.fill([SIZE], value)))


@pytest.fixture
def model_dir(fault_proxy, tmp_path):
    return f"s3://recsys-test/ckpt-faults/{tmp_path.name}"


def assert_newest_is_whole(manager: CheckpointManager, step: int) -> None:
    """The newest complete checkpoint is ``step``'s, its files match their manifest (the
    kill tests' byte-for-byte check) and it reads back the values saved."""
    latest = manager.latest()
    assert latest is not None and latest.step == step
    target = _checkpoint(0.0)
    restore(target, latest)  # downloads, checks every file's size and CRC-32, reads
    np.testing.assert_array_equal(target.v.numpy(), np.full([SIZE], float(step), np.float32))


def uploads(proxy) -> list[str]:
    """Keys PUT through the proxy, in order (faulted or not)."""
    return [e.path.rsplit("/", 1)[-1] for e in proxy.log if e.method == "PUT"]


def test_500_on_a_shard_upload_is_retried_and_the_save_completes(fault_proxy, model_dir):
    manager = CheckpointManager(model_dir)
    fault_proxy.faults = [Fault("500", method="PUT", key=r"/variables\.data-", times=1)]
    manager.save(_checkpoint(10.0), 10, {})
    assert [e.fault for e in fault_proxy.faulted()] == ["500"]
    assert_newest_is_whole(manager, 10)


def test_500_on_every_try_of_a_shard_fails_naming_it_and_keeps_the_previous(fault_proxy, model_dir):
    manager = CheckpointManager(model_dir)
    manager.save(_checkpoint(10.0), 10, {})
    fault_proxy.faults = [Fault("500", method="PUT", key=r"/variables\.data-")]
    with pytest.raises(StorageError) as failed:
        manager.save(_checkpoint(20.0), 20, {})
    shard = f"{model_dir}/checkpoints/ckpt-000000000020/variables.data-00000-of-00001"
    assert str(failed.value) == (
        f"{shard}: cannot upload it: 500 InternalError: We "
        "encountered an internal error. Please try again. "
        "(after 3 attempts)"
    )
    fault_proxy.faults = []
    assert_newest_is_whole(manager, 10)
    manager.save(_checkpoint(30.0), 30, {})
    assert [s.step for s in manager.all_complete()] == [10, 30]
    assert not any("ckpt-000000000020" in d for _, d, _ in manager._entries())  # cleaned up


def test_a_hang_on_the_commit_marker_is_bounded_and_never_completes_the_save(
    fault_proxy, model_dir
):
    manager = CheckpointManager(model_dir)
    manager.save(_checkpoint(10.0), 10, {})
    fault_proxy.faults = [Fault("hang", method="PUT", key=f"/{COMPLETE}$", times=1)]
    manager.save(_checkpoint(20.0), 20, {})  # the hang cut by the request timeout, retried
    assert [e.fault for e in fault_proxy.faulted()] == ["hang"]
    assert_newest_is_whole(manager, 20)
    fault_proxy.faults = [Fault("hang", method="PUT", key=f"/{COMPLETE}$")]
    marker = f"{model_dir}/checkpoints/ckpt-000000000030/{COMPLETE}"
    with pytest.raises(StorageError, match=f"^{marker}: cannot write it: Read timeout"):
        manager.save(_checkpoint(30.0), 30, {})
    fault_proxy.faults = []
    assert_newest_is_whole(manager, 20)


def test_an_upload_cut_at_any_file_keeps_the_previous_checkpoint(fault_proxy, model_dir):
    """Cuts at every file a save uploads, each at a random byte of its body (a reset every
    try, so retries run out); the seed is printed for a rerun."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"cut points seed: {seed}")
    rng = random.Random(seed)
    manager = CheckpointManager(model_dir, keep=1)
    manager.save(_checkpoint(1.0), 1, {})
    order = uploads(fault_proxy)
    assert order[-2:] == ["state.json", COMPLETE] and len(order) >= 4, order
    step = 1
    for cut, name in enumerate(order):
        fault_proxy.log.clear()
        fault_proxy.faults = [
            Fault("reset", method="PUT", key=f"/{name}$", bytes=rng.randrange(0, 64_000))
        ]
        with pytest.raises(StorageError, match=f"/ckpt-{cut + 2:012d}/{name}: cannot "):
            manager.save(_checkpoint(float(cut + 2)), cut + 2, {})
        assert uploads(fault_proxy)[:cut] == order[:cut], (seed, name)
        fault_proxy.faults = []
        assert_newest_is_whole(manager, step)
    manager.save(_checkpoint(99.0), 99, {})  # the next save cleans every torn one up
    assert [d.rsplit("/", 1)[-1] for _, d, _ in manager._entries()] == ["ckpt-000000000099"]
    assert_newest_is_whole(manager, 99)
