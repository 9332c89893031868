"""Publications of a retraining root, locally and on moto's S3 server: ``_SUCCESS`` decides
what is published, ``CURRENT`` never goes back, a remote config is loaded from a copy."""

from __future__ import annotations

import datetime
import os
import pathlib

import pytest

from recsys_dist import storage_io
from recsys_dist.retrain.publish import Publications, PublishError, local_config

DAY = datetime.date.fromisoformat


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "root")
    server = request.getfixturevalue("s3_server")
    return f"s3://{server['bucket']}/publish/{request.node.originalname}"  # one per test


def test_publish_success_last_and_current_never_back(root, tmp_path):
    pubs = Publications(root)
    assert pubs.dates() == [] and pubs.current() is None
    for date in ("2026-01-02", "2026-01-01"):  # the second is a backfilled older day
        directory = pubs.begin(DAY(date))
        storage_io.write_text(f"{directory}/export/saved_model.pb", "pb")
        pubs.finish(
            DAY(date),
            {"date": date, "checkpoint": f"{root}/runs/{date}/checkpoints/ckpt-000000000010"},
            {"config.yaml": "features: features.yaml\n", "features.yaml": "tables: {}\n"},
        )
    assert pubs.dates() == [DAY("2026-01-01"), DAY("2026-01-02")]
    assert pubs.current() == "2026-01-02" and pubs.manifest(DAY("2026-01-01"))["date"] == (
        "2026-01-01"
    )
    assert pubs.scan() == ([DAY("2026-01-01"), DAY("2026-01-02")], [])
    # A publication cut short (no _SUCCESS) is not published; begin() clears it.
    storage_io.write_text(f"{root}/published/2026-01-03/manifest.json", "{}")
    assert pubs.scan()[1] == [DAY("2026-01-03")]
    assert not pubs.is_published(DAY("2026-01-03")) and pubs.latest_before(
        DAY("2026-01-04")
    ) == DAY("2026-01-02")
    pubs.begin(DAY("2026-01-03"))
    assert storage_io.listdir(f"{root}/published/2026-01-03") == []
    scratch = str(tmp_path / "scratch")
    path = local_config(pubs.directory(DAY("2026-01-01")), scratch)
    assert os.path.isfile(path) and pathlib.Path(path).read_text() == "features: features.yaml\n"
    assert os.path.isfile(os.path.join(os.path.dirname(path), "features.yaml"))
    assert path.startswith(scratch) == root.startswith("s3://")
    with pytest.raises(PublishError, match="2026-01-03/config.yaml: missing"):
        local_config(pubs.directory(DAY("2026-01-03")), scratch)
    storage_io.write_text(f"{root}/published/2026-01-01/manifest.json", "{not json")
    with pytest.raises(PublishError, match=r"2026-01-01/manifest.json: not valid JSON \("):
        pubs.manifest(DAY("2026-01-01"))


def test_an_export_that_fails_in_its_own_process_is_named_with_its_line_and_code(tmp_path):
    """``retrain`` exports from a ``recsys-dist export`` process of its own
    (``publish.export_apart``); its failure comes back with the export's own ``error:``
    line and exit code."""
    from recsys_dist.export import ExportError
    from recsys_dist.retrain.publish import export_apart

    run_dir = tmp_path / "runs" / "2026-01-02"
    run_dir.mkdir(parents=True)
    with pytest.raises(ExportError) as raised:
        export_apart(str(run_dir), str(tmp_path / "published" / "export"))
    assert str(raised.value) == (
        f"{run_dir}/config.yaml: not found, and no --config was given; it is written when "
        "train starts: pass --config, or check --model-dir"
    )
    assert raised.value.exit_code == 2
