"""Complete partitions under a data root, locally and on moto's S3 server: the marker
decides, hourly and daily layouts, directories that are not partitions are skipped, and a
marked partition without files is refused by name."""

from __future__ import annotations

import datetime

import pytest

from recsys_dist import storage_io
from recsys_dist.data.partitions import complete_partitions
from recsys_dist.errors import DataError


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "data")
    server = request.getfixturevalue("s3_server")
    return f"s3://{server['bucket']}/partitions/{request.node.name}"


def put(root: str, name: str, files: dict[str, str]) -> None:
    for file, text in files.items():
        storage_io.write_text(f"{root}/{name}/{file}", text)


def test_hourly_partitions_complete_only_with_their_marker(root):
    put(root, "dt=2026-01-02/hour=00", {"a.parquet": "xx", "_SUCCESS": ""})
    put(root, "dt=2026-01-01/hour=23", {"b.parquet": "yyy", "a.parquet": "x", "_SUCCESS": ""})
    put(root, "dt=2026-01-02/hour=01", {"a.parquet": "x"})  # still being written
    put(root, "dt=2026-01-02/hour=24", {"a.parquet": "x", "_SUCCESS": ""})  # not an hour
    put(root, "dt=2026-01-02/hour=7", {"a.parquet": "x", "_SUCCESS": ""})  # not HH
    put(root, "dt=2026-13-02/hour=01", {"a.parquet": "x", "_SUCCESS": ""})  # not a date
    put(root, "other/hour=01", {"a.parquet": "x", "_SUCCESS": ""})
    complete, pending = complete_partitions(root)
    assert [p.name for p in complete] == ["dt=2026-01-01/hour=23", "dt=2026-01-02/hour=00"]
    assert pending == ["dt=2026-01-02/hour=01"]
    first = complete[0]
    assert first.start == datetime.datetime(2026, 1, 1, 23)
    assert [f.rsplit("/", 1)[1] for f in first.files] == ["a.parquet", "b.parquet"]
    assert first.sizes == (1, 3) and first.run_name == "2026-01-01T23"
    assert all(f.startswith(root) for f in first.files)
    assert abs(first.marked_at - datetime.datetime.utcnow()) < datetime.timedelta(minutes=5)


def test_fingerprint_changes_with_the_files(root):
    put(root, "dt=2026-01-01/hour=00", {"a.parquet": "xx", "_SUCCESS": ""})
    before = complete_partitions(root)[0][0].fingerprint
    assert complete_partitions(root)[0][0].fingerprint == before
    put(root, "dt=2026-01-01/hour=00", {"a.parquet": "xxx"})
    assert complete_partitions(root)[0][0].fingerprint != before


def test_daily_partitions_and_another_marker(root):
    put(root, "dt=2026-01-01", {"a.parquet": "x", "READY": ""})
    put(root, "dt=2026-01-02", {"a.parquet": "x", "_SUCCESS": ""})
    complete, pending = complete_partitions(root, hourly=False, marker="READY")
    assert [p.name for p in complete] == ["dt=2026-01-01"] and pending == ["dt=2026-01-02"]
    assert complete[0].run_name == "2026-01-01"


def test_refusals_name_the_path(root):
    with pytest.raises(DataError, match="no such directory .the root of the partitions"):
        complete_partitions(root + "/missing")
    put(root, "dt=2026-01-01/hour=03", {"_SUCCESS": "", "notes.txt": "x"})
    with pytest.raises(DataError) as caught:
        complete_partitions(root)
    assert "dt=2026-01-01/hour=03: marked complete (_SUCCESS) but holds no Parquet file" in str(
        caught.value
    )


def test_copy_partition_copies_the_files_and_then_the_marker(root, tmp_path):
    from recsys_dist.data.partitions import copy_partition

    source = str(tmp_path / "source")
    put(source, "dt=2026-01-01/hour=02", {"a.parquet": "xx", "b.parquet": "yyy", "_SUCCESS": ""})
    copy_partition(source, root, "dt=2026-01-01/hour=02", marker="READY")
    (partition,), pending = complete_partitions(root, marker="READY")
    assert partition.sizes == (2, 3) and pending == []
    assert storage_io.read_text(partition.files[1]) == "yyy"
