"""``pipelines/offline_eval.py`` on a hand-built retraining root with two real models.

Two models are trained with ``recsys-dist train`` (A on day 1, B on days 1..2) and
published by hand the way ``recsys-dist retrain`` lays them out (config, features,
manifest, ``_SUCCESS`` last). The root is then moved to S3 (moto's server), so the
manifests' checkpoint paths are found again under the moved root. The script scores
both on day 4 on a real local cluster, from their S3 checkpoints, and writes per-model
reports and one comparison with B's AUC delta vs A and its bootstrap interval. The rejections (a date not published, a root with no published
model, an incomplete publication) are checked on roots without trained models.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

import pytest

from recsys_dist.data.synth import synthesize
from tests.conftest import upload_dir
from tests.run_configs import SMALL_FEATURES as FEATURES
from tests.run_configs import small_run_config as write_config

pytestmark = pytest.mark.cluster

REPO = pathlib.Path(__file__).resolve().parents[1]
CLI = str(pathlib.Path(sys.executable).parent / "recsys-dist")
SCRIPT = str(REPO / "pipelines" / "offline_eval.py")
MODELS = {"2026-01-01": "2026-01-01", "2026-01-02": "2026-01-01..2026-01-02"}
# Small batches and brisk learning rates: one epoch on 4,000-8,000 rows learns enough
# for an AUC clearly above 0.5 on the held-out day.
TRAIN_SETTINGS = ["train.epochs=1", "input.batch_size=64", "train.checkpoint_every_steps=1000",
                  "train.dense_optimizer={name: adam, learning_rate: 0.01}",
                  "train.embedding_optimizer={name: adagrad, learning_rate: 0.3}"]


def offline_eval(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def publish(root: pathlib.Path, date: str, manifest: dict, run: pathlib.Path | None) -> None:
    """Writes ``root/published/<date>/`` like ``recsys-dist retrain`` (no export)."""
    directory = root / "published" / date
    directory.mkdir(parents=True)
    for name in ("config.yaml", "features.yaml"):
        if run is not None:
            shutil.copy(run / name, directory / name)
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2))
    (directory / "_SUCCESS").write_text(date + "\n")


@pytest.fixture(scope="module")
def root(tmp_path_factory, s3_server):
    tmp = tmp_path_factory.mktemp("offline_eval")
    data = tmp / "data"
    synthesize(data, days=4, rows_per_day=4000, seed=3, rows_per_file=2000,
               row_groups_per_file=2)
    config = write_config(tmp, data, mode="in_process")
    # The fault-tolerance config's 2M-row table only makes checkpoints slow here.
    (tmp / "features.yaml").write_text(FEATURES.replace("huge: {rows: 2000000",
                                                        "huge: {rows: 20000"))
    root = tmp / "root"
    parent = None
    for date, window in MODELS.items():
        run = root / "runs" / date
        settings = [x for s in [f"data.train={{dates: '{window}'}}", *TRAIN_SETTINGS]
                    for x in ("--set", s)]
        result = subprocess.run([CLI, "train", "--config", config, "--no-eval", "--model-dir",
                                 str(run), *settings], capture_output=True, text=True,
                                timeout=600)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        checkpoint = sorted(run.glob("checkpoints/ckpt-*/_COMPLETE"))[-1].parent
        step = json.loads((checkpoint / "state.json").read_text()).get("step")
        publish(root, date, {"date": date, "model": "dcn_v2", "labels": ["click"],
                             "train_dates": window, "eval_dates": "2026-01-03",
                             "checkpoint": str(checkpoint), "step": step, "parent": parent},
                run)
        parent = date
    # A publication cut short (no _SUCCESS) is never evaluated.
    (root / "published" / "2026-01-03").mkdir()
    (root / "published" / "2026-01-03" / "manifest.json").write_text("{}")
    (root / "CURRENT").write_text("2026-01-02\n")
    url = upload_dir(s3_server["client"], s3_server["bucket"], root, "offline-eval-root")
    shutil.rmtree(root)  # only the S3 copy is left
    return url


def test_offline_eval_compares_published_models_on_the_same_rows(root, tmp_path, s3_server):
    from recsys_dist import storage_io

    given = f"s3://{s3_server['bucket']}/offline-eval-out"  # the reports go to S3 too
    result = offline_eval("--root", root, "--dates", "2026-01-04", "--out", given)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"report   {given}/comparison.html" in result.stdout
    assert "reference" in result.stdout and "2026-01-02*" in result.stdout
    out = tmp_path / "out"
    storage_io.download_dir(given, str(out))

    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["dates"] == "2026-01-04" and comparison["rows"] == 4000
    assert comparison["reference"] == "2026-01-01" and comparison["current"] == "2026-01-02"
    first, second = comparison["models"]
    assert [first["date"], second["date"]] == list(MODELS)
    assert (first["parent"], second["parent"]) == (None, "2026-01-01")
    assert first["step"] > 0 and second["step"] > first["step"]
    assert (first["current"], second["current"]) == (False, True)
    assert first["trained_on_eval_dates"] is False
    for model in (first, second):  # scored from the checkpoints under the moved (S3) root
        assert model["checkpoint"].startswith(f"{root}/runs/{model['date']}/checkpoints/ckpt-")
        click = model["labels"]["click"]
        assert 0.5 < click["auc"] < 1.0, model
        assert click["logloss"] > 0 and click["normalized_entropy"] > 0
        assert click["calibration_ratio"] > 0
        assert model["rows"] == 4000
        report = out / model["date"]
        for name in ("metrics.json", "predictions.parquet", "report.html"):
            assert (report / name).is_file(), report / name
    assert first["labels"]["click"]["delta"] is None
    assert first["labels"]["click"]["bootstrap"] is None
    delta = second["labels"]["click"]["delta"]["auc"]
    boot = second["labels"]["click"]["bootstrap"]
    assert abs(delta - (second["labels"]["click"]["auc"] - first["labels"]["click"]["auc"])) \
        < 1e-9
    assert abs(boot["delta"] - delta) < 1e-9
    assert boot["low"] <= boot["delta"] <= boot["high"] and boot["replicates"] > 0
    # The second model's own report compares it against the reference's metrics.json.
    own = json.loads((out / "2026-01-02" / "metrics.json").read_text())["comparison"]
    assert own["baseline"] == f"{given}/2026-01-01/metrics.json"

    html = (out / "comparison.html").read_text()
    assert html.count("data:image/png;base64,") == 1
    assert 'src="http' not in html and "href=\"http" not in html
    assert "2026-01-01/report.html" in html and "2026-01-02/report.html" in html


def test_a_date_that_is_not_published_is_named_with_the_published_ones(tmp_path):
    root = tmp_path / "root"
    for date in ("2026-01-01", "2026-01-02"):
        publish(root, date, {"date": date, "checkpoint": "unused"}, None)
    (root / "published" / "2026-01-03").mkdir()  # incomplete: no _SUCCESS
    result = offline_eval("--root", str(root), "--dates", "2026-01-04", "--models",
                          "2026-01-02,2026-01-05", "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert "2026-01-05" in result.stderr
    assert "published models: 2026-01-01, 2026-01-02" in result.stderr
    incomplete = offline_eval("--root", str(root), "--dates", "2026-01-04", "--models",
                              "2026-01-03", "--out", str(tmp_path / "out"))
    assert incomplete.returncode == 2
    assert "2026-01-03 (incomplete: no _SUCCESS)" in incomplete.stderr
    assert not (tmp_path / "out").exists()


def test_a_root_without_published_models_is_rejected(tmp_path):
    empty = tmp_path / "empty"
    (empty / "runs" / "2026-01-01").mkdir(parents=True)
    result = offline_eval("--root", str(empty), "--dates", "2026-01-04", "--out",
                          str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr[-2000:]
    assert "no published model" in result.stderr and str(empty / "published") in result.stderr
    assert "Traceback" not in result.stderr


def test_incomplete_publications_name_the_missing_file(tmp_path):
    from recsys_dist.retrain.offline_eval import OfflineEvalError, evaluate_published

    def expect(root: pathlib.Path, *fragments: str) -> None:
        with pytest.raises(OfflineEvalError) as error:
            evaluate_published(str(root), "2026-01-04", str(tmp_path / "out"))
        for fragment in fragments:
            assert fragment in str(error.value), str(error.value)

    no_manifest = tmp_path / "a"
    publish(no_manifest, "2026-01-01", {}, None)
    (no_manifest / "published" / "2026-01-01" / "manifest.json").unlink()
    expect(no_manifest, str(no_manifest / "published" / "2026-01-01" / "manifest.json"),
           "missing")

    checkpoint = tmp_path / "b" / "runs" / "2026-01-01" / "checkpoints" / "ckpt-000000000010"
    checkpoint.mkdir(parents=True)
    no_config = tmp_path / "b"
    publish(no_config, "2026-01-01", {"date": "2026-01-01", "checkpoint": str(checkpoint)},
            None)
    expect(no_config, str(no_config / "published" / "2026-01-01" / "config.yaml"), "missing")

    gone = tmp_path / "c"
    publish(gone, "2026-01-01", {"date": "2026-01-01", "checkpoint": str(
        gone / "runs" / "2026-01-01" / "checkpoints" / "ckpt-000000000010")}, None)
    expect(gone, "ckpt-000000000010", "does not exist")

    with pytest.raises(OfflineEvalError, match="2026-01-09..2026-01-04"):
        evaluate_published(str(no_config), "2026-01-09..2026-01-04", str(tmp_path / "out"))
