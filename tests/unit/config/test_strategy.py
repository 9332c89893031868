"""``cluster.strategy``: what ``mirrored`` refuses, each named by its key, before any start."""

from __future__ import annotations

import pytest

from recsys_dist.cli import main
from recsys_dist.config import load_config
from recsys_dist.config.strategy import available_memory
from tests.support.configs import changed, write_yaml

FEATURES = {
    "tables": {"ads": {"rows": 1000, "dim": 8}},
    "features": {"ad": {"kind": "categorical", "dtype": "int64", "table": "ads"}},
    "labels": {"click": {}},
}

MODEL = {
    "features": "features.yaml",
    "data": {"path": "/data", "train": {"dates": "2026-01-01"}},
    "input": {"batch_size": 512},
    "model": {"name": "dcn_v2"},
    "train": {"embedding_optimizer": {"name": "adagrad", "learning_rate": 0.05}},
    "cluster": {"strategy": "mirrored", "mode": "in_process", "workers": 2},
}


def write(tmp_path, model_changes=None, feature_changes=None) -> str:
    write_yaml(tmp_path / "features.yaml", changed(FEATURES, feature_changes))
    return write_yaml(tmp_path / "model.yaml", changed(MODEL, model_changes))


def rejected(tmp_path, capsys, model_changes=None, feature_changes=None) -> str:
    path = write(tmp_path, model_changes, feature_changes)
    assert main(["validate", "--config", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    return err


def test_a_mirrored_config_loads_and_defaults_stay_parameter_server(tmp_path, capsys):
    assert load_config(write(tmp_path)).cluster.strategy == "mirrored"
    main(["validate", "--config", write(tmp_path)])  # its data does not exist: exit 3
    assert "strategy mirrored: 2 replicas in one process, each step's 512 rows split 256 " \
        "per replica" in capsys.readouterr().out
    default = load_config(write(tmp_path, {"cluster.strategy": "parameter_server"}))
    assert default.cluster.strategy == "parameter_server"


def test_global_batch_must_split_over_the_replicas(tmp_path, capsys):
    err = rejected(tmp_path, capsys, {"cluster.workers": 3})
    assert "model.yaml:" in err and "input.batch_size: 512 is not divisible by " \
        "cluster.workers=3, the replicas of cluster.strategy: mirrored" in err
    assert "use a multiple of 3" in err


def test_tables_too_large_for_a_copy_on_every_replica(tmp_path, capsys):
    rows = int(available_memory() / (8 * 4 * 2 * 2) * 0.9)  # 0.9 x memory per table copy
    err = rejected(tmp_path, capsys, feature_changes={"tables.ads.rows": rows})
    assert "cluster.strategy: mirrored keeps a copy of every table on each of its 2 " \
        "replicas: " in err
    assert "x (1 + 1 optimizer slots) x 2 = " in err and "more than 80% of the " in err
    assert "use cluster.strategy: parameter_server" in err
    assert load_config(write(tmp_path, {"cluster.strategy": "parameter_server"},
                             {"tables.ads.rows": rows}))


def test_dynamic_tables_need_parameter_servers(tmp_path, capsys):
    err = rejected(tmp_path, capsys, feature_changes={
        "tables.ads": {"kind": "dynamic", "dim": 8, "capacity_per_shard": 1000}})
    assert "cluster.strategy: mirrored needs hashed tables, but table 'ads' of " in err
    assert "is kind: dynamic" in err


def test_tf_config_and_multi_worker_mirrored_are_refused(tmp_path, capsys):
    err = rejected(tmp_path, capsys, {"cluster.mode": "tf_config"})
    assert "cluster.mode: tf_config is not supported with cluster.strategy: mirrored" in err
    err = rejected(tmp_path, capsys, {"cluster.strategy": "multi_worker_mirrored"})
    assert "cluster.strategy: multi_worker_mirrored is not built yet" in err
    err = rejected(tmp_path, capsys, {"cluster.strategy": "mirorred"})
    assert "cluster.strategy" in err and "parameter_server" in err


@pytest.mark.parametrize("workers", [1, 4])
def test_batch_divisible_by_the_replicas_is_accepted(tmp_path, workers):
    assert load_config(write(tmp_path, {"cluster.workers": workers})).cluster.workers == workers
