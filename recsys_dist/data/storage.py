"""Filesystems for data paths: local, ``s3://`` and ``hdfs://`` through fsspec.

The coordinator lists partitions and reads Parquet footers with fsspec; workers read
the same paths in-graph through tensorflow-io. Both sides take the S3 endpoint and
credentials from the same environment variables tensorflow-io uses:
``S3_ENDPOINT``, ``S3_USE_HTTPS``, ``S3_VERIFY_SSL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY`` and ``AWS_REGION``.
"""

from __future__ import annotations

import os

import fsspec
from fsspec.core import split_protocol


def _s3_options() -> dict:
    endpoint = os.environ.get("S3_ENDPOINT")
    client_kwargs: dict = {}
    if os.environ.get("AWS_REGION"):
        client_kwargs["region_name"] = os.environ["AWS_REGION"]
    if endpoint:
        if "://" not in endpoint:
            https = os.environ.get("S3_USE_HTTPS", "1") not in ("0", "false", "False")
            endpoint = ("https://" if https else "http://") + endpoint
        client_kwargs["endpoint_url"] = endpoint
        client_kwargs["verify"] = os.environ.get("S3_VERIFY_SSL", "1") not in ("0", "false")
    return {"client_kwargs": client_kwargs}


def filesystem(path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """Returns the fsspec filesystem for ``path`` and the path in that filesystem's terms."""
    protocol, stripped = split_protocol(path)
    if protocol in (None, "file", "local"):
        return fsspec.filesystem("file"), os.path.abspath(stripped)
    options = _s3_options() if protocol in ("s3", "s3a") else {}
    return fsspec.filesystem(protocol, **options), stripped


def full_path(template: str, stripped: str) -> str:
    """Re-attaches the protocol of ``template`` to a path returned by its filesystem."""
    protocol, _ = split_protocol(template)
    if protocol in (None, "file", "local"):
        return stripped
    return f"{protocol}://{stripped}"


def join(root: str, *parts: str) -> str:
    """Joins path parts with ``/`` (also for object stores)."""
    return "/".join([root.rstrip("/")] + [p.strip("/") for p in parts])
