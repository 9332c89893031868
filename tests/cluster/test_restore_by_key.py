"""A model with dynamic tables of different capacities, restored from its checkpoint by
every command that reads one: ``evaluate``, ``export``, a warm start into more servers and
a restart on fewer. Each saved weight is paired with the model's by its checkpoint key;
``tests/unit/models/test_dynamic_table.py`` checks the pairing itself on 1 to 3 shards.

The run: ``user`` (capacity 400 a shard, about 300 users in the data) and ``item``
(capacity 2,000 a shard, about 1,000 ids), a hashed table shared by two features, in a
cluster inside the command's process (real servers; nothing is killed here)."""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
import yaml

from recsys_dist.data.synth_files import synthesize
from tests.support import command_forks
from tests.support.paths import CLI

pytestmark = pytest.mark.cluster

FEATURES = {
    "tables": {
        "user": {"kind": "dynamic", "dim": 8, "capacity_per_shard": 400},
        "item": {"kind": "dynamic", "dim": 8, "capacity_per_shard": 2000},
        "small": {"rows": 500, "dim": 8},
    },
    "features": {
        "user_id": {"kind": "categorical", "dtype": "int64", "table": "user"},
        "C3": {"kind": "categorical", "dtype": "int64", "table": "item"},
        "C2": {"kind": "categorical", "dtype": "int64", "table": "small"},
        "C8": {"kind": "categorical", "dtype": "int64", "table": "small"},
    },
    "labels": {"click": {}},
}


def cli(*args: str) -> subprocess.CompletedProcess:
    result = command_forks.run([CLI, *args], capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, (args, result.stdout[-3000:], result.stderr[-3000:])
    return result


def eval_auc(model_dir: pathlib.Path) -> float:
    result = json.loads((model_dir / "train_result.json").read_text())
    return result["eval"]["labels"]["click"]["auc"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Trains on 2 servers; returns (work dir, config, model dir)."""
    work = tmp_path_factory.mktemp("by_key")
    synthesize(work / "data", days=2, rows_per_day=6_000, seed=3, rows_per_file=3_000, users=300)
    (work / "features.yaml").write_text(yaml.safe_dump(FEATURES))
    config = {
        "features": "features.yaml",
        "data": {
            "path": str(work / "data"),
            "train": {"dates": "2026-01-01"},
            "eval": {"dates": "2026-01-02"},
        },
        "input": {"batch_size": 256},
        "model": {
            "name": "dcn_v2",
            "labels": ["click"],
            "params": {"cross_layers": 1, "low_rank": 4, "hidden_units": [16]},
        },
        "train": {"steps_per_call": 5, "log_every_seconds": 1000},
        "cluster": {"mode": "in_process", "workers": 1, "ps": 2},
    }
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    cli("train", "--config", str(work / "config.yaml"), "--model-dir", str(work / "run"), "-q")
    return work, str(work / "config.yaml"), work / "run"


def test_the_table_with_more_room_saves_more_rows_than_the_other_holds(run):
    """The case that pairing by shape got wrong: item's saved rows on a shard exceed
    user's capacity, and user's saved rows fit item's."""
    import tensorflow as tf

    work, _, model_dir = run
    newest = sorted((model_dir / "checkpoints").glob("ckpt-*"))[-1]
    shapes = tf.train.load_checkpoint(str(newest / "variables")).get_variable_to_shape_map()
    rows = {
        table: [
            shapes[
                f"model/embeddings/_dynamic_tables/{table}/shards/{s}/emb/.ATTRIBUTES/"
                "VARIABLE_VALUE"
            ][0]
            for s in range(2)
        ]
        for table in ("user", "item")
    }
    assert max(rows["user"]) < 400 < min(rows["item"]), rows


def test_evaluate_scores_as_the_training_run_did(run):
    """The run's own evaluation used the training objects; ``evaluate`` restores the
    checkpoint into a new model: the same weights score the same rows in the same
    order, so the AUC agrees to float32 rounding of the scores."""
    work, config, model_dir = run
    cli("evaluate", "--config", config, "--model-dir", str(model_dir), "--out", str(work / "ev"))
    metrics = json.loads((work / "ev" / "metrics.json").read_text())
    assert metrics["labels"]["click"]["auc"] == pytest.approx(eval_auc(model_dir), abs=1e-6)


def test_export_takes_both_tables(run):
    work, config, model_dir = run
    out = cli(
        "export", "--config", config, "--model-dir", str(model_dir), "--out", str(work / "ex")
    )
    assert (work / "ex" / "saved_model.pb").exists(), out.stdout


def test_a_warm_start_on_three_servers_then_a_restart_on_one(run):
    """A warm start re-shards both tables onto 3 servers; the new model dir keeps its 3
    shards when it is resumed on 1 server (one more pass), and both runs evaluate."""
    work, config, model_dir = run
    warm = work / "warm"
    cli(
        "train",
        "--config",
        config,
        "--model-dir",
        str(warm),
        "--warm-start",
        str(model_dir),
        "--set",
        "cluster.ps=3",
        "-q",
    )
    assert eval_auc(warm) > 0.5
    cli(
        "train",
        "--config",
        config,
        "--model-dir",
        str(warm),
        "--set",
        "cluster.ps=1",
        "--set",
        "train.epochs=2",
        "-q",
    )
    result = json.loads((warm / "train_result.json").read_text())
    assert result["eval"]["labels"]["click"]["auc"] > 0.5
    cli("evaluate", "--config", config, "--model-dir", str(warm), "--out", str(work / "ev_warm"))
