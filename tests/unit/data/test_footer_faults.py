"""Footers on a misbehaving S3 (``tests/support/s3_faults.py`` in front of moto): a
transient error costs a retry, never a file; a footer the store cannot serve is a storage
error naming the file, never a bad file to skip."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recsys_dist import storage_io
from recsys_dist.data.parquet_meta import read_file_meta, read_footers
from recsys_dist.storage_io import StorageError
from tests.support.s3_faults import Fault


@pytest.fixture
def root(fault_proxy, request):
    return f"s3://recsys-test/footer-faults/{request.node.name}"


def _parquet(rows: int) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.table({"x": list(range(rows))}), buffer, row_group_size=rows // 4)
    return buffer.getvalue()


def test_503_on_one_in_five_footer_reads_loses_no_file(fault_proxy, root):
    paths = [f"{root}/part-{i}.parquet" for i in range(10)]
    for path in paths:
        with storage_io.open_file(path, "wb") as handle:
            handle.write(_parquet(1000))
    fault_proxy.faults = [Fault("503", method="GET", part="footer", every=5)]
    metas, skipped = read_footers(paths, on_bad_file="skip", threads=4)
    assert [m.path for m in metas] == paths and not skipped
    assert [m.rows for m in metas] == [1000] * 10
    assert sum(1 for e in fault_proxy.log if e.fault == "503") >= 2


def test_a_footer_storage_cannot_serve_is_a_storage_error_never_a_skipped_file(fault_proxy, root):
    path = f"{root}/part-0.parquet"
    with storage_io.open_file(path, "wb") as handle:
        handle.write(_parquet(1000))
    fault_proxy.faults = [Fault("reset", method="GET", part="footer", bytes=4)]
    with pytest.raises(StorageError, match=f"^{path}: cannot read the footer: "):
        read_footers([path], on_bad_file="skip")
    fault_proxy.faults = [Fault("reset", method="GET", part="footer", bytes=4, times=2)]
    assert read_file_meta(path).rows == 1000
