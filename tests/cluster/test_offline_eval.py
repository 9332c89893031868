"""``pipelines/offline_eval.py`` on a hand-built retraining root with two real models.

Two models are trained with ``recsys-dist train`` (A on day 1, B on days 1..2) and
published by hand the way ``recsys-dist retrain`` lays them out (config, features,
manifest, ``_SUCCESS`` last). The root is then moved to S3 (moto's server), so the
manifests' checkpoint paths are found again under the moved root. The script scores
both on day 4 on a real local cluster, from their S3 checkpoints, and writes per-model
reports and one comparison with B's AUC delta vs A and its bootstrap interval.

The rejections (a date not published, a root with no published model, an incomplete
publication) need no trained model: they are in tests/unit/retrain/test_offline_eval.py.
"""

from __future__ import annotations

import json
import shutil

import pytest

from recsys_dist.data.synth_files import synthesize
from tests.support import command_forks
from tests.support.data import upload_dir
from tests.support.paths import CLI
from tests.support.retrain import publish
from tests.support.retrain import run_offline_eval as offline_eval
from tests.support.run_configs import small_run_config as write_config

pytestmark = pytest.mark.cluster

MODELS = {"2026-01-01": "2026-01-01", "2026-01-02": "2026-01-01..2026-01-02"}
# Small batches and brisk learning rates: one epoch on 4,000-8,000 rows learns enough
# for an AUC clearly above 0.5 on the held-out day.
TRAIN_SETTINGS = [
    "train.epochs=1",
    "input.batch_size=64",
    "train.checkpoint_every_steps=1000",
    "train.dense_optimizer={name: adam, learning_rate: 0.01}",
    "train.embedding_optimizer={name: adagrad, learning_rate: 0.3}",
]


@pytest.fixture(scope="module")
def root(tmp_path_factory, s3_server):
    tmp = tmp_path_factory.mktemp("offline_eval")
    data = tmp / "data"
    synthesize(data, days=4, rows_per_day=4000, seed=3, rows_per_file=2000, row_groups_per_file=2)
    config = write_config(tmp, data, mode="in_process")
    root = tmp / "root"
    parent = None
    for date, window in MODELS.items():
        run = root / "runs" / date
        settings = [
            x for s in [f"data.train={{dates: '{window}'}}", *TRAIN_SETTINGS] for x in ("--set", s)
        ]
        result = command_forks.run(
            [CLI, "train", "--config", config, "--no-eval", "--model-dir", str(run), *settings],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        checkpoint = sorted(run.glob("checkpoints/ckpt-*/_COMPLETE"))[-1].parent
        step = json.loads((checkpoint / "state.json").read_text()).get("step")
        publish(
            root,
            date,
            {
                "date": date,
                "model": "dcn_v2",
                "labels": ["click"],
                "train_dates": window,
                "eval_dates": "2026-01-03",
                "checkpoint": str(checkpoint),
                "step": step,
                "parent": parent,
            },
            run,
        )
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
    assert abs(delta - (second["labels"]["click"]["auc"] - first["labels"]["click"]["auc"])) < 1e-9
    assert abs(boot["delta"] - delta) < 1e-9
    assert boot["low"] <= boot["delta"] <= boot["high"] and boot["replicates"] > 0
    # The second model's own report compares it against the reference's metrics.json.
    own = json.loads((out / "2026-01-02" / "metrics.json").read_text())["comparison"]
    assert own["baseline"] == f"{given}/2026-01-01/metrics.json"

    html = (out / "comparison.html").read_text()
    assert html.count("data:image/png;base64,") == 1
    assert 'src="http' not in html and 'href="http' not in html
    assert "2026-01-01/report.html" in html and "2026-01-02/report.html" in html
