"""``recsys-dist evaluate`` on a real local cluster: every row once, exact metrics, the
report, baselines and the rejections.

The weak model lives on S3 (moto's server): it is trained into an ``s3://`` model dir,
resumed from its S3 checkpoint, evaluated with ``--out s3://`` and used as a baseline
from S3, both as a model dir and as a ``metrics.json``. The group keys of GAUC, which
need no cluster, are in tests/unit/evaluation/test_evaluate.py.

Covers the ``evaluate`` job (``evaluation/job.py``) and the scoring of every row once on
the cluster (``evaluation/predict.py``)."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess

import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from recsys_dist.data.synth_files import synthesize
from tests.support import command_forks
from tests.support.configs import changed
from tests.support.paths import CLI
from tests.support.refusals import refused_here
from tests.support.run_configs import SMALL_FEATURES as FEATURES
from tests.support.run_configs import small_run_config as write_config

pytestmark = pytest.mark.cluster


def cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return command_forks.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


def rank_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Mann-Whitney AUC from midranks (an independent check of the evaluator)."""
    values, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    midranks = ends - (counts - 1) / 2.0
    ranks = midranks[inverse]
    positives = labels == 1
    p, n = positives.sum(), (~positives).sum()
    return float((ranks[positives].sum() - p * (p + 1) / 2) / (p * n))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, s3_server):
    """(tmp, config, data, weak): ``tmp/model`` trained one epoch, ``weak`` (on S3) 5 steps:
    3, then resumed from its S3 checkpoint for 2 more."""
    tmp = tmp_path_factory.mktemp("evaluate")
    data = tmp / "data"
    synthesize(data, days=3, rows_per_day=8_000, seed=9, rows_per_file=4_000, row_groups_per_file=2)
    config = write_config(tmp, data, mode="in_process")
    weak = f"s3://{s3_server['bucket']}/evaluate-test/weak"
    outputs = {}
    for run, extra in (
        ("model", []),
        (weak, ["--set", "train.max_steps=3"]),
        (weak + " resumed", ["--set", "train.max_steps=5"]),
    ):
        result = cli(
            "train",
            "--config",
            config,
            "--model-dir",
            run.split()[0] if "://" in run else str(tmp / run),
            "--no-eval",
            "--set",
            "train.epochs=1",
            *extra,
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        outputs[run] = result.stdout
    checkpoints = f"{weak}/checkpoints"
    assert (
        "checkpoint step 3: " in outputs[weak]
        and f" to {checkpoints}/ckpt-000000000003" in outputs[weak]
    ), outputs[weak]
    assert "uploaded in" in outputs[weak]
    resumed = outputs[weak + " resumed"]
    assert f"resume   from {checkpoints}/ckpt-000000000003: step 3," in resumed, resumed
    assert "checkpoint step 5: " in resumed, resumed
    keys = {
        o["Key"]
        for o in s3_server["client"].list_objects_v2(
            Bucket=s3_server["bucket"], Prefix="evaluate-test/weak/"
        )["Contents"]
    }
    assert "evaluate-test/weak/checkpoints/ckpt-000000000005/_COMPLETE" in keys
    assert {"evaluate-test/weak/train_result.json", "evaluate-test/weak/config.yaml"} <= keys
    assert any(k.startswith("evaluate-test/weak/train/events.out.tfevents") for k in keys)
    return tmp, config, data, weak


def test_evaluate_scores_every_row_once_with_exact_metrics_and_a_report(trained):
    tmp, config, data, _ = trained
    out = tmp / "eval"
    result = cli(
        "evaluate",
        "--config",
        config,
        "--model-dir",
        str(tmp / "model"),
        "--dates",
        "2026-01-03",
        "--out",
        str(out),
        "--quiet",
        "--set",
        "evaluation.group_column=user_id",
        "--set",
        "evaluation.slice_columns=[C2, C21]",
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"report   {out}/report.html" in result.stdout
    metrics = json.loads((out / "metrics.json").read_text())
    predictions = pq.read_table(out / "predictions.parquet").to_pydict()
    day = ds.dataset(str(data / "dt=2026-01-03"), format="parquet").to_table()
    assert metrics["rows"] == day.num_rows == 8_000
    row_ids = np.asarray(predictions["row_id"])
    assert len(np.unique(row_ids)) == len(row_ids) == 8_000  # every row exactly once
    click = metrics["labels"]["click"]
    # the oracle AUC against an independent rank computation on the raw Parquet columns
    oracle = rank_auc(day.column("click").to_numpy(), day.column("oracle_logit").to_numpy())
    assert abs(click["oracle"]["auc"] - oracle) < 1e-6
    # the model's AUC from its own saved predictions, independently
    model_auc = rank_auc(
        np.asarray(predictions["label_click"]), np.asarray(predictions["logit_click"])
    )
    assert abs(click["auc"] - model_auc) < 1e-6
    assert 0.5 < click["auc"] < click["oracle"]["auc"]
    assert click["gauc"]["groups"] > 0 and click["gauc"]["skipped_groups"] > 0
    assert {s["value"] for s in click["slices"]["C21"]} and len(click["slices"]["C2"]) >= 2
    assert click["calibration"]["bins"] and click["normalized_entropy"] < 1.0
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and 'src="http' not in html


def test_baseline_model_and_baseline_metrics_give_deltas_and_a_bootstrap_interval(
    trained, s3_server
):
    tmp, config, _, weak = trained
    weak_out = f"s3://{s3_server['bucket']}/evaluate-test/eval_weak"
    first = cli("evaluate", "--config", config, "--model-dir", weak, "--out", weak_out, "--quiet")
    assert first.returncode == 0, first.stderr[-2000:]
    assert f"report   {weak_out}/report.html" in first.stdout
    assert "(step 5)" in first.stdout  # the resumed run's last checkpoint
    keys = {
        o["Key"]
        for o in s3_server["client"].list_objects_v2(
            Bucket=s3_server["bucket"], Prefix="evaluate-test/eval_weak/"
        )["Contents"]
    }
    assert keys == {
        f"evaluate-test/eval_weak/{name}"
        for name in ("metrics.json", "predictions.parquet", "report.html")
    }
    for baseline in (weak, f"{weak_out}/metrics.json"):  # a model dir, a metrics.json
        out = tmp / f"cmp_{pathlib.Path(baseline).name}"
        result = cli(
            "evaluate",
            "--config",
            config,
            "--model-dir",
            str(tmp / "model"),
            "--out",
            str(out),
            "--baseline",
            baseline,
            "--quiet",
        )
        assert result.returncode == 0, result.stderr[-2000:]
        comparison = json.loads((out / "metrics.json").read_text())["comparison"]
        entry = comparison["labels"]["click"]
        boot = entry["bootstrap"]
        assert entry["delta"]["auc"] > 0  # 1 epoch beats 5 steps
        assert boot["low"] <= boot["delta"] <= boot["high"]
        assert abs(boot["delta"] - entry["delta"]["auc"]) < 1e-9
        assert "vs baseline: AUC +" in result.stdout


def test_without_config_evaluate_reads_the_runs_own_local_or_on_s3(trained, tmp_path, capsys):
    tmp, _, _, weak = trained
    for run in (str(tmp / "model"), weak):
        out = tmp_path / run.replace("/", "_")
        result = cli(
            "evaluate", "--model-dir", run, "--dates", "2026-01-03", "--out", str(out), "--quiet"
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        assert json.loads((out / "metrics.json").read_text())["rows"] == 8_000
    nothing = tmp_path / "not-a-run"
    nothing.mkdir()
    missing = refused_here(
        capsys, "evaluate", "--model-dir", str(nothing), "--out", str(tmp_path / "x")
    )
    assert missing.returncode == 2
    assert missing.stderr == (
        f"error: {nothing}/config.yaml: not found, and no --config was "
        "given; it is written when train starts: pass --config, or "
        "check --model-dir\n"
    )


def test_evaluate_rejections_name_the_problem(trained, tmp_path, capsys):
    tmp, config, data, _ = trained
    model = str(tmp / "model")
    missing = refused_here(
        capsys,
        "evaluate",
        "--config",
        config,
        "--model-dir",
        model,
        "--out",
        str(tmp_path / "a"),
        "--set",
        "evaluation.slice_columns=[country]",
    )
    assert missing.returncode == 3
    assert "'country'" in missing.stderr and "evaluation.slice_columns" in missing.stderr
    empty = refused_here(
        capsys,
        "evaluate",
        "--config",
        config,
        "--model-dir",
        model,
        "--out",
        str(tmp_path / "b"),
        "--dates",
        "2027-01-01",
    )
    assert empty.returncode != 0 and "2027-01-01" in empty.stderr, empty.stderr
    other = tmp_path / "other"
    other.mkdir()
    resized = write_config(
        other, data, mode="in_process", features=changed(FEATURES, {"tables.big.rows": 5000})
    )
    other_size = refused_here(
        capsys, "evaluate", "--config", resized, "--model-dir", model, "--out", str(tmp_path / "c")
    )
    assert other_size.returncode == 2
    assert "table 'big' is 4000 x 8 in the checkpoint but 5000 x 8" in other_size.stderr
    wider = cli(
        "evaluate",
        "--config",
        config,
        "--model-dir",
        model,
        "--out",
        str(tmp_path / "e"),
        "--set",
        "model.params.hidden_units=[64, 16]",
    )
    assert wider.returncode == 2 and "does not fit the model of" in wider.stderr, wider.stderr
    # weights are named by their checkpoint key, with both shapes
    assert re.search(
        r"model/deep/stack/0/kernel is \[\d+, \d+\] in the checkpoint, \[\d+, 64\] in the model",
        wider.stderr,
    ), wider.stderr
    none = refused_here(
        capsys,
        "evaluate",
        "--config",
        config,
        "--model-dir",
        str(tmp_path / "nothing"),
        "--out",
        str(tmp_path / "d"),
    )
    assert none.returncode == 2 and "no complete checkpoint" in none.stderr
    bucket = refused_here(
        capsys,
        "evaluate",
        "--config",
        config,
        "--model-dir",
        model,
        "--out",
        "s3://no-such-bucket-eval/out",
    )
    assert bucket.returncode == 2 and "Traceback" not in bucket.stderr, bucket.stderr[-2000:]
    assert (
        "error: s3://no-such-bucket-eval/out: cannot write the evaluation report there: "
        "The specified bucket does not exist"
    ) in bucket.stderr
