"""Run outputs through fsspec (``recsys_dist/storage_io.py``), locally and on moto's S3
server: text files, listings, staged directories, ordered uploads and clear errors."""

from __future__ import annotations

import os
import re

import pytest

from recsys_dist import storage_io
from recsys_dist.storage_io import StorageError


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "out")
    server = request.getfixturevalue("s3_server")
    # The test's name has brackets, which fsspec reads as a glob unless told not to.
    return f"s3://{server['bucket']}/storage-io/{request.node.name}"


def test_text_files_listings_and_removal(root):
    assert not storage_io.exists(root) and storage_io.listdir(root) == []
    storage_io.write_text(f"{root}/a/state.json", '{"x": 1}')
    storage_io.write_text(f"{root}/a/_COMPLETE", "7\n")
    storage_io.write_text(f"{root}/b.txt", "héllo")
    assert storage_io.read_text(f"{root}/b.txt") == "héllo"
    storage_io.write_text(f"{root}/b.txt", "again")  # replaced whole
    assert storage_io.read_text(f"{root}/b.txt") == "again"
    assert storage_io.listdir(root) == ["a", "b.txt"]
    assert storage_io.listdir(f"{root}/a") == ["_COMPLETE", "state.json"]
    assert storage_io.isdir(f"{root}/a") and not storage_io.isdir(f"{root}/b.txt")
    storage_io.remove(f"{root}/a/_COMPLETE")
    storage_io.remove(f"{root}/a/_COMPLETE")  # missing: nothing to do
    assert not storage_io.exists(f"{root}/a/_COMPLETE") and storage_io.exists(f"{root}/a")
    storage_io.rmtree(f"{root}/a")
    storage_io.rmtree(f"{root}/a")
    assert storage_io.listdir(root) == ["b.txt"]
    with pytest.raises(
        StorageError,
        match="^" + re.escape(f"{root}/nothing: cannot read it: No such file or directory"),
    ):
        storage_io.read_text(f"{root}/nothing")


def test_binary_files_through_open_file(root):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = f"{root}/p/predictions.parquet"
    with storage_io.open_file(path, "wb") as handle:
        pq.write_table(pa.table({"x": [1, 2, 3]}), handle)
    with storage_io.open_file(path) as handle:
        assert pq.read_table(handle).column("x").to_pylist() == [1, 2, 3]


def test_upload_puts_the_marker_last_and_download_selects(root, tmp_path, monkeypatch):
    local = tmp_path / "staged"
    (local / "sub").mkdir(parents=True)
    for name in ("_COMPLETE", "b.data", "a.index", "sub/c.txt", "state.json"):
        (local / name).write_text(name)
    order = []
    put = storage_io._put_file
    monkeypatch.setattr(
        storage_io,
        "_put_file",
        lambda fs, lpath, rpath: (order.append(os.path.basename(rpath)), put(fs, lpath, rpath)),
    )
    done = storage_io.upload_dir(str(local), root, last=["state.json", "_COMPLETE"])
    assert done == ["a.index", "b.data", "sub/c.txt", "state.json", "_COMPLETE"]
    assert order == ["a.index", "b.data", "c.txt", "state.json", "_COMPLETE"]
    assert storage_io.read_text(f"{root}/sub/c.txt") == "sub/c.txt"
    back = tmp_path / "back"
    copied = storage_io.download_dir(root, str(back), select=lambda r: not r.startswith("_"))
    assert copied == ["a.index", "b.data", "state.json", "sub/c.txt"]
    assert (back / "sub" / "c.txt").read_text() == "sub/c.txt"
    assert not (back / "_COMPLETE").exists()


def test_staged_dir_is_the_path_itself_locally_and_a_temporary_copy_remotely(root):
    with storage_io.StagedDir(f"{root}/model") as staged:
        with open(os.path.join(staged.local, "saved_model.pb"), "w") as handle:
            handle.write("pb")
        assert staged.remote == root.startswith("s3://")
        assert (staged.local == f"{root}/model") != staged.remote  # local: in place
        staged.sync()
    assert storage_io.read_text(f"{root}/model/saved_model.pb") == "pb"
    assert os.path.exists(staged.local) != staged.remote  # the temporary copy is gone


def test_a_missing_bucket_is_named(s3_server):
    path = "s3://no-such-bucket-here/runs/a"
    with pytest.raises(StorageError) as error:
        storage_io.check_writable(path, "the run's checkpoints")
    assert str(error.value) == (
        f"{path}: cannot write the run's checkpoints there: The specified bucket does not exist"
    )
    with pytest.raises(
        StorageError, match=f"^{path}/x.json: cannot write it: The specified bucket does not exist"
    ):
        storage_io.write_text(f"{path}/x.json", "{}")
    assert not storage_io.exists(path) and storage_io.listdir(path) == []


def test_an_unwritable_local_directory_is_named(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    path = str(tmp_path / "file" / "run")
    with pytest.raises(StorageError, match=f"^{path}: cannot write the report there: "):
        storage_io.check_writable(path, "the report")
    assert storage_io.listdir(path) == [] and not storage_io.exists(path)


def test_a_dead_endpoint_fails_fast_and_names_the_path(monkeypatch):
    import socket
    import time

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    start = time.perf_counter()
    with pytest.raises(StorageError, match=r"^s3://b/run/x: cannot write it: .*endpoint"):
        storage_io.write_text("s3://b/run/x", "1")
    assert time.perf_counter() - start < 60


def test_file_urls_are_local_paths(tmp_path):
    from recsys_dist.checkpoint.store import CheckpointManager

    url = f"file://{tmp_path}/run"
    with storage_io.StagedDir(f"{url}/train") as staged:
        assert staged.local == str(tmp_path / "run" / "train") and not staged.remote
    saved = CheckpointManager(url).save(_checkpoint(), 3, {})
    assert (tmp_path / "run/checkpoints/ckpt-000000000003/_COMPLETE").is_file()
    assert CheckpointManager(url).latest().step == saved.step == 3


def _checkpoint():
    import tensorflow as tf

    return tf.train.Checkpoint(v=tf.Variable([1.0, 2.0]))
