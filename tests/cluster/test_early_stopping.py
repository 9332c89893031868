"""Early stopping on a real local cluster (2 workers + 2 parameter servers on 127.0.0.1).

One run, with its coordinator SIGKILLed right after it scored the second pass and then
rerun: the record goes on where it stopped (every pass scored once, in order), the run
stops once a pass brings no gain, the best pass's checkpoint outlives
``keep_checkpoints: 1``, and the final model is the best pass's: scoring the validation
day with ``recsys-dist evaluate`` gives exactly the best pass's value.

Covers the validation hook of the training loop (``train/validation.py``); the rule
itself is in tests/unit/train/test_early_stopping.py.
"""

from __future__ import annotations

import json
import signal

import pytest
import yaml

from recsys_dist.data.synth_files import synthesize
from tests.support import command_forks
from tests.support.paths import CLI
from tests.support.run_configs import zoo_config
from tests.support.train_run import TrainRun

pytestmark = pytest.mark.cluster


def _config(tmp_path, data) -> str:
    path = zoo_config(tmp_path, data, "deepfm", epochs=8)
    config = yaml.safe_load(open(path))
    config["data"]["validation"] = {"dates": "2026-01-03"}
    config["data"]["eval"] = {"dates": "2026-01-04"}
    # A large table step overfits these 12k rows within a few passes.
    config["train"].update(
        {
            "embedding_optimizer": {
                "name": "adagrad",
                "learning_rate": 0.5,
                "initial_accumulator_value": 0.0001,
            },
            "early_stopping": {"patience": 1},
            "keep_checkpoints": 1,
            "log_every_seconds": 0,
        }
    )
    with open(path, "w") as handle:
        yaml.safe_dump(config, handle)
    return path


def test_a_killed_run_resumes_its_record_stops_and_ends_with_the_best_pass(tmp_path):
    data = tmp_path / "data"
    synthesize(data, days=4, rows_per_day=6_000, seed=11, rows_per_file=3_000)
    config, model_dir = _config(tmp_path, data), tmp_path / "run"
    first = TrainRun(config, model_dir)
    first.wait_for(r"^validate epoch 2: ")
    first.process.send_signal(signal.SIGKILL)
    first.finish()
    second = TrainRun(config, model_dir)
    assert second.finish() == 0, second.output[-3000:]
    assert "resume   from" in second.output

    result = json.loads((model_dir / "train_result.json").read_text())
    record = result["early_stopping"]
    epochs = [entry["epoch"] for entry in record["history"]]
    assert epochs == list(range(1, len(epochs) + 1)), record  # each pass scored once
    best = record["best"]
    assert record["stopped"] and best["epoch"] == epochs[-2], record  # patience 1
    assert [e for e in result["epochs"] if "validation" in e], result["epochs"]
    # keep_checkpoints: 1 keeps the newest; the best pass's is kept beside it
    kept = sorted(p.name for p in (model_dir / "checkpoints").iterdir())
    assert f"ckpt-{best['step']:012d}" in kept and len(kept) == 2, kept

    scored = command_forks.run(
        [
            CLI,
            "evaluate",
            "--model-dir",
            str(model_dir),
            "--out",
            str(tmp_path / "eval"),
            "--set",
            "data.eval={dates: 2026-01-03}",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert scored.returncode == 0, scored.stdout[-2000:] + scored.stderr[-2000:]
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["labels"]["click"]["auc"] == pytest.approx(best["value"], abs=1e-6)


def test_a_config_without_validation_or_passes_chooses_them_then_trains_the_whole_window(
    tmp_path,
):
    """No ``data.validation`` and no ``train.epochs``: the last of the three training days
    chooses the passes in ``passes/``, then a fresh model trains all three days for that
    many passes. The coordinator is SIGKILLed in that second step; the rerun does not
    choose again, resumes the second step and ends with the whole window's model."""
    data = tmp_path / "data"
    synthesize(data, days=4, rows_per_day=4_000, seed=11, rows_per_file=2_000)
    path = _config(tmp_path, data)
    config = yaml.safe_load(open(path))
    del config["data"]["validation"], config["train"]["epochs"]
    config["data"]["train"] = {"dates": "2026-01-01..2026-01-03"}
    config["train"]["checkpoint_every_steps"] = 20
    with open(path, "w") as handle:
        yaml.safe_dump(config, handle)
    model_dir = tmp_path / "run"
    first = TrainRun(path, model_dir)
    first.wait_for(r"^refit    \d+ pass\(es\) over 2026-01-01\.\.2026-01-03$")
    first.wait_for(r"^checkpoint step .* to .*/run/checkpoints/")
    first.process.send_signal(signal.SIGKILL)
    first.finish()
    assert (
        "validation 2026-01-03, the end of the training window, chooses the passes "
        "(training on 2026-01-01..2026-01-02)" in first.output
    )
    second = TrainRun(path, model_dir)
    assert second.finish() == 0, second.output[-3000:]
    assert "passes   already chosen in" in second.output and "resume   from" in second.output

    chosen = json.loads((model_dir / "passes" / "train_result.json").read_text())
    best = chosen["early_stopping"]["best"]["epoch"]
    final = json.loads((model_dir / "train_result.json").read_text())
    assert final["early_stopping"] is None and len(final["epochs"]) <= best
    assert final["examples"] > 0 and final["eval"]["labels"]["click"]["auc"] > 0.5
    written = yaml.safe_load((model_dir / "config.yaml").read_text())
    assert written["data"]["train"] == {"dates": "2026-01-01..2026-01-03"}
    assert written["data"]["validation"] is None and written["train"]["epochs"] == best
