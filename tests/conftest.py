"""Fixtures shared by every folder of the suite. Helpers that are not fixtures are in
``tests/support/``."""

from __future__ import annotations

import logging
import os
import tempfile

import pytest

import recsys_dist  # noqa: F401  sets TF_USE_LEGACY_KERAS before TensorFlow loads
from recsys_dist import scratch
from tests.support import configs
from tests.support.data import free_port


def pytest_configure(config):
    """The suite traces hundreds of functions, and TensorFlow's autograph writes a file for
    each to the temporary directory: this process gets a run-scoped one
    (``recsys_dist/scratch.py``), removed at exit, and so do the commands it starts.
    pytest's ``tmp_path`` directories stay where they were (it keeps the last three)."""
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    scratch.start()


def pytest_unconfigure(config):
    """After the summary, stderr goes to /dev/null. Tests that connect this process to a
    local cluster leave TensorFlow's eager context holding functions on servers that are
    gone by then; at exit it tries to remove them and logs about 60 lines of gRPC errors
    ("Failed to remove function remotely") after the summary. The exit status is kept.

    Server logs the tests' runs kept outside the run-scoped directory (remote model
    dirs, ``scratch.lasting_directory``) are removed: a failed test's output says what
    failed."""
    scratch.release_lasting()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)


@pytest.fixture(autouse=True)
def package_logging_as_found():
    """A test that runs a command in this process (``cli.main``) installs the console's
    handler on the ``recsys_dist`` logger; the next test finds the logger as it was, so
    pytest's ``caplog`` sees the package's records again."""
    logger = logging.getLogger("recsys_dist")
    saved = list(logger.handlers), logger.level, logger.propagate
    yield
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


@pytest.fixture
def small_config(tmp_path):
    """Returns a function writing a small model config into ``tmp_path``: its argument is
    the feature config (a dict, default ``SMALL_FEATURES``), keyword arguments go in
    ``data:``. See :func:`tests.support.configs.small_config`."""

    def make(features: dict = configs.SMALL_FEATURES, **data) -> str:
        return configs.small_config(tmp_path, features, **data)

    return make


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory):
    """Two days of synthetic data, 3,000 rows a day in files of 1,000, written by
    ``recsys-dist data synth``."""
    from recsys_dist.cli import main

    out = tmp_path_factory.mktemp("cli_synth")
    assert (
        main(
            [
                "data",
                "synth",
                "--out",
                str(out),
                "--days",
                "2",
                "--rows-per-day",
                "3000",
                "--rows-per-file",
                "1000",
                "--quiet",
            ]
        )
        == 0
    )
    return out


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-protocol server (moto) on 127.0.0.1 with bucket ``recsys-test``.

    Sets the standard AWS variables that both Arrow (the Parquet op) and s3fs read,
    in this process; returns them so cluster fixtures can pass them to server processes.
    """
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
    }
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


@pytest.fixture
def fault_proxy(s3_server, monkeypatch):
    """A :class:`tests.support.s3_faults.FaultProxy` in front of ``s3_server``, with no
    faults yet: ``AWS_ENDPOINT_URL`` points at it in this process and the commands it
    starts, and requests time out after 2 s (``RECSYS_DIST_S3_REQUEST_TIMEOUT``)."""
    from tests.support.s3_faults import FaultProxy

    proxy = FaultProxy(s3_server["env"]["AWS_ENDPOINT_URL"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    monkeypatch.setenv("RECSYS_DIST_S3_REQUEST_TIMEOUT", "2")
    try:
        yield proxy
    finally:
        proxy.stop()
