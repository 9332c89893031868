"""Publications on a throttling S3 (``tests/support/s3_faults.py`` in front of moto): a
503 now and then costs a retry; throttling that outlasts the retries fails the day naming
the URI, leaves yesterday's model ``CURRENT`` and the cut publication unpublished, and the
next day publishes over it."""

from __future__ import annotations

import datetime

import pytest

from recsys_dist import storage_io
from recsys_dist.retrain.publish import Publications
from recsys_dist.storage_io import StorageError
from tests.support.s3_faults import Fault

DAY = datetime.date.fromisoformat


@pytest.fixture
def pubs(fault_proxy, tmp_path):
    return Publications(f"s3://recsys-test/publish-faults/{tmp_path.name}")


def publish(pubs: Publications, date: str) -> None:
    """One day's publication as ``retrain`` writes it: the export's files, then the
    manifest, ``_SUCCESS``, ``CURRENT``."""
    directory = pubs.begin(DAY(date))
    for name in ("saved_model.pb", "variables/variables.index", "assets.extra/export.json"):
        storage_io.write_text(f"{directory}/export/{name}", f"{date} {name}")
    pubs.finish(DAY(date), {"date": date}, {"config.yaml": "features: features.yaml\n"})


def test_throttling_during_publication(pubs, fault_proxy):
    publish(pubs, "2026-01-01")
    fault_proxy.faults = [Fault("503", method="PUT", key="/published/2026-01-02/", every=2)]
    publish(pubs, "2026-01-02")  # every other upload throttled once: retried
    assert pubs.current() == "2026-01-02" and len(fault_proxy.faulted()) >= 3
    fault_proxy.faults = [Fault("503", method="PUT", key="/published/2026-01-03/_SUCCESS$")]
    with pytest.raises(StorageError) as failed:
        publish(pubs, "2026-01-03")
    assert str(failed.value) == (
        f"{pubs.root}/published/2026-01-03/_SUCCESS: cannot write it: 503 SlowDown: Please "
        "reduce your request rate. (after 3 attempts)"
    )
    fault_proxy.faults = []
    # The next day's run finds yesterday's model: 01-03 is cut short, never CURRENT.
    assert pubs.current() == "2026-01-02"
    assert pubs.scan() == ([DAY("2026-01-01"), DAY("2026-01-02")], [DAY("2026-01-03")])
    assert pubs.latest_before(DAY("2026-01-04")) == DAY("2026-01-02")
    assert (
        storage_io.read_text(f"{pubs.directory(DAY('2026-01-02'))}/export/saved_model.pb")
        == "2026-01-02 saved_model.pb"
    )
    publish(pubs, "2026-01-03")  # the rerun publishes over the cut one
    assert pubs.current() == "2026-01-03" and pubs.dates()[-1] == DAY("2026-01-03")
