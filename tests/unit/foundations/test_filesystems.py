"""Filesystems of every non-tensor path (``recsys_dist/filesystems.py``): local paths,
``s3://`` settings from the AWS variables (and the rejection of the old ``S3_ENDPOINT``),
and the path helpers that keep a protocol."""

from __future__ import annotations

import pytest

from recsys_dist import filesystems
from recsys_dist.errors import ConfigError


@pytest.fixture
def aws(monkeypatch):
    for name in ("S3_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_local_path_is_made_absolute_on_the_local_filesystem(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for path in ("data/x.parquet", "file://data/x.parquet", f"{tmp_path}/data/x.parquet"):
        fs, stripped = filesystems.filesystem(path)
        assert fs.protocol[0] == "file" and stripped == f"{tmp_path}/data/x.parquet"
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.parquet").write_text("x")
    fs, stripped = filesystems.filesystem("data")
    assert fs.ls(stripped, detail=False) == [f"{tmp_path}/data/x.parquet"]


def test_s3_takes_endpoint_region_timeouts_and_retries_from_the_environment(aws):
    aws.setenv("AWS_ENDPOINT_URL", "127.0.0.1:9000")
    aws.setenv("AWS_REGION", "eu-west-3")
    fs, stripped = filesystems.filesystem("s3://bucket/data/dt=2026-01-01")
    assert stripped == "bucket/data/dt=2026-01-01"
    assert fs.client_kwargs == {
        "region_name": "eu-west-3",
        "endpoint_url": "https://127.0.0.1:9000",
    }
    connect, request = filesystems.s3_timeouts()
    assert fs.config_kwargs == {
        "connect_timeout": connect,
        "read_timeout": request,
        "retries": {"total_max_attempts": filesystems.s3_max_attempts(), "mode": "standard"},
    }
    assert fs.retries == 1  # botocore's attempts are the only ones
    aws.setenv("AWS_ENDPOINT_URL_S3", "http://s3.local:9000")  # the S3-specific one wins
    fs, _ = filesystems.filesystem("s3a://bucket/x")
    assert fs.client_kwargs["endpoint_url"] == "http://s3.local:9000"


def test_without_settings_s3_uses_the_default_endpoint(aws):
    fs, _ = filesystems.filesystem("s3://bucket/x")
    assert fs.client_kwargs == {}


def test_the_old_s3_endpoint_variable_is_refused_with_the_new_name(aws):
    aws.setenv("S3_ENDPOINT", "127.0.0.1:9000")
    with pytest.raises(ConfigError) as raised:
        filesystems.filesystem("s3://bucket/x")
    assert str(raised.value) == (
        "environment: S3_ENDPOINT: is no longer read (it was tensorflow-io's setting); set "
        "AWS_ENDPOINT_URL instead, with its scheme, e.g. AWS_ENDPOINT_URL=http://127.0.0.1:9000"
    )
    aws.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")  # both set: the new one is read
    assert (
        filesystems.filesystem("s3://bucket/x")[0].client_kwargs["endpoint_url"]
        == "http://127.0.0.1:9000"
    )


def test_path_helpers_keep_the_protocol():
    assert [
        filesystems.is_remote(p)
        for p in ("s3://b/k", "hdfs://nn/x", "/tmp/x", "x", "file:///tmp/x")
    ] == [True, True, False, False, False]
    assert (
        filesystems.full_path("s3://bucket/root", "bucket/root/a.parquet")
        == "s3://bucket/root/a.parquet"
    )
    assert filesystems.full_path("/data/root", "/data/root/a.parquet") == "/data/root/a.parquet"
    assert filesystems.full_path("file:///data", "/data/a.parquet") == "/data/a.parquet"
    assert (
        filesystems.join("s3://bucket/root/", "/dt=2026-01-01/", "a.parquet")
        == "s3://bucket/root/dt=2026-01-01/a.parquet"
    )
    assert filesystems.join("root") == "root"
