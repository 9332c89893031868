"""Daily retraining on a real local cluster: three consecutive synthetic days.

Day 1 publishes the first model; day 2 warm-starts from it and publishes; day 3 trains
on inverted labels and the gate keeps day 2 current. Reruns change nothing, a missing
partition fails without publishing, and feature-config drift is handled as
documented (new table fresh, removed table ignored with a warning, resized table
refused by default). Covers one day of retraining (``retrain/daily.py``); its date
templates are in tests/unit/retrain/test_templates.py.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import re
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recsys_dist.data.synth_files import synthesize
from tests.support import command_forks
from tests.support.configs import DELETE, changed
from tests.support.paths import CLI, REPO
from tests.support.refusals import refused_here
from tests.support.run_configs import SMALL_FEATURES as FEATURES
from tests.support.run_configs import small_run_config

pytestmark = pytest.mark.cluster

PIPELINE = str(REPO / "pipelines" / "daily_retrain.py")


def write_config(
    directory: pathlib.Path,
    data: pathlib.Path,
    root: pathlib.Path | None,
    features: dict = FEATURES,
) -> str:
    """The retraining config of these tests: the shared small run with one worker and one
    parameter server inside each command's process, one epoch, and ``retrain.root`` (no
    ``retrain:`` section when ``root`` is None). These tests are about the daily cycle
    (warm start, gate, publish); cluster sizes and processes are covered by
    tests/cluster/test_train.py and test_fault_tolerance.py, and every server process
    costs seconds of start-up."""
    changes = {"train.epochs": 1, "cluster.workers": 1, "cluster.ps": 1}
    if root is not None:
        changes["retrain"] = {"root": str(root), "gate": {"max_drop": 0.002}}
    return small_run_config(directory, data, mode="in_process", features=features, changes=changes)


def retrain(
    config: str, date: str, *extra: str, pipeline: bool = False
) -> subprocess.CompletedProcess:
    command = [sys.executable, PIPELINE] if pipeline else [CLI, "retrain"]
    return command_forks.run(
        [*command, "--config", config, "--date", date, *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )


def snapshot(root: pathlib.Path) -> dict[str, bytes]:
    """Every file under published/ and CURRENT, with its bytes."""
    files = {p: p.read_bytes() for p in (root / "published").rglob("*") if p.is_file()}
    files[root / "CURRENT"] = (root / "CURRENT").read_bytes()
    return {str(p.relative_to(root)): b for p, b in files.items()}


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("retrain")
    data = tmp / "data"
    synthesize(data, days=4, rows_per_day=8_000, seed=4, rows_per_file=4_000, row_groups_per_file=2)
    # Day 3 with its click labels inverted: a model trained on it learns the signal
    # backwards, so it is clearly worse on day 4 however weak the honest model is
    # (permuted labels were tried first: on 8k rows a day the honest model is close
    # enough to chance that a permuted one sometimes passed the gate).
    inverted = tmp / "inverted"
    shutil.copytree(data, inverted)
    for path in sorted((inverted / "dt=2026-01-03").glob("*.parquet")):
        table = pq.read_table(path)
        index = table.schema.get_field_index("click")
        table = table.set_column(index, "click", pa.array(1 - table.column("click").to_numpy()))
        pq.write_table(table, path, row_group_size=2_000)
    root = tmp / "root"
    config = write_config(tmp, data, root)
    outputs = {}
    outputs[1] = retrain(config, "2026-01-01")
    outputs[2] = retrain(config, "2026-01-02", pipeline=True)  # the pipeline script
    outputs[3] = retrain(config, "2026-01-03", "--data", str(inverted), "--set", "train.epochs=3")
    return tmp, config, root, inverted, outputs


def test_day_two_warm_starts_from_day_one_and_publishes(days):
    _, _, root, _, outputs = days
    for day in (1, 2):
        assert outputs[day].returncode == 0, outputs[day].stdout[-3000:] + outputs[day].stderr
        # A step-interval checkpoint on the last step is not written again at the end
        # (day 1's 32 steps with checkpoint_every_steps 30 end on such a checkpoint).
        saves = re.findall(r"^checkpoint step ([\d,]+):", outputs[day].stdout, re.M)
        assert saves and len(saves) == len(set(saves)), outputs[day].stdout
    first = json.loads((root / "published/2026-01-01/manifest.json").read_text())
    second = json.loads((root / "published/2026-01-02/manifest.json").read_text())
    assert first["parent"] is None and second["parent"] == "2026-01-01"
    assert first["warm_started_from"] is None
    assert second["warm_started_from"] == first["checkpoint"]
    warm = re.search(r"^warm +start from (\S+): step ([\d,]+)", outputs[2].stdout, re.M)
    assert warm and warm.group(1) == first["checkpoint"]
    assert int(warm.group(2).replace(",", "")) == first["step"] > 0  # restored step
    assert second["step"] == 2 * first["step"]  # same rows per day: it went on from there
    for name in ("export/saved_model.pb", "manifest.json", "config.yaml", "_SUCCESS"):
        assert (root / "published/2026-01-02" / name).exists()
    assert second["train_dates"] == "2026-01-02" and second["eval_dates"] == "2026-01-03"
    assert second["config_sha256"] and second["code_version"].startswith("0.1.0")
    assert "auc" in second["metrics"]["click"]
    boot = second["comparison"]["labels"]["click"]["bootstrap"]  # same rows, both models
    assert boot["low"] <= boot["delta"] <= boot["high"]


def test_a_model_trained_on_inverted_labels_is_not_published(days):
    _, _, root, _, outputs = days
    assert outputs[3].returncode == 5, outputs[3].stdout[-3000:] + outputs[3].stderr
    assert "NOT published" in outputs[3].stdout and "2026-01-02 stays current" in outputs[3].stdout
    assert not (root / "published/2026-01-03").exists()
    assert (root / "CURRENT").read_text().strip() == "2026-01-02"


def test_rerunning_a_day_changes_nothing(days):
    _, config, root, inverted, _ = days
    before = snapshot(root)
    again = retrain(config, "2026-01-02")
    assert again.returncode == 0 and "already published" in again.stdout
    gated = retrain(config, "2026-01-03", "--data", str(inverted), "--set", "train.epochs=3")
    assert gated.returncode == 5 and "already decided" in gated.stdout
    assert "cluster " not in again.stdout + gated.stdout  # nothing started
    assert snapshot(root) == before


def test_backfill_runs_days_in_order_and_skips_what_is_done(days, capsys):
    _, config, root, _, _ = days
    before = snapshot(root)
    result = command_forks.run(
        [CLI, "backfill", "--config", config, "--from", "2026-01-01", "--to", "2026-01-02"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.index("2026-01-01 is already published") < result.stdout.index(
        "2026-01-02 is already published"
    )
    assert "backfill 2026-01-01 already_published, 2026-01-02 already_published" in result.stdout
    assert snapshot(root) == before
    backwards = refused_here(
        capsys, "backfill", "--config", config, "--from", "2026-01-03", "--to", "2026-01-01"
    )
    assert backwards.returncode == 2 and "before --from" in backwards.stderr


def test_a_missing_partition_fails_and_publishes_nothing(days, capsys):
    _, config, root, _, _ = days
    before = snapshot(root)
    missing = refused_here(capsys, "retrain", "--config", config, "--date", "2026-01-09")
    assert missing.returncode == 3, missing.stdout + missing.stderr
    assert "dt=2026-01-09" in missing.stderr
    assert not (root / "published/2026-01-09").exists() and snapshot(root) == before


def test_feature_drift_new_table_fresh_removed_ignored_resized_refused(days, tmp_path):
    tmp, config, root, _, _ = days
    drift_root = tmp_path / "root"
    fresh_day = shutil.ignore_patterns("2026-01-03")  # the gated day-3 run is not copied
    shutil.copytree(root, drift_root, ignore=fresh_day)
    drifted = tmp_path / "drift"
    drifted.mkdir()
    # table tag and its feature tags removed, table extra and its feature C5 new
    features = changed(
        FEATURES,
        {
            "tables.tag": DELETE,
            "tables.extra": {"rows": 700, "dim": 8},
            "features.tags": DELETE,
            "features.C5": {"kind": "categorical", "dtype": "int64", "table": "extra"},
        },
    )
    result = retrain(write_config(drifted, tmp / "data", drift_root, features), "2026-01-03")
    assert result.returncode in (0, 5), result.stdout[-3000:] + result.stderr
    assert re.search(r"^warning .*new and start fresh: .*table extra", result.stdout, re.M)
    assert re.search(r"^warning  ignored .*tag", result.stdout, re.M)
    resized = tmp_path / "resized"
    resized.mkdir()
    resized_config = write_config(
        resized, tmp / "data", tmp_path / "root2", changed(FEATURES, {"tables.big.rows": 5000})
    )
    shutil.copytree(root, tmp_path / "root2", ignore=fresh_day)
    refused = retrain(resized_config, "2026-01-03")
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr
    assert (
        "table 'big' is 4000 x 8 in" in refused.stderr
        and "set retrain.on_table_resize: reinitialize" in refused.stderr
    )
    assert not (tmp_path / "root2/published/2026-01-03").exists()


def test_retrain_rejections_name_the_key(days, tmp_path, capsys):
    tmp, config, _, _, _ = days
    no_section = write_config(tmp_path, tmp / "data", None)
    result = refused_here(capsys, "retrain", "--config", no_section, "--date", "2026-01-02")
    assert result.returncode == 2 and "retrain: missing" in result.stderr, result.stderr
    day = ("retrain", "--config", config, "--date", "2026-01-02")
    bad = refused_here(capsys, *day, "--set", "retrain.train_dates={day-1}")
    assert bad.returncode == 2 and "retrain.train_dates" in bad.stderr, bad.stderr
    stopping = refused_here(
        capsys,
        *day,
        "--set",
        "data.validation={dates: 2026-01-03}",
        "--set",
        "train.epochs=3",
        "--set",
        "train.early_stopping={patience: 1}",
    )
    assert stopping.returncode == 2, stopping.stderr
    assert "train.early_stopping: retrain does not stop early" in stopping.stderr


def test_a_held_day_is_gated_and_published_by_the_next_run(days):
    """Default windows hold out the next day, which lands a day later: the run for D
    trains D and holds it; the run for D+1 first gates and publishes D."""
    tmp, config, root, _, _ = days
    held = retrain(config, "2026-01-04")  # its held-out day 2026-01-05 is not there yet
    assert held.returncode == 0, held.stdout[-3000:] + held.stderr
    assert "held     2026-01-04 trained" in held.stdout
    assert not (root / "published/2026-01-04").exists()
    synthesize(
        tmp / "data",
        days=1,
        rows_per_day=8_000,
        seed=4,
        rows_per_file=4_000,
        row_groups_per_file=2,
        start_date=datetime.date(2026, 1, 5),
    )  # it lands
    nxt = retrain(config, "2026-01-05")
    assert nxt.returncode == 0, nxt.stdout[-3000:] + nxt.stderr
    assert "finish   2026-01-04 was held" in nxt.stdout
    decided = (root / "published/2026-01-04/_SUCCESS").exists() or (
        root / "runs/2026-01-04/decision.json"
    ).exists()
    assert decided, nxt.stdout[-3000:]
    assert "held     2026-01-05 trained" in nxt.stdout  # and 2026-01-05 waits for 01-06


def test_a_root_on_s3_publishes_warm_starts_and_reruns(days, s3_server, fault_proxy, monkeypatch):
    """The whole daily cycle with ``retrain.root`` on S3 (moto, behind the fault proxy):
    runs, checkpoints, eval reports, publications and CURRENT are all written there; day 2
    warm-starts from day 1's S3 checkpoint and is gated against it (its config read back
    from S3). Day 2's publication is first throttled past its retries: the day fails
    naming the URI, day 1 stays CURRENT, and the rerun publishes day 2."""
    from recsys_dist import storage_io
    from tests.support.s3_faults import Fault

    monkeypatch.setenv("RECSYS_DIST_S3_REQUEST_TIMEOUT", "60")  # the proxy's big uploads
    _, config, _, _, _ = days
    root = f"s3://{s3_server['bucket']}/retrain-root"
    extra = ("--set", f"retrain.root={root}", "--set", "retrain.gate.max_drop=1.0")
    first = retrain(config, "2026-01-01", *extra)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr
    fault_proxy.faults = [Fault("503", method="PUT", key="/published/2026-01-02/_SUCCESS$")]
    throttled = retrain(config, "2026-01-02", *extra)
    assert throttled.returncode == 2, throttled.stdout[-3000:] + throttled.stderr
    assert throttled.stderr.strip().splitlines()[-1] == (
        f"error: {root}/published/2026-01-02/_SUCCESS: cannot write it: 503 SlowDown: Please "
        "reduce your request rate. (after 3 attempts)"
    ), throttled.stderr[-2000:]
    fault_proxy.faults = []
    assert storage_io.read_text(f"{root}/CURRENT") == "2026-01-01\n"
    assert not storage_io.exists(f"{root}/published/2026-01-02/_SUCCESS")
    second = retrain(config, "2026-01-02", *extra)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr
    manifests = [
        json.loads(storage_io.read_text(f"{root}/published/{d}/manifest.json"))
        for d in ("2026-01-01", "2026-01-02")
    ]
    assert manifests[0]["checkpoint"].startswith(f"{root}/runs/2026-01-01/checkpoints/ckpt-")
    assert manifests[1]["parent"] == "2026-01-01"
    assert manifests[1]["warm_started_from"] == manifests[0]["checkpoint"]
    assert f"warm     start from {manifests[0]['checkpoint']}: step" in throttled.stdout
    assert manifests[1]["step"] == 2 * manifests[0]["step"]  # it went on from day 1
    boot = manifests[1]["comparison"]["labels"]["click"]["bootstrap"]  # vs day 1, same rows
    assert boot["low"] <= boot["delta"] <= boot["high"]
    assert storage_io.read_text(f"{root}/CURRENT") == "2026-01-02\n"
    for path in (
        "published/2026-01-02/_SUCCESS",
        "published/2026-01-02/config.yaml",
        "published/2026-01-02/export/saved_model.pb",
        "published/2026-01-02/export/assets.extra/export.json",
        "runs/2026-01-02/eval/report.html",
        "runs/2026-01-02/eval_previous/metrics.json",
        "runs/2026-01-02/warm_start.json",
        "runs/2026-01-02/train_result.json",
    ):
        assert storage_io.exists(f"{root}/{path}"), path
    again = retrain(config, "2026-01-02", *extra)
    assert again.returncode == 0 and "already published" in again.stdout, again.stderr
    assert "cluster " not in again.stdout
