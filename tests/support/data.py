"""Small Parquet files written by the tests themselves, ports, and uploads to S3."""

from __future__ import annotations

import pathlib
import socket

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def small_table(n: int = 100, seed: int = 0, **columns) -> pa.Table:
    """A table matching :data:`tests.support.configs.SMALL_FEATURES`; keyword arguments
    replace columns."""
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def upload_dir(client, bucket: str, local: pathlib.Path, prefix: str) -> str:
    """Uploads every file under ``local`` to ``s3://bucket/prefix/``; returns that URL."""
    for path in sorted(local.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(local).as_posix()}")
    return f"s3://{bucket}/{prefix}"
