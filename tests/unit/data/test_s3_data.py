"""Data on S3 (moto's server on 127.0.0.1): `validate --scan` reads it in-graph through the
Parquet op; a missing bucket or key, a dead endpoint, missing credentials and a denied
permission fail with one line naming the URI.

Reads on real cluster workers from S3 are in tests/cluster/test_read_pass.py and
tests/cluster/test_train.py.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import pyarrow as pa
import pytest

from recsys_dist.cli import main
from tests.support import command_forks
from tests.support.data import free_port, small_table, upload_dir, write_parquet


def _s3_day(tmp_path, s3_server, prefix: str) -> str:
    tags = [None if i % 4 == 0 else [i, None] for i in range(60)]
    table = small_table(
        60,
        tags=pa.array(tags, pa.list_(pa.int64())),
        price=pa.array([None] * 10 + [1.0] * 50, pa.float32()),
    )
    write_parquet(tmp_path / "up" / "dt=2026-01-01" / "a.parquet", table, row_group_size=25)
    return upload_dir(s3_server["client"], s3_server["bucket"], tmp_path / "up", prefix)


def test_validate_scan_reads_s3_data_with_nulls_and_lists(
    tmp_path, s3_server, small_config, capsys
):
    url = _s3_day(tmp_path, s3_server, "scan")
    config = small_config(path=url, train={"dates": "2026-01-01"})
    assert main(["validate", "--config", config, "--scan"]) == 0
    out = capsys.readouterr().out
    assert "data     1 files, 60 rows, 3 units" in out
    assert "scan     read 60 rows in-graph" in out and "0 bad rows skipped" in out


def test_missing_bucket_and_key_are_named(tmp_path, s3_server, small_config, capsys):
    config = small_config(train={"dates": "2026-01-01"})
    assert (
        main(["validate", "--config", config, "--data", "s3://no-such-bucket/data/part.parquet"])
        == 2
    )  # storage, not data
    assert capsys.readouterr().err.strip() == (
        "error: s3://no-such-bucket/data/part.parquet: the bucket 'no-such-bucket' does not "
        "exist (NoSuchBucket)"
    )
    assert (
        main(["validate", "--config", config, "--data", f"s3://{s3_server['bucket']}/nothing/here"])
        == 3
    )
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(f"s3://{s3_server['bucket']}/nothing/here: no such file or directory")
    )


def test_dead_endpoint_fails_naming_the_uri(tmp_path, small_config):
    config = small_config(train={"dates": "2026-01-01"})
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "y",
        "AWS_REGION": "us-east-1",
    }
    for command in (
        ["validate", "--config", config, "--data", "s3://bucket/days"],
        [
            "train",
            "--config",
            config,
            "--data",
            "s3://bucket/days",
            "--model-dir",
            str(tmp_path / "run"),
            "--no-eval",
        ],
    ):
        result = command_forks.run(
            [str(pathlib.Path(sys.executable).parent / "recsys-dist"), *command],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )  # a hang guard, not a bound
        assert result.returncode == 2, result.stderr[-2000:]
        assert "Traceback" not in result.stderr
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith(
            "error: s3://bucket/days: cannot list the data: Could not connect to the endpoint URL"
        ), last


CLI = str(pathlib.Path(sys.executable).parent / "recsys-dist")


@pytest.fixture(scope="module")
def locked_s3(tmp_path_factory):
    """A second moto server that enforces IAM: bucket ``locked`` holds one day of data,
    and the returned environment's user may only read it (``s3:GetObject``)."""
    import boto3

    port = free_port()
    server = subprocess.Popen(
        [
            str(pathlib.Path(sys.executable).parent / "moto_server"),
            "-H",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "6"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                assert time.time() < deadline, "moto_server did not start"
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}"
        admin = {
            "endpoint_url": url,
            "region_name": "us-east-1",
            "aws_access_key_id": "admin",
            "aws_secret_access_key": "admin",
        }
        s3, iam = boto3.client("s3", **admin), boto3.client("iam", **admin)
        s3.create_bucket(Bucket="locked")  # the 6 unauthenticated actions: these
        data = tmp_path_factory.mktemp("locked") / "dt=2026-01-01" / "a.parquet"
        write_parquet(data, small_table(40), row_group_size=20)
        s3.put_object(Bucket="locked", Key="days/dt=2026-01-01/a.parquet", Body=data.read_bytes())
        iam.create_user(UserName="reader")
        iam.put_user_policy(
            UserName="reader",
            PolicyName="read-objects",
            PolicyDocument=(
                json.dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": "*"}
                        ],
                    }
                )
            ),
        )
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        env = {
            **os.environ,
            "AWS_ENDPOINT_URL": url,
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
        }
        yield env
    finally:
        server.kill()
        server.wait()


def _one_line_error(command: list[str], env: dict, code: int = 2) -> str:
    result = command_forks.run(
        [CLI, *command], env=env, capture_output=True, text=True, timeout=300
    )  # a hang guard, not a bound
    assert result.returncode == code, result.stdout[-2000:] + result.stderr[-2000:]
    assert "cluster " not in result.stdout  # refused before any server starts
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
    return lines[0]


def test_a_denied_permission_is_one_line_naming_the_uri(tmp_path, small_config, locked_s3):
    config = small_config(path="s3://locked/days", train={"dates": "2026-01-01"})
    assert _one_line_error(["validate", "--config", config], locked_s3) == (
        "error: s3://locked/days: cannot list the data: Access Denied"
    )
    run = "s3://locked/run"
    write_parquet(tmp_path / "dt=2026-01-01" / "a.parquet", small_table(40), row_group_size=20)
    assert _one_line_error(
        ["train", "--config", config, "--data", str(tmp_path), "--model-dir", run, "--no-eval"],
        locked_s3,
    ) == (f"error: {run}/checkpoints: cannot list it: Access Denied")


def test_missing_credentials_are_one_line_naming_the_uri(tmp_path, small_config, s3_server):
    config = small_config(path=f"s3://{s3_server['bucket']}/days", train={"dates": "2026-01-01"})
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
    }
    env.update(
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    assert _one_line_error(["validate", "--config", config], env) == (
        f"error: s3://{s3_server['bucket']}/days: cannot list the data: Unable to locate "
        "credentials"
    )
