"""Filesystems for every non-tensor path: local, ``s3://`` and ``hdfs://`` through fsspec.

The coordinator lists partitions, reads Parquet footers and writes markers, manifests,
JSON and reports with fsspec; workers read Parquet in-graph through the Arrow op
(:mod:`recsys_dist.ops`). Both take S3 settings from the standard AWS variables:
``AWS_ENDPOINT_URL`` (e.g. ``http://127.0.0.1:9000`` for a local server),
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_REGION``. Connect and read
timeouts and retries are bounded, so a dead endpoint fails in seconds, not minutes.
"""

from __future__ import annotations

import os

import fsspec
from fsspec.core import split_protocol

from recsys_dist.errors import ConfigError

#: Seconds to wait for a connection / a response, and attempts per request.
S3_CONNECT_TIMEOUT = float(os.environ.get("RECSYS_DIST_S3_CONNECT_TIMEOUT", 5))
S3_READ_TIMEOUT = float(os.environ.get("RECSYS_DIST_S3_REQUEST_TIMEOUT", 30))
S3_MAX_ATTEMPTS = int(os.environ.get("RECSYS_DIST_S3_MAX_ATTEMPTS", 3))


def _s3_options() -> dict:
    if os.environ.get("S3_ENDPOINT") and not os.environ.get("AWS_ENDPOINT_URL"):
        raise ConfigError("environment", "S3_ENDPOINT",
                          "is no longer read (it was tensorflow-io's setting); set "
                          "AWS_ENDPOINT_URL instead, with its scheme, e.g. "
                          "AWS_ENDPOINT_URL=http://127.0.0.1:9000")
    client_kwargs: dict = {}
    if os.environ.get("AWS_REGION"):
        client_kwargs["region_name"] = os.environ["AWS_REGION"]
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        client_kwargs["endpoint_url"] = endpoint if "://" in endpoint else f"https://{endpoint}"
    config_kwargs = {"connect_timeout": S3_CONNECT_TIMEOUT, "read_timeout": S3_READ_TIMEOUT,
                     "retries": {"max_attempts": S3_MAX_ATTEMPTS, "mode": "standard"}}
    return {"client_kwargs": client_kwargs, "config_kwargs": config_kwargs}


def filesystem(path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """Returns the fsspec filesystem for ``path`` and the path in that filesystem's terms."""
    protocol, stripped = split_protocol(path)
    if protocol in (None, "file", "local"):
        return fsspec.filesystem("file"), os.path.abspath(stripped)
    options = _s3_options() if protocol in ("s3", "s3a") else {}
    return fsspec.filesystem(protocol, **options), stripped


def is_remote(path: str) -> bool:
    """Whether ``path`` is on an object store or HDFS rather than the local disk."""
    protocol, _ = split_protocol(path)
    return protocol not in (None, "file", "local")


def full_path(template: str, stripped: str) -> str:
    """Re-attaches the protocol of ``template`` to a path returned by its filesystem."""
    protocol, _ = split_protocol(template)
    if protocol in (None, "file", "local"):
        return stripped
    return f"{protocol}://{stripped}"


def join(root: str, *parts: str) -> str:
    """Joins path parts with ``/`` (also for object stores)."""
    return "/".join([root.rstrip("/")] + [p.strip("/") for p in parts])
