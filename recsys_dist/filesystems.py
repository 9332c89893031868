"""Filesystems for every non-tensor path: local, ``s3://`` and ``hdfs://`` through fsspec.

The coordinator lists partitions, reads Parquet footers and writes markers, manifests,
JSON and reports with fsspec; workers read Parquet in-graph through the Arrow op
(:mod:`recsys_dist.ops`). Both take S3 settings from the standard AWS variables:
``AWS_ENDPOINT_URL`` (e.g. ``http://127.0.0.1:9000`` for a local server),
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION`` and ``AWS_MAX_ATTEMPTS``.

Transient S3 errors (500, 503 SlowDown, a reset connection, a timeout) are retried with
exponential backoff and full jitter, up to :func:`s3_max_attempts` attempts per request:
botocore's "standard" mode here, the op's own strategy of the same shape on the workers.
s3fs does not repeat calls on top of that (its own ``retries`` is 1); a read whose answer
is cut in its body, which botocore cannot retry, is read again by
:mod:`recsys_dist.storage_io`, up to the same number of times. Permanent errors (403,
404, NoSuchBucket) are not retried.
Connect and request timeouts bound every request, so a dead or hanging endpoint fails in
seconds, not minutes.
"""

from __future__ import annotations

import os
import random

import fsspec
from fsspec.core import split_protocol

from recsys_dist.errors import ConfigError

#: Attempts per S3 request when neither variable below is set (botocore's default).
DEFAULT_S3_MAX_ATTEMPTS = 3


def _positive(name: str, fallback: float) -> float:
    value = os.environ.get(name, "").strip()
    if not value:
        return fallback
    try:
        parsed = float(value)
    except ValueError:
        parsed = -1.0
    if parsed <= 0:
        raise ConfigError("environment", name, f"must be a positive number, got {value!r}")
    return parsed


def s3_max_attempts() -> int:
    """Attempts per S3 request, first one included: ``AWS_MAX_ATTEMPTS`` (the standard
    AWS variable), or ``RECSYS_DIST_S3_MAX_ATTEMPTS`` when set; default 3. The Parquet op
    on the workers reads the same variables."""
    if os.environ.get("RECSYS_DIST_S3_MAX_ATTEMPTS", "").strip():
        return max(1, int(_positive("RECSYS_DIST_S3_MAX_ATTEMPTS", DEFAULT_S3_MAX_ATTEMPTS)))
    return max(1, int(_positive("AWS_MAX_ATTEMPTS", DEFAULT_S3_MAX_ATTEMPTS)))


def backoff_seconds(retry: int) -> float:
    """The wait before retry number ``retry`` (0 for the first): a random time of up to
    1 s, 2 s, 4 s, ... and at most 20 s (exponential backoff with full jitter, as
    botocore's "standard" mode and the Parquet op wait)."""
    return random.uniform(0.0, min(20.0, 2.0 ** min(retry, 5)))


def s3_timeouts() -> tuple[float, float]:
    """(connect, request) timeouts in seconds: ``RECSYS_DIST_S3_CONNECT_TIMEOUT`` (default
    5) and ``RECSYS_DIST_S3_REQUEST_TIMEOUT`` (default 30; a request whose answer moves no
    byte for that long fails and is retried)."""
    return (
        _positive("RECSYS_DIST_S3_CONNECT_TIMEOUT", 5.0),
        _positive("RECSYS_DIST_S3_REQUEST_TIMEOUT", 30.0),
    )


def _s3_options() -> dict:
    if os.environ.get("S3_ENDPOINT") and not os.environ.get("AWS_ENDPOINT_URL"):
        raise ConfigError(
            "environment",
            "S3_ENDPOINT",
            "is no longer read (it was tensorflow-io's setting); set "
            "AWS_ENDPOINT_URL instead, with its scheme, e.g. "
            "AWS_ENDPOINT_URL=http://127.0.0.1:9000",
        )
    client_kwargs: dict = {}
    if os.environ.get("AWS_REGION"):
        client_kwargs["region_name"] = os.environ["AWS_REGION"]
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        client_kwargs["endpoint_url"] = endpoint if "://" in endpoint else f"https://{endpoint}"
    connect, request = s3_timeouts()
    attempts = s3_max_attempts()
    config_kwargs = {
        "connect_timeout": connect,
        "read_timeout": request,
        "retries": {"total_max_attempts": attempts, "mode": "standard"},
    }
    return {"client_kwargs": client_kwargs, "config_kwargs": config_kwargs}


def filesystem(path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """Returns the fsspec filesystem for ``path`` and the path in that filesystem's terms."""
    protocol, stripped = split_protocol(path)
    if protocol in (None, "file", "local"):
        return fsspec.filesystem("file"), os.path.abspath(stripped)
    if protocol not in ("s3", "s3a"):
        return fsspec.filesystem(protocol), stripped
    options = _s3_options()
    fs = fsspec.filesystem(protocol, **options)
    fs.retries = 1  # s3fs's own repeats of a call would multiply botocore's attempts
    return fs, stripped


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
