"""Atomic checkpoints (local and on moto's S3 server): markers, damage, signatures and
reading them back (``checkpoint/store.py``, ``checkpoint/signature.py`` and
``checkpoint/restore.py``).

The SIGKILL scenarios are in tests/cluster/test_fault_tolerance.py, the data position a
checkpoint records in tests/unit/train/test_data_position.py; these check the pieces.
"""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist import storage_io
from recsys_dist.checkpoint.restore import restore
from recsys_dist.checkpoint.signature import check_signature
from recsys_dist.checkpoint.store import (
    COMPLETE,
    DAMAGED,
    CheckpointError,
    CheckpointManager,
    DamagedCheckpoint,
    SavedCheckpoint,
    find_checkpoint,
)
from recsys_dist.storage_io import StorageError
from tests.support.configs import SMALL_FEATURES


def _checkpoint(value: float) -> tf.train.Checkpoint:
    return tf.train.Checkpoint(v=tf.Variable(tf.fill([3], value)))


def test_keeps_the_last_k_and_restores_the_newest_complete(tmp_path):
    manager = CheckpointManager(str(tmp_path), keep=2)
    assert manager.latest() is None
    for step in (10, 20, 30, 40):
        manager.save(_checkpoint(float(step)), step, {"n": step})
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["ckpt-000000000030", "ckpt-000000000040"]
    latest = manager.latest()
    assert latest.step == 40 and latest.state["n"] == 40 and latest.state["step"] == 40
    target = _checkpoint(0.0)
    target.read(latest.prefix).expect_partial()
    np.testing.assert_array_equal(target.v.numpy(), [40.0] * 3)


def test_a_pinned_checkpoint_outlives_keep_and_is_found_by_its_step(tmp_path):
    manager = CheckpointManager(str(tmp_path), keep=1)
    manager.pinned = {20}
    for step in (10, 20, 30, 40):
        manager.save(_checkpoint(float(step)), step, {"n": step})
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["ckpt-000000000020", "ckpt-000000000040"]
    assert manager.at_step(20).state["n"] == 20
    assert manager.at_step(30) is None
    manager.pinned = set()
    manager.save(_checkpoint(50.0), 50, {})
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["ckpt-000000000050"]


def test_a_checkpoint_without_its_marker_is_never_restored_and_is_cleaned_up(tmp_path):
    manager = CheckpointManager(str(tmp_path), keep=3)
    manager.save(_checkpoint(1.0), 100, {})
    torn = manager.save(_checkpoint(2.0), 200, {})
    os.remove(os.path.join(torn.directory, COMPLETE))  # as if killed before the marker
    (pathlib.Path(torn.directory) / "variables.index").write_bytes(b"half")
    assert manager.latest().step == 100
    manager.save(_checkpoint(3.0), 300, {})
    assert not os.path.exists(torn.directory)  # older than the newest complete: removed
    assert [c.step for c in manager.all_complete()] == [100, 300]


def test_a_save_at_an_existing_step_replaces_it(tmp_path):
    manager = CheckpointManager(str(tmp_path))
    manager.save(_checkpoint(1.0), 5, {"a": 1})
    manager.save(_checkpoint(2.0), 5, {"a": 2})
    assert manager.latest().state["a"] == 2


def _damage(directory: str, how: str) -> tuple[str, int]:
    """Truncates or flips a byte of the checkpoint's data file; (its name, its size)."""
    data = sorted(pathlib.Path(directory).glob("variables.data-*"))[-1]
    size = data.stat().st_size
    with open(data, "r+b") as handle:
        if how == "truncate":
            handle.truncate(size - 5)
        else:
            handle.seek(size // 2)
            byte = handle.read(1)
            handle.seek(size // 2)
            handle.write(bytes([byte[0] ^ 0xFF]))
    return data.name, size


@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_a_file_damaged_after_the_save_is_named_before_tensorflow_reads_it(tmp_path, how):
    manager = CheckpointManager(str(tmp_path))
    saved = manager.save(_checkpoint(4.0), 4, {})
    assert set(saved.state["files"]) == {"variables.index", "variables.data-00000-of-00001"}
    name, size = _damage(saved.directory, how)
    with pytest.raises(DamagedCheckpoint) as raised:
        restore(_checkpoint(0.0), manager.latest())
    problem = (
        f"{name} is {size - 5:,} bytes, {size:,} when it was written (truncated or "
        "changed after the save)"
        if how == "truncate"
        else f"{name} has CRC-32 "
    )
    assert str(raised.value).startswith(f"{saved.directory}: damaged checkpoint: {problem}")


def test_a_damaged_checkpoint_on_s3_is_named_after_the_download(s3_server, tmp_path):
    url = f"s3://{s3_server['bucket']}/runs/damaged"
    saved = CheckpointManager(url).save(_checkpoint(5.0), 5, {})
    key = "runs/damaged/checkpoints/ckpt-000000000005/variables.index"
    s3_server["client"].put_object(Bucket=s3_server["bucket"], Key=key, Body=b"short")
    with pytest.raises(
        DamagedCheckpoint,
        match=rf"^{saved.directory}: damaged checkpoint: "
        r"variables\.index is 5 bytes, ",
    ):
        restore(_checkpoint(0.0), CheckpointManager(url).latest())


def test_marking_a_checkpoint_damaged_keeps_its_files_and_says_why(tmp_path):
    manager = CheckpointManager(str(tmp_path))
    manager.save(_checkpoint(1.0), 1, {})
    damaged = manager.save(_checkpoint(2.0), 2, {})
    _damage(damaged.directory, "truncate")
    (directory, found), (_, older) = list(manager.newest_first())
    with pytest.raises(DamagedCheckpoint) as raised:
        restore(_checkpoint(0.0), found)
    manager.mark_damaged(raised.value)
    assert manager.latest().step == 1 and older.step == 1
    files = sorted(p.name for p in pathlib.Path(directory).iterdir())
    assert files == [DAMAGED, "state.json", "variables.data-00000-of-00001", "variables.index"]
    assert (pathlib.Path(directory) / DAMAGED).read_text() == f"{raised.value}\n"
    (pathlib.Path(older.directory) / "state.json").write_text("{not json")
    ((_, unreadable),) = manager.newest_first()
    assert isinstance(unreadable, DamagedCheckpoint)
    assert str(unreadable).startswith(
        f"{older.directory}: damaged checkpoint: state.json is unreadable"
    )


def test_a_checkpoint_without_a_manifest_is_read_without_the_check(tmp_path):
    manager = CheckpointManager(str(tmp_path))
    saved = manager.save(_checkpoint(6.0), 6, {})
    state = json.loads((pathlib.Path(saved.directory) / "state.json").read_text())
    del state["files"]  # as written before checkpoints had a manifest
    (pathlib.Path(saved.directory) / "state.json").write_text(json.dumps(state))
    target = _checkpoint(0.0)
    restore(target, manager.latest())
    np.testing.assert_array_equal(target.v.numpy(), [6.0] * 3)


def test_signature_mismatch_names_the_table(small_config):
    from recsys_dist.checkpoint.signature import model_signature
    from recsys_dist.config import load_config

    config = load_config(small_config())
    signature = model_signature(config)
    table = sorted(signature["tables"])[0]
    signature["tables"][table] = [signature["tables"][table][0] + 1, 4]
    saved = SavedCheckpoint("/m/checkpoints/ckpt-000000000007", 7, {"signature": signature})
    with pytest.raises(CheckpointError, match=rf"table '{table}' is \d+ x 4 in the checkpoint"):
        check_signature(saved, config)


def test_a_model_restoring_dynamic_tables_takes_the_checkpoints_shard_count(small_config):
    """A checkpoint of 3 dynamic shards fits a config of another ``cluster.ps``: the model
    that restores it is built with 3 shards (the servers hold them round-robin)."""
    import tensorflow as tf

    from recsys_dist.checkpoint.signature import model_signature, saved_dynamic_shards
    from recsys_dist.cluster.placement import placement_for
    from recsys_dist.config import load_config
    from recsys_dist.models.zoo import build_from_config

    features = {
        **SMALL_FEATURES,
        "tables": {
            **SMALL_FEATURES["tables"],
            "ads": {"kind": "dynamic", "dim": 4, "capacity_per_shard": 64},
        },
    }
    config = load_config(small_config(features))
    assert config.cluster.ps == 1
    saved = SavedCheckpoint(
        "/m/checkpoints/ckpt-000000000007",
        7,
        {"signature": model_signature(config, dynamic_shards=3)},
    )
    check_signature(saved, config)  # the shard count is not a mismatch
    assert saved_dynamic_shards(saved) == 3
    strategy = tf.distribute.get_strategy()
    model = build_from_config(config, placement_for(strategy, saved_dynamic_shards(saved)))
    assert {len(table.shards) for tables in model.dynamic_tables.values() for table in tables} == {
        3
    }
    assert {
        len(table.shards)
        for tables in build_from_config(config, placement_for(strategy)).dynamic_tables.values()
        for table in tables
    } == {1}  # a new run: one per parameter server (cluster.ps)
    hashed = SavedCheckpoint("/m/c", 1, {"signature": model_signature(load_config(small_config()))})
    assert saved_dynamic_shards(hashed) is None and saved_dynamic_shards(None) is None


def _s3_keys(s3_server, prefix: str) -> list[str]:
    listing = s3_server["client"].list_objects_v2(Bucket=s3_server["bucket"], Prefix=prefix)
    return sorted(o["Key"] for o in listing.get("Contents", []))


def test_checkpoints_on_s3_are_staged_uploaded_marker_last_and_downloaded(s3_server):
    url = f"s3://{s3_server['bucket']}/runs/ckpt-test"
    manager = CheckpointManager(url, keep=1)
    for step in (1, 2):
        manager.save(_checkpoint(float(step)), step, {"s": step})
    latest = CheckpointManager(url).latest()
    assert (latest.directory, latest.step, latest.state["s"]) == (
        f"{url}/checkpoints/ckpt-000000000002",
        2,
        2,
    )
    assert latest.state["upload_seconds"] >= 0
    target = _checkpoint(0.0)
    restore(target, latest)  # downloaded to a temporary directory first
    np.testing.assert_array_equal(target.v.numpy(), [2.0] * 3)
    keys = _s3_keys(s3_server, "runs/ckpt-test/")
    assert keys == [
        f"runs/ckpt-test/checkpoints/ckpt-000000000002/{name}"
        for name in ("_COMPLETE", "state.json", "variables.data-00000-of-00001", "variables.index")
    ]
    for given in (latest.directory, latest.prefix):  # --checkpoint DIR or its prefix
        assert find_checkpoint(url, given).step == 2


def test_a_cut_upload_leaves_no_complete_checkpoint_and_the_older_one_is_used(
    s3_server, monkeypatch
):
    url = f"s3://{s3_server['bucket']}/runs/cut-upload"
    manager = CheckpointManager(url, keep=3)
    manager.save(_checkpoint(1.0), 100, {})
    uploaded = []
    put = storage_io._put_file

    def cut_after_one_file(fs, local, remote):
        if uploaded:
            raise ConnectionResetError(104, "Connection reset by peer")
        uploaded.append(remote)
        put(fs, local, remote)

    monkeypatch.setattr(storage_io, "_put_file", cut_after_one_file)
    torn = f"{url}/checkpoints/ckpt-000000000200"
    with pytest.raises(
        StorageError, match=f"^{torn}/variables.*: cannot upload it: Connection reset by peer"
    ):
        manager.save(_checkpoint(2.0), 200, {})
    monkeypatch.undo()
    uploaded = _s3_keys(s3_server, "runs/cut-upload/checkpoints/ckpt-000000000200/")
    assert [k.rsplit("/", 1)[1] for k in uploaded] == ["variables.data-00000-of-00001"]
    latest = CheckpointManager(url).latest()
    assert latest.step == 100  # the torn step 200 does not count
    target = _checkpoint(0.0)
    restore(target, latest)
    np.testing.assert_array_equal(target.v.numpy(), [1.0] * 3)
    with pytest.raises(CheckpointError, match="no _COMPLETE marker"):
        find_checkpoint(url, torn)
    manager.save(_checkpoint(3.0), 300, {})  # the next save removes the torn one
    assert [c.step for c in manager.all_complete()] == [100, 300]
    assert not _s3_keys(s3_server, "runs/cut-upload/checkpoints/ckpt-000000000200/")


def test_an_unwritable_model_dir_is_named(s3_server, tmp_path):
    (tmp_path / "file").write_text("")
    for model_dir, reason in (
        ("s3://no-such-bucket-x/run", "The specified bucket does not exist"),
        (str(tmp_path / "file" / "run"), "Not a directory"),
    ):
        with pytest.raises((StorageError, CheckpointError)) as error:
            CheckpointManager(model_dir).save(_checkpoint(1.0), 1, {})
        assert str(error.value).startswith(f"{model_dir}/checkpoints/ckpt-000000000001")
        assert reason in str(error.value)
