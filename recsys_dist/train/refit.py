"""Passes chosen on the end of the training window, then the whole window trained.

A config that chooses neither a validation split nor its passes gets the end of its
training window as validation, or for a ``glob`` split a tenth of its rows by hash
(``config/chosen_defaults.py``). With ``train.refit`` (the
default) its run has two steps, each a whole run with its own checkpoints: early stopping
chooses the passes on the carved days, in ``MODEL_DIR/passes``; then a fresh model trains
that many passes on the whole window in ``MODEL_DIR``, and that is the run's model. The
carved days are the newest, the nearest to what the model will score, so the final model
should not do without them. A command started again resumes the step it was in.
"""

from __future__ import annotations

import dataclasses
import json
import logging

from recsys_dist import storage_io
from recsys_dist.checkpoint.store import CheckpointError
from recsys_dist.config.experiment import ExperimentConfig
from recsys_dist.config.sections import DataSplit, DateRange
from recsys_dist.train.result import RESULT_FILE, finished
from recsys_dist.train.run import RunOutcome, train_run

log = logging.getLogger(__name__)

#: The sub-directory of the model dir where the passes are chosen.
PASSES_DIR = "passes"


def refits(config: ExperimentConfig) -> bool:
    """Whether ``config``'s run chooses its passes on a carved split and trains again."""
    return config.data is not None and config.data.validation_carved and config.train.refit


def whole_split(config: ExperimentConfig) -> DataSplit:
    """The training split with what was carved from it: the window with its carved days,
    or the ``glob`` with every row."""
    train = config.data.train
    if train.dates is None:
        return DataSplit(glob=train.glob)
    last = config.data.validation.date_range().last
    return DataSplit(dates=str(DateRange(train.date_range().first, last)))


def whole_window(config: ExperimentConfig) -> str:
    """The whole training split, for messages: ``FROM..TO``, or the glob."""
    whole = whole_split(config)
    return whole.dates or f"every row of {whole.glob}"


def whole_window_config(config: ExperimentConfig, passes: int) -> ExperimentConfig:
    """``config`` training ``passes`` passes on its whole window (train and the carved
    days or rows), without a validation split; its ``raw`` says so, so the config written
    next to the model loads as what it ran."""
    data, whole = config.data, whole_split(config)
    train = dataclasses.replace(config.train, epochs=passes, early_stopping=None)
    raw_train = {k: v for k, v in (config.raw.get("train") or {}).items()}
    raw_train.pop("early_stopping", None)
    raw = dict(
        config.raw,
        data=dict(config.raw["data"], train=_as_raw(whole), validation=None),
        train=dict(raw_train, epochs=passes),
    )
    data = dataclasses.replace(data, train=whole, validation=None, validation_carved=False)
    return dataclasses.replace(config, data=data, train=train, raw=raw)


def _described(split: DataSplit) -> str:
    if split.dates is not None:
        return split.dates
    low, high = split.hash_share
    return f"{high - low:.0%} of the rows of {split.glob}"


def _as_raw(split: DataSplit) -> dict:
    return {"dates": split.dates} if split.dates is not None else {"glob": split.glob}


def chosen_passes(passes_dir: str) -> int:
    """The best pass of the finished run in ``passes_dir`` (its ``train_result.json``)."""
    result = json.loads(storage_io.read_text(storage_io.join(passes_dir, RESULT_FILE)))
    stopping = result.get("early_stopping") or {}
    best = stopping.get("best")
    if not best:
        raise CheckpointError(
            f"{passes_dir}/{RESULT_FILE}: the run that chose the passes has no best pass "
            "(early_stopping.best); remove the directory to choose them again"
        )
    return int(best["epoch"])


def train_choosing_passes(config: ExperimentConfig, model_dir: str, **run) -> RunOutcome:
    """Chooses the passes on the carved split in ``model_dir/passes``, then trains the
    whole window for that many passes in ``model_dir``. ``run``: :func:`train_run`'s
    keyword arguments (held-out evaluation only in the second step)."""
    passes_dir = storage_io.join(model_dir, PASSES_DIR)
    log.info(
        "passes\tchosen on %s in %s, then a fresh model trains %s for that many passes "
        "(train.refit: false keeps the best pass's model instead)",
        _described(config.data.validation),
        passes_dir,
        whole_window(config),
    )
    if finished(passes_dir):
        log.info("passes\talready chosen in %s", passes_dir)
    else:
        train_run(config, passes_dir, **dict(run, evaluate=False))
    passes = chosen_passes(passes_dir)
    whole = whole_window_config(config, passes)
    log.info("refit\t%d pass(es) over %s", passes, whole_window(config))
    return train_run(whole, model_dir, **dict(run, check_tables=False))
