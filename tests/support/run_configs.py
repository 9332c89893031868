"""The small training configs the cluster tests share, written as files next to their data.

- :func:`small_run_config`: DCN-v2 on 2 days of 12k rows, 2 epochs, a checkpoint every
  ``EVERY`` steps (fault tolerance, evaluation, offline evaluation, retraining);
- :func:`zoo_config`: any model of the zoo on a tiny feature config (training, the
  dense-weight cache, export).

Both are built as data: a test changes a key with ``changes={"train.epochs": 1}`` (see
:func:`tests.support.configs.changed`) or passes another feature config.
"""

from __future__ import annotations

import pathlib
from typing import Any

from tests.support.configs import changed, write_yaml

#: ``--set`` arguments: 2 multi_worker_mirrored worker processes on this machine.
COLLECTIVE = (
    "--set",
    "cluster.strategy=multi_worker_mirrored",
    "--set",
    "cluster.mode=local",
    "--set",
    "cluster.workers=2",
)
EVERY = 30  # checkpoint_every_steps: a kill replays up to this many steps (+ in flight)
EPOCHS = 2


def _table(rows: int) -> dict:
    return {"rows": rows, "dim": 8}


def _numeric() -> dict:
    return {"kind": "numeric", "transform": "log1p", "nan_means_missing": True}


def _categorical(table: str, dtype: str = "int64") -> dict:
    return {"kind": "categorical", "dtype": dtype, "table": table}


ZOO_FEATURES = {
    "tables": {
        "big": _table(4000),
        "small": _table(300),
        "tag": _table(500),
        "cross": _table(2000),
    },
    "features": {
        "I1": _numeric(),
        "I5": _numeric(),
        "C3": _categorical("big"),
        "C4": _categorical("big"),
        "C2": _categorical("small"),
        "C17": _categorical("small"),
        "C21": _categorical("big", "string"),
        "user_id": _categorical("big"),
        "tags": {"kind": "multi_categorical", "table": "tag", "max_length": 4},
        "C2_x_C17": {"kind": "cross", "inputs": ["C2", "C17"], "table": "cross"},
    },
    "labels": {"click": {}, "conversion": {}},
}

#: The zoo's features without the cross and the second label, C21 on a table of its own
#: with room for its ids (7,174 distinct strings in the fault tests' data: a quarter of
#: its lookups share a row).
SMALL_FEATURES = {
    "tables": {
        "huge": _table(20_000),
        "big": _table(4000),
        "small": _table(300),
        "tag": _table(500),
    },
    "features": {
        name: _categorical("huge", "string") if name == "C21" else spec
        for name, spec in ZOO_FEATURES["features"].items()
        if name != "C2_x_C17"
    },
    "labels": {"click": {}},
}

#: SMALL_FEATURES with C21's table at 2,000,000 rows (128 MB with its Adagrad slot), so
#: that a checkpoint write lasts long enough to be caught in the middle.
SLOW_CHECKPOINT_FEATURES = changed(SMALL_FEATURES, {"tables.huge.rows": 2_000_000})


def _train_and_eval(data: pathlib.Path) -> dict:
    return {
        "path": str(data),
        "train": {"dates": "2026-01-01..2026-01-02"},
        "eval": {"dates": "2026-01-03"},
    }


def _optimizers() -> dict:
    # The rate was chosen with Keras's accumulator start (0.1); the package's default start
    # (1e-4) takes larger first steps, which these small runs of several passes over
    # 8,000 rows do not need (a killed multi_worker_mirrored run scored 0.53 with it).
    return {
        "embedding_optimizer": {
            "name": "adagrad",
            "learning_rate": 0.1,
            "initial_accumulator_value": 0.1,
        },
        "dense_optimizer": {"name": "adam", "learning_rate": 0.003},
    }


def small_run_config(
    tmp: pathlib.Path,
    data: pathlib.Path,
    mode: str = "local",
    *,
    features: dict = SMALL_FEATURES,
    changes: dict[str, Any] | None = None,
) -> str:
    """Writes ``tmp/features.yaml`` and ``tmp/ft.yaml``; returns the latter's path."""
    write_yaml(tmp / "features.yaml", features)
    config = {
        "features": "features.yaml",
        "data": _train_and_eval(data),
        "input": {"batch_size": 256},
        "model": {
            "name": "dcn_v2",
            "labels": ["click"],
            "params": {"cross_layers": 1, "low_rank": 8, "hidden_units": [32, 16]},
        },
        "train": {
            **_optimizers(),
            "steps_per_call": 10,
            "epochs": EPOCHS,
            "checkpoint_every_steps": EVERY,
            "keep_checkpoints": 2,
            "log_every_seconds": 0,
            "embedding_shard_bytes": 1024,
        },
        "cluster": {"mode": mode, "workers": 2, "ps": 2},
    }
    return write_yaml(tmp / "ft.yaml", changed(config, changes))


ZOO_PARAMS = {
    "lr": {},
    "wide_deep": {"hidden_units": [32, 16]},
    "deepfm": {"hidden_units": [32, 16]},
    "dcn_v2": {"cross_layers": 2, "low_rank": 8, "hidden_units": [32, 16]},
    "dlrm": {"bottom_units": [16], "top_units": [32, 16]},
    "mmoe": {"num_experts": 2, "expert_units": [32], "tower_units": [16]},
}

WIDE_DEEP_INPUTS = {
    "wide": ["C3", "C4", "C2", "C17", "C21", "user_id", "C2_x_C17"],
    "deep": ["I1", "I5", "C3", "C4", "C2", "C17", "C21", "user_id", "tags"],
}


def zoo_config(
    tmp: pathlib.Path,
    data: pathlib.Path,
    model: str,
    *,
    epochs: int = 2,
    mode: str = "local",
    features: dict = ZOO_FEATURES,
) -> str:
    """Writes ``tmp/features.yaml`` and ``tmp/<model>.yaml``; returns the latter's path."""
    write_yaml(tmp / "features.yaml", features)
    spec = {
        "name": model,
        "labels": ["click", "conversion"] if model == "mmoe" else ["click"],
        "params": ZOO_PARAMS[model],
    }
    if model == "wide_deep":
        spec["inputs"] = WIDE_DEEP_INPUTS
    config = {
        "features": "features.yaml",
        "data": _train_and_eval(data),
        "input": {"batch_size": 256},
        "model": spec,
        "train": {
            **_optimizers(),
            "steps_per_call": 10,
            "epochs": epochs,
            "embedding_shard_bytes": 1024,
            "log_every_seconds": 1000,
        },
        "cluster": {"mode": mode, "workers": 2, "ps": 2},
    }
    return write_yaml(tmp / f"{model}.yaml", config)
