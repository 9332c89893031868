"""A misbehaving S3 (``tests/support/s3_faults.py`` in front of moto) on the fsspec paths:
transient errors are retried up to ``AWS_MAX_ATTEMPTS``, permanent ones fail at once, a
hang is bounded by the request timeout, and every failure names the URI."""

from __future__ import annotations

import pytest

from recsys_dist import storage_io
from recsys_dist.storage_io import StorageError
from tests.support.s3_faults import Fault


@pytest.fixture
def root(fault_proxy, request):
    return f"s3://recsys-test/faults/{request.node.name.replace('[', '-').rstrip(']')}"


def puts(proxy, fault: str | None = "any") -> int:
    return sum(1 for e in proxy.log if e.method == "PUT" and (fault == "any" or e.fault == fault))


@pytest.mark.parametrize("kind", ["503", "500", "reset", "hang"])
def test_a_transient_upload_error_is_retried_and_the_write_completes(fault_proxy, root, kind):
    fault_proxy.faults = [Fault(kind, method="PUT", times=1)]
    storage_io.write_text(f"{root}/x.json", "whole")
    assert storage_io.read_text(f"{root}/x.json") == "whole"
    assert puts(fault_proxy, kind) == 1 and puts(fault_proxy, None) == 1


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("503", "503 SlowDown: Please reduce your request rate. (after 3 attempts)"),
        (
            "500",
            "500 InternalError: We encountered an internal error. Please try again. "
            "(after 3 attempts)",
        ),
        ("hang", "Read timeout on endpoint URL"),
    ],
)
def test_retries_run_out_after_aws_max_attempts_and_the_message_names_the_uri(
    fault_proxy, root, kind, reason
):
    fault_proxy.faults = [Fault(kind, method="PUT")]
    with pytest.raises(StorageError) as failed:
        storage_io.write_text(f"{root}/x.json", "whole")
    assert str(failed.value).startswith(f"{root}/x.json: cannot write it: {reason}")
    assert puts(fault_proxy) == 3  # AWS_MAX_ATTEMPTS unset: 3
    fault_proxy.faults = []
    assert not storage_io.exists(f"{root}/x.json")  # nothing that looks written


def test_aws_max_attempts_sets_the_attempts(fault_proxy, root, monkeypatch):
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "4")
    fault_proxy.faults = [Fault("503", method="PUT", times=3)]
    storage_io.write_text(f"{root}/x.json", "whole")
    assert puts(fault_proxy, "503") == 3 and puts(fault_proxy, None) == 1
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "none")
    with pytest.raises(Exception, match="AWS_MAX_ATTEMPTS: must be a positive number, got 'none'"):
        storage_io.write_text(f"{root}/x.json", "whole")


def test_permanent_errors_fail_at_once_naming_the_uri(fault_proxy, root):
    fault_proxy.faults = [Fault("403", method="PUT")]
    with pytest.raises(StorageError, match=f"^{root}/x.json: cannot write it: Access Denied$"):
        storage_io.write_text(f"{root}/x.json", "whole")
    assert puts(fault_proxy) == 1
    fault_proxy.faults = []
    with pytest.raises(
        StorageError,
        match="^s3://no-such-bucket/x.json: cannot write it: The specified bucket does not exist$",
    ):
        storage_io.write_text("s3://no-such-bucket/x.json", "whole")
    assert puts(fault_proxy) == 2


def test_a_read_cut_in_its_body_is_read_again(fault_proxy, root):
    storage_io.write_text(f"{root}/x.json", "0123456789" * 100)
    fault_proxy.faults = [Fault("reset", method="GET", bytes=10, times=2)]
    assert storage_io.read_text(f"{root}/x.json") == "0123456789" * 100
    fault_proxy.faults = [Fault("reset", method="GET", bytes=10)]
    with pytest.raises(StorageError, match=f"^{root}/x.json: cannot read it: "):
        storage_io.read_text(f"{root}/x.json")
    assert sum(1 for e in fault_proxy.log if e.fault == "reset") == 2 + 3
