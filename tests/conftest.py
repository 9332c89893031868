"""Shared fixtures: tiny Parquet files and configs written by the tests themselves."""

from __future__ import annotations

import os
import pathlib
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import recsys_dist  # noqa: F401  sets TF_USE_LEGACY_KERAS before TensorFlow loads


def pytest_unconfigure(config):
    """After the summary, stderr goes to /dev/null. Tests that connect this process to a
    local cluster leave TensorFlow's eager context holding functions on servers that are
    gone by then; at exit it tries to remove them and logs about 60 lines of gRPC errors
    ("Failed to remove function remotely") after the summary. The exit status is kept."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)

SMALL_FEATURES = """\
tables:
  ads: {rows: 1000, dim: 4}
  tag: {rows: 100, dim: 4}
features:
  ad: {kind: categorical, dtype: int64, table: ads}
  site: {kind: categorical, dtype: string, table: ads}
  price: {kind: numeric, transform: log1p}
  tags: {kind: multi_categorical, table: tag, max_length: 3}
labels:
  click: {}
"""


def small_table(n: int = 100, seed: int = 0, **columns) -> pa.Table:
    """A table matching SMALL_FEATURES; keyword arguments replace columns."""
    rng = np.random.default_rng(seed)
    data = {
        "ad": pa.array(rng.integers(1, 500, n), pa.int64()),
        "site": pa.array([f"s{i % 7}" for i in range(n)], pa.string()),
        "price": pa.array(rng.lognormal(size=n).astype(np.float32), pa.float32()),
        "tags": pa.array(["|".join(str(t) for t in range(i % 4)) for i in range(n)], pa.string()),
        "click": pa.array(rng.integers(0, 2, n), pa.int64()),
    }
    data.update(columns)
    return pa.table(data)


def write_parquet(path: pathlib.Path, table: pa.Table, row_group_size: int | None = None) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=row_group_size)
    return str(path)


@pytest.fixture
def small_config(tmp_path):
    """Returns a function writing a small model config; keyword args go in data:."""

    def make(features: str = SMALL_FEATURES, **data) -> str:
        (tmp_path / "features.yaml").write_text(textwrap.dedent(features))
        data.setdefault("path", str(tmp_path / "data"))
        data_yaml = ", ".join(f"{k}: {v}" for k, v in data.items())
        (tmp_path / "model.yaml").write_text(
            "features: features.yaml\n"
            f"data: {{{data_yaml}}}\n"
            "model: {name: dcn_v2}\n"
            "input: {batch_size: 32, shuffle: false}\n"
            "cluster: {workers: 2, ps: 1}\n")
        return str(tmp_path / "model.yaml")

    return make


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-protocol server (moto) on 127.0.0.1 with bucket ``recsys-test``.

    Sets the standard AWS variables that both Arrow (the Parquet op) and s3fs read,
    in this process; returns them so cluster fixtures can pass them to server processes.
    """
    import os

    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    client.create_bucket(Bucket="recsys-test")
    try:
        yield {"env": env, "client": client, "bucket": "recsys-test"}
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def upload_dir(client, bucket: str, local: pathlib.Path, prefix: str) -> str:
    """Uploads every file under ``local`` to ``s3://bucket/prefix/``; returns that URL."""
    for path in sorted(local.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(local).as_posix()}")
    return f"s3://{bucket}/{prefix}"
