"""Data on S3 (moto's server on 127.0.0.1): `validate --scan` reads it in-graph through the
Parquet op; a missing bucket or key and a dead endpoint fail with one line naming the URI.

Reads on real cluster workers from S3 are in tests/test_cluster_read.py and
tests/test_train_cluster.py.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pyarrow as pa

from conftest import free_port, small_table, upload_dir, write_parquet
from recsys_dist.cli import main


def _s3_day(tmp_path, s3_server, prefix: str) -> str:
    tags = [None if i % 4 == 0 else [i, None] for i in range(60)]
    table = small_table(60, tags=pa.array(tags, pa.list_(pa.int64())),
                        price=pa.array([None] * 10 + [1.0] * 50, pa.float32()))
    write_parquet(tmp_path / "up" / "dt=2026-01-01" / "a.parquet", table, row_group_size=25)
    return upload_dir(s3_server["client"], s3_server["bucket"], tmp_path / "up", prefix)


def test_validate_scan_reads_s3_data_with_nulls_and_lists(tmp_path, s3_server, small_config,
                                                           capsys):
    url = _s3_day(tmp_path, s3_server, "scan")
    config = small_config(path=url, train="{dates: 2026-01-01}")
    assert main(["validate", "--config", config, "--scan"]) == 0
    out = capsys.readouterr().out
    assert "data     1 files, 60 rows, 3 units" in out
    assert "scan     read 60 rows in-graph" in out and "0 bad rows skipped" in out


def test_missing_bucket_and_key_are_named(tmp_path, s3_server, small_config, capsys):
    config = small_config(train="{dates: 2026-01-01}")
    assert main(["validate", "--config", config, "--data",
                 "s3://no-such-bucket/data/part.parquet"]) == 3
    assert capsys.readouterr().err.strip() == (
        "error: s3://no-such-bucket/data/part.parquet: no such file or directory")
    assert main(["validate", "--config", config, "--data",
                 f"s3://{s3_server['bucket']}/nothing/here"]) == 3
    assert capsys.readouterr().err.strip().endswith(
        f"s3://{s3_server['bucket']}/nothing/here: no such file or directory")


def test_dead_endpoint_fails_naming_the_uri(tmp_path, small_config):
    config = small_config(train="{dates: 2026-01-01}")
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
           "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y", "AWS_REGION": "us-east-1"}
    for command in (["validate", "--config", config, "--data", "s3://bucket/days"],
                    ["train", "--config", config, "--data", "s3://bucket/days",
                     "--model-dir", str(tmp_path / "run"), "--no-eval"]):
        result = subprocess.run(
            [str(pathlib.Path(sys.executable).parent / "recsys-dist"), *command],
            env=env, capture_output=True, text=True, timeout=300)  # a hang guard, not a bound
        assert result.returncode == 2, result.stderr[-2000:]
        assert "Traceback" not in result.stderr
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("error: s3://bucket/days: cannot list the data: Could not "
                               "connect to the endpoint URL"), last
