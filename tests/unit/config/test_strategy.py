"""``cluster.strategy``: what ``mirrored`` and ``multi_worker_mirrored`` refuse, each named by
its key, before any start; and a ``TF_CONFIG`` that does not fit a synchronous job."""

from __future__ import annotations

import pytest

from recsys_dist.cli import main
from recsys_dist.cluster.collective import collective_task
from recsys_dist.cluster.server import ClusterError
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
    assert (
        "strategy mirrored: 2 replicas in one process, each step's 512 rows split 256 "
        "per replica" in capsys.readouterr().out
    )
    default = load_config(write(tmp_path, {"cluster.strategy": "parameter_server"}))
    assert default.cluster.strategy == "parameter_server"


def test_global_batch_must_split_over_the_replicas(tmp_path, capsys):
    err = rejected(tmp_path, capsys, {"cluster.workers": 3})
    assert (
        "model.yaml:" in err
        and "input.batch_size: 512 is not divisible by "
        "cluster.workers=3, the replicas of cluster.strategy: mirrored"
        in err
    )
    assert "use a multiple of 3" in err
    err = rejected(
        tmp_path,
        capsys,
        {
            "cluster.workers": 3,
            "cluster.mode": "local",
            "cluster.strategy": "multi_worker_mirrored",
        },
    )
    assert (
        "input.batch_size: 512 is not divisible by cluster.workers=3, the worker "
        "processes of cluster.strategy: multi_worker_mirrored" in err
    )


def test_tables_too_large_for_a_copy_on_every_replica(tmp_path, capsys):
    rows = int(available_memory() / (8 * 4 * 2 * 2) * 0.9)  # 0.9 x memory per table copy
    err = rejected(tmp_path, capsys, feature_changes={"tables.ads.rows": rows})
    assert (
        "cluster.strategy: mirrored keeps a copy of every table on each of its 2 replicas: " in err
    )
    assert "x (1 + 1 optimizer slots) x 2 = " in err and "more than 80% of the " in err
    assert "use cluster.strategy: parameter_server" in err
    assert load_config(
        write(tmp_path, {"cluster.strategy": "parameter_server"}, {"tables.ads.rows": rows})
    )
    # multi_worker_mirrored, local: both worker processes hold their copy on this machine
    err = rejected(
        tmp_path,
        capsys,
        {"cluster.strategy": "multi_worker_mirrored", "cluster.mode": "local"},
        {"tables.ads.rows": rows},
    )
    assert (
        "multi_worker_mirrored keeps a copy of every table on each of its 2 worker "
        "processes on this machine" in err
    )
    # across machines (tf_config) each machine holds one copy: these tables fit
    assert load_config(
        write(
            tmp_path,
            {"cluster.strategy": "multi_worker_mirrored", "cluster.mode": "tf_config"},
            {"tables.ads.rows": rows},
        )
    )


def test_dynamic_tables_need_parameter_servers(tmp_path, capsys):
    err = rejected(
        tmp_path,
        capsys,
        feature_changes={"tables.ads": {"kind": "dynamic", "dim": 8, "capacity_per_shard": 1000}},
    )
    assert "cluster.strategy: mirrored needs hashed tables, but table 'ads' of " in err
    assert "is kind: dynamic" in err


def test_modes_the_strategies_cannot_run_are_refused(tmp_path, capsys):
    err = rejected(tmp_path, capsys, {"cluster.mode": "tf_config"})
    assert "cluster.mode: tf_config is not supported with cluster.strategy: mirrored" in err
    err = rejected(tmp_path, capsys, {"cluster.strategy": "multi_worker_mirrored"})
    assert (
        "cluster.mode: in_process is not supported with cluster.strategy: "
        "multi_worker_mirrored, whose workers are processes" in err
    )
    err = rejected(tmp_path, capsys, {"cluster.strategy": "mirorred"})
    assert "cluster.strategy" in err and "parameter_server" in err


MWMS = {"cluster.strategy": "multi_worker_mirrored", "cluster.mode": "local"}


def test_multi_worker_mirrored_refuses_what_it_does_not_run(tmp_path, capsys):
    assert load_config(write(tmp_path, MWMS)).cluster.strategy == "multi_worker_mirrored"
    main(["validate", "--config", write(tmp_path, MWMS)])  # its data does not exist: exit 3
    assert (
        "strategy multi_worker_mirrored: 2 worker processes, each step's 512 rows split "
        "256 per worker" in capsys.readouterr().out
    )
    err = rejected(
        tmp_path,
        capsys,
        MWMS,
        feature_changes={"tables.ads": {"kind": "dynamic", "dim": 8, "capacity_per_shard": 1000}},
    )
    assert "cluster.strategy: multi_worker_mirrored needs hashed tables, but table 'ads'" in err
    err = rejected(tmp_path, capsys, {**MWMS, "train.dense_refresh_steps": 4})
    assert (
        "train.dense_refresh_steps: has no effect under cluster.strategy: "
        "multi_worker_mirrored" in err
    )
    assert load_config(
        write(
            tmp_path,
            {  # early stopping: the chief scores each pass
                **MWMS,
                "data.validation": {"dates": "2026-01-02"},
                "train.epochs": 3,
                "train.early_stopping": {"metric": "auc", "patience": 1},
            },
        )
    ).train.early_stopping


@pytest.mark.parametrize(
    "tf_config, expected",
    [
        (
            '{"cluster": {"worker": ["h:1", "h:2"], "ps": ["h:3"]}, "task": {"type": "worker", '
            '"index": 0}}',
            "TF_CONFIG names 'ps' tasks, but cluster.strategy: multi_worker_mirrored "
            "runs on workers only",
        ),
        (
            '{"cluster": {"worker": ["h:1"], "chief": ["h:3"]}, "task": {"type": "chief", '
            '"index": 0}}',
            "TF_CONFIG names 'chief' tasks",
        ),
        (
            '{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 2}}',
            "TF_CONFIG task.index 2 is out of range: the cluster has 2 workers",
        ),
        (
            '{"cluster": {"ps": ["h:1"]}, "task": {"type": "ps", "index": 0}}',
            "TF_CONFIG cluster has no 'worker' job",
        ),
    ],
)
def test_a_tf_config_that_is_not_a_synchronous_job_is_refused(monkeypatch, tf_config, expected):
    monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(ClusterError, match="^" + expected.replace("(", r"\(")):
        collective_task()


def test_a_workers_only_tf_config_names_this_worker(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert collective_task() is None
    monkeypatch.setenv(
        "TF_CONFIG",
        '{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 1}}',
    )
    assert collective_task() == ({"worker": ["h:1", "h:2"]}, 1)


@pytest.mark.parametrize("workers", [1, 4])
def test_batch_divisible_by_the_replicas_is_accepted(tmp_path, workers):
    assert load_config(write(tmp_path, {"cluster.workers": workers})).cluster.workers == workers
