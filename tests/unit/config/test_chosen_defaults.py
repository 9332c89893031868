"""The defaults a config gets from its model and data (``config/chosen_defaults.py``):
here the validation split carved from the end of the training window when the config
chooses neither a validation split nor the passes. The linear optimizer's and early
stopping's defaults are covered in test_config.py, beside the keys they fill."""

from __future__ import annotations

import pytest

from recsys_dist.cli import main
from recsys_dist.config import load_config
from recsys_dist.config.chosen_defaults import CARVE_MIN_DAYS, EPOCHS_WITH_VALIDATION
from tests.support.configs import small_config


def config_with(tmp_path, train_dates: str, changes: dict | None = None):
    """A small config training on ``train_dates``, with ``changes`` (dotted keys)."""
    path = small_config(tmp_path, train={"dates": train_dates})
    return load_config(path, values=changes or {})


@pytest.mark.parametrize(
    "window,train,validation",
    [
        ("2026-01-01..2026-01-03", "2026-01-01..2026-01-02", "2026-01-03"),
        ("2026-01-01..2026-01-08", "2026-01-01..2026-01-07", "2026-01-08"),
        ("2026-01-01..2026-01-10", "2026-01-01..2026-01-09", "2026-01-10"),
        ("2026-01-01..2026-01-11", "2026-01-01..2026-01-09", "2026-01-10..2026-01-11"),
        ("2026-01-01..2026-01-30", "2026-01-01..2026-01-27", "2026-01-28..2026-01-30"),
    ],
)
def test_the_last_tenth_of_the_window_rounded_up_chooses_the_passes(
    tmp_path, window, train, validation
):
    config = config_with(tmp_path, window)
    assert (config.data.train.dates, config.data.validation.dates) == (train, validation)
    assert config.data.validation_carved
    assert config.train.epochs == EPOCHS_WITH_VALIDATION and config.train.early_stopping
    # the resolved config written next to a model says what the run trained on
    assert config.raw["data"]["train"] == {"dates": train}
    assert config.raw["data"]["validation"] == {"dates": validation}
    assert config.data.carved_note() == (
        f"validation {validation}, the end of the training window, chooses the passes "
        f"(training on {train}); set data.validation, or train.epochs, to choose them "
        "yourself"
    )


@pytest.mark.parametrize(
    "window,changes",
    [
        ("2026-01-01..2026-01-0%d" % (CARVE_MIN_DAYS - 1), {}),  # too short to lose a day
        ("2026-01-01..2026-01-08", {"data.validation": None}),  # turned off
        ("2026-01-01..2026-01-08", {"data.validation": {"dates": "2026-01-09"}}),  # given
        ("2026-01-01..2026-01-08", {"train.epochs": 2}),  # the passes chosen
        ("2026-01-01..2026-01-08", {"train.max_steps": 100}),
        ("2026-01-01..2026-01-08", {"train.early_stopping": None}),
        ("2026-01-01..2026-01-08", {"retrain": {"root": "/retrain"}}),  # retrain's windows
    ],
)
def test_nothing_is_carved_when_the_config_chooses(tmp_path, window, changes):
    config = config_with(tmp_path, window, changes)
    assert not config.data.validation_carved and config.data.carved_note() is None
    assert config.data.train.dates == window
    if "data.validation" not in changes:
        assert config.data.validation is None


def test_a_glob_split_gives_a_tenth_of_its_rows_by_hash(tmp_path):
    config = load_config(small_config(tmp_path, train={"glob": "part-*.parquet"}))
    data = config.data
    assert data.validation_carved and config.train.epochs == EPOCHS_WITH_VALIDATION
    assert (data.train.glob, data.train.hash_share) == ("part-*.parquet", [0.0, 0.9])
    assert (data.validation.glob, data.validation.hash_share) == ("part-*.parquet", [0.9, 1.0])
    assert config.raw["data"]["validation"] == {"glob": "part-*.parquet", "hash_share": [0.9, 1.0]}
    assert data.carved_note() == (
        "validation 10% of the rows of part-*.parquet (by a hash of each row's file name and "
        "number) chooses the passes (training on the others); set data.validation, or "
        "train.epochs, to choose them yourself"
    )
    # a split that already keeps a share is the user's own: not carved again
    given = {"glob": "part-*.parquet", "hash_share": [0.0, 0.5]}
    config = load_config(small_config(tmp_path, train=given))
    assert config.data.validation is None and config.train.epochs == 1


@pytest.mark.parametrize("share", [[0.5], [0.5, 0.5], [-0.1, 0.5], [0.2, 1.5], [0.9, 0.1]])
def test_a_bad_hash_share_is_refused_naming_the_key(tmp_path, share):
    path = small_config(tmp_path, train={"glob": "part-*.parquet", "hash_share": share})
    with pytest.raises(Exception, match=r"data\.train.*hash_share: got .*expected \[FROM, TO\]"):
        load_config(path)


def test_validate_says_where_the_validation_split_came_from(tmp_path, capsys):
    path = small_config(tmp_path, train={"dates": "2026-01-01..2026-01-08"})
    assert main(["validate", "--config", path, "--split", "train"]) != 0  # no data there
    out = capsys.readouterr().out
    assert (
        "split    validation 2026-01-08, the end of the training window, chooses the passes "
        "(training on 2026-01-01..2026-01-07)" in out
    )
