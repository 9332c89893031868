"""The second step of a run that chose its passes on a carved split (``train/refit.py``):
the whole window's config, and the passes read from the first step's result. The two
steps end to end, with a kill between them, are in tests/cluster/test_early_stopping.py."""

from __future__ import annotations

import json

import pytest

from recsys_dist.checkpoint.store import CheckpointError
from recsys_dist.config import load_config
from recsys_dist.config.experiment import resolved_files
from recsys_dist.train.refit import chosen_passes, refits, whole_window_config
from tests.support.configs import small_config


def test_the_whole_window_trains_the_chosen_passes_without_validation(tmp_path):
    config = load_config(small_config(tmp_path, train={"dates": "2026-01-01..2026-01-12"}))
    assert refits(config) and config.data.validation.dates == "2026-01-11..2026-01-12"
    whole = whole_window_config(config, 3)
    assert whole.data.train.dates == "2026-01-01..2026-01-12" and whole.data.validation is None
    assert (whole.train.epochs, whole.train.early_stopping) == (3, None)
    assert not refits(whole)
    # the config written next to the model loads as what the model trained on
    written = tmp_path / "written"
    written.mkdir()
    for name, text in resolved_files(whole).items():
        (written / name).write_text(text)
    again = load_config(written / "config.yaml")
    assert again.data.train == whole.data.train and again.data.validation is None
    assert (again.train.epochs, again.train.early_stopping) == (3, None)


def test_refit_false_keeps_the_best_pass(tmp_path):
    path = small_config(tmp_path, train={"dates": "2026-01-01..2026-01-12"})
    config = load_config(path, ["train.refit=false"])
    assert config.data.validation_carved and not refits(config)


def test_the_passes_come_from_the_first_steps_best_pass(tmp_path):
    (tmp_path / "train_result.json").write_text(
        json.dumps({"early_stopping": {"best": {"epoch": 4, "step": 80, "value": 0.7}}})
    )
    assert chosen_passes(str(tmp_path)) == 4
    (tmp_path / "train_result.json").write_text(json.dumps({"early_stopping": None}))
    with pytest.raises(
        CheckpointError,
        match=r"train_result\.json: the run that chose the "
        r"passes has no best pass .*remove the directory to choose them again",
    ):
        chosen_passes(str(tmp_path))


def test_the_two_steps_check_the_tables_once_and_score_the_held_out_split_once(
    tmp_path, monkeypatch
):
    """The first step checks the tables' collisions (the same tables the second trains)
    and does not score the held-out split; the second does not check them again."""
    from recsys_dist.train import refit

    config = load_config(small_config(tmp_path, train={"dates": "2026-01-01..2026-01-12"}))
    calls = []

    def fake_train_run(cfg, model_dir, **run):
        calls.append((model_dir, run.get("evaluate", True), run.get("check_tables", True)))
        if model_dir.endswith(refit.PASSES_DIR):
            result = {"early_stopping": {"best": {"epoch": 2, "step": 8, "value": 0.7}}}
            (tmp_path / "run" / refit.PASSES_DIR).mkdir(parents=True)
            (tmp_path / "run" / refit.PASSES_DIR / "train_result.json").write_text(
                json.dumps(result)
            )
        return cfg.train.epochs

    monkeypatch.setattr(refit, "train_run", fake_train_run)
    monkeypatch.setattr(refit, "finished", lambda directory: False)
    passes = refit.train_choosing_passes(config, str(tmp_path / "run"))
    assert passes == 2
    assert calls == [
        (str(tmp_path / "run" / refit.PASSES_DIR), False, True),
        (str(tmp_path / "run"), True, False),
    ]


def test_a_glob_split_is_refit_on_every_row(tmp_path):
    config = load_config(small_config(tmp_path, train={"glob": "part-*.parquet"}))
    assert refits(config) and config.data.train.hash_share == [0.0, 0.9]
    whole = whole_window_config(config, 4)
    assert whole.data.train.glob == "part-*.parquet" and whole.data.train.hash_share is None
    assert whole.data.validation is None and whole.train.epochs == 4
    written = tmp_path / "written"
    written.mkdir()
    for name, text in resolved_files(whole).items():
        (written / name).write_text(text)
    again = load_config(written / "config.yaml")
    assert again.data.train == whole.data.train and not again.data.validation_carved
