"""The Parquet op on a file it cannot open and on a misbehaving S3 (``tests/support/
s3_faults.py`` in front of moto): every failure names the file's URI and Arrow's own
reason, a transient error is retried up to ``AWS_MAX_ATTEMPTS`` and loses no row, a
permanent one fails at once. The op runs in a graph, as on a worker, and its error goes
through the same translation a worker's does (``bad_data_error``)."""

from __future__ import annotations

import io
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

from recsys_dist import ops, storage_io
from recsys_dist.data.read_pass import bad_data_error
from recsys_dist.errors import DataError
from recsys_dist.storage_io import StorageError
from tests.support.s3_faults import Fault

ROWS = 40_000


def _parquet() -> bytes:
    buffer = io.BytesIO()
    pq.write_table(
        pa.table({"x": np.arange(ROWS, dtype=np.int64)}), buffer, row_group_size=ROWS // 4
    )
    return buffer.getvalue()


def read_in_graph(path: str, start: int = 0, stop: int = ROWS) -> np.ndarray:
    """Rows [start, stop) of column ``x``, read in a graph; a failure as a worker's."""

    @tf.function
    def read():
        return ops.read_rows(path, start, stop, {"x": tf.int64})["x"].values

    try:
        return read().numpy()
    except tf.errors.OpError as exc:
        raise bad_data_error(exc) from None


def _write(path: str, data: bytes) -> None:
    with storage_io.open_file(path, "wb") as handle:
        handle.write(data)


@pytest.mark.parametrize("where", ["local", "s3"])
@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty file (0 bytes), not Parquet"),
        (
            b"not parquet at all",
            "not a readable Parquet file: Parquet magic bytes not found in "
            "footer. Either the file is corrupted or this is not a parquet "
            "file.",
        ),
    ],
)
def test_a_file_that_cannot_be_opened_is_named_with_arrows_reason(
    where, content, reason, request, tmp_path
):
    if where == "s3":
        bucket = request.getfixturevalue("s3_server")["bucket"]
        path = f"s3://{bucket}/op-storage/{tmp_path.name}/bad.parquet"
    else:
        path = str(tmp_path / "bad.parquet")
    _write(path, content)
    with pytest.raises(DataError) as failed:
        read_in_graph(path)
    assert str(failed.value) == f"reading Parquet failed on a worker: {path}: {reason}"


@pytest.fixture
def on_s3(fault_proxy, tmp_path):
    path = f"s3://recsys-test/op-storage/{tmp_path.name}/part-0.parquet"
    _write(path, _parquet())
    return path


def arrow_faults(proxy) -> list[str]:
    return [f"{e.method} {e.part} {e.fault}" for e in proxy.faulted() if e.arrow]


def test_503_on_footer_reads_and_a_reset_in_a_row_range_read_lose_no_row(fault_proxy, on_s3):
    fault_proxy.faults = [
        Fault("503", method="GET", part="footer", agent="aws-sdk-cpp", times=2),
        Fault("reset", method="GET", part="rows", agent="aws-sdk-cpp", bytes=1000, times=1),
    ]
    np.testing.assert_array_equal(read_in_graph(on_s3, 5000, 25_000), np.arange(5000, 25_000))
    assert arrow_faults(fault_proxy) == ["GET footer 503", "GET footer 503", "GET rows reset"]


def test_a_transient_error_that_stays_fails_after_the_attempts_naming_the_uri(fault_proxy, on_s3):
    fault_proxy.faults = [Fault("503", method="GET", agent="aws-sdk-cpp")]
    with pytest.raises(StorageError) as failed:
        read_in_graph(on_s3)
    # The SDK names a 503 by its XML code, or by its status when it did not parse the body
    assert re.match(
        f"^{re.escape(on_s3)}: cannot read it on a worker: AWS Error "
        "(SLOW_DOWN|SERVICE_UNAVAILABLE) during GetObject operation:",
        str(failed.value),
    ), str(failed.value)
    assert len(arrow_faults(fault_proxy)) == 3  # AWS_MAX_ATTEMPTS unset: 3


def test_a_hang_is_cut_by_the_request_timeout_and_retried(fault_proxy, on_s3):
    fault_proxy.faults = [Fault("hang", method="GET", part="rows", agent="aws-sdk-cpp", times=1)]
    np.testing.assert_array_equal(read_in_graph(on_s3), np.arange(ROWS))
    assert arrow_faults(fault_proxy) == ["GET rows hang"]


def test_a_permanent_error_fails_at_once_naming_the_uri(fault_proxy, on_s3):
    fault_proxy.faults = [Fault("403", agent="aws-sdk-cpp")]
    with pytest.raises(StorageError) as failed:
        read_in_graph(on_s3)
    assert str(failed.value).startswith(f"{on_s3}: cannot read it on a worker: ")
    assert "ACCESS_DENIED" in str(failed.value)
    assert len(arrow_faults(fault_proxy)) == 1
