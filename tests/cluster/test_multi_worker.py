"""``cluster.strategy: multi_worker_mirrored``: synchronous training over 2 worker processes.

Two worker processes on 127.0.0.1 exchange gradients with collective ops over gRPC. The
claims:

- after the same steps, every weight and optimizer slot equals a single worker's (a
  parameter-server run with one worker trains the same global batches in the same order:
  with ``steps_per_call: 1`` an item is one global batch, and worker ``w`` reads its half);
- checkpoints have one format: a run resumes under the other strategy both ways, and the
  two ways end at the same state;
- a worker killed with SIGKILL stops the job, which starts again and resumes from its last
  checkpoint, and completes: on a local cluster by itself, under ``TF_CONFIG`` (one
  ``recsys-dist train`` per worker, as on several machines) once the lost worker is
  started again, as an orchestrator would.

Each worker is a ``python -m recsys_dist.collective_worker`` process
(``collective_worker.py``). Daily retraining across the switch is in ``test_mirrored.py``'s
chain of days.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recsys_dist.cluster.local import free_ports
from recsys_dist.data.synth_files import synthesize
from tests.support import command_forks
from tests.support.chance import learned
from tests.support.paths import CLI
from tests.support.run_configs import COLLECTIVE, small_run_config
from tests.support.state import assert_same_state, checkpoint
from tests.support.train_run import TrainRun
from tests.support.train_run import train_without_eval as train

pytestmark = pytest.mark.cluster

ONE_WORKER = (
    "--set",
    "cluster.mode=in_process",
    "--set",
    "cluster.workers=1",
    "--set",
    "cluster.ps=1",
)
SHARDED = (
    "--set",
    "cluster.mode=in_process",
    "--set",
    "cluster.workers=1",
    "--set",
    "cluster.ps=2",
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("multi_worker")
    synthesize(tmp / "data", days=3, rows_per_day=4000, seed=3, rows_per_file=2000)
    config = small_run_config(
        tmp,
        tmp / "data",
        "local",
        changes={"input.shuffle": False, "train.epochs": 1, "train.steps_per_call": 1},
    )
    output = train(config, tmp / "collective", *COLLECTIVE)
    assert "cluster  worker 0 of 2 (multi_worker_mirrored, synchronous" in output
    train(config, tmp / "one_worker", *ONE_WORKER)
    return config, tmp


def test_two_workers_end_with_the_weights_and_slots_of_one_worker(runs):
    config, tmp = runs
    assert checkpoint(tmp / "collective")["global_step/.ATTRIBUTES/VARIABLE_VALUE"] == 32
    assert_same_state(tmp / "collective", tmp / "one_worker")
    # worker 1 wrote nothing into the model dir: one run's files, worker 0's
    logs = sorted(p.name for p in (tmp / "collective" / "logs").glob("worker-*.log"))
    assert logs == ["worker-0.log", "worker-1.log"]
    assert "cluster  worker 1 of 2" in (tmp / "collective" / "logs" / "worker-1.log").read_text()


def test_a_hash_share_split_trains_the_same_rows_on_two_workers_as_on_one(runs):
    """Each worker filters its half of an item to the rows the split's ``hash_share``
    keeps, so the two workers' global batch is the one worker's batch: the same state."""
    config, tmp = runs
    settings = ("--set", 'data.train={glob: "dt=*/*.parquet", hash_share: [0.0, 0.7]}')
    output = train(config, tmp / "share_collective", *COLLECTIVE, *settings)
    assert "cluster  worker 0 of 2" in output, output[-3000:]
    train(config, tmp / "share_one_worker", *ONE_WORKER, *settings)
    steps = checkpoint(tmp / "share_collective")["global_step/.ATTRIBUTES/VARIABLE_VALUE"]
    assert steps == checkpoint(tmp / "share_one_worker")["global_step/.ATTRIBUTES/VARIABLE_VALUE"]
    assert steps == 48  # 6 files of 2,000 rows, each in 8 items of one step
    for run in ("share_collective", "share_one_worker"):  # 0.7 of 12,000 rows, give or take
        examples = json.loads((tmp / run / "train_result.json").read_text())["examples"]
        assert abs(examples - 8_400) < 4 * (12_000 * 0.7 * 0.3) ** 0.5, (run, examples)
    assert_same_state(tmp / "share_collective", tmp / "share_one_worker")


def test_batch_norm_and_early_stopping_end_as_two_mirrored_replicas_do(runs):
    """Batch norm normalises each worker's rows by their own statistics and each worker moves
    its own moving statistics, as each replica of ``mirrored`` does (a checkpoint saves
    their mean; ``tests/unit/train/test_replicas.py`` shows they move only in training).
    Early stopping: the chief scores the validation split after each pass and sends the
    figures to the other worker. So both strategies keep the same record of validation
    scores and end at the same state, moving statistics included."""
    config, tmp = runs
    settings = (
        "--set",
        "model.params.batch_norm=true",
        "--set",
        "data.validation={dates: 2026-01-03}",
        "--set",
        "train.epochs=3",
        "--set",
        "train.early_stopping={patience: 1}",
        "--set",
        "train.max_steps=72",
    )
    output = train(config, tmp / "bn_collective", *COLLECTIVE, *settings)
    assert "validate epoch 1: auc/click" in output, output[-3000:]
    train(
        config,
        tmp / "bn_mirrored",
        "--set",
        "cluster.strategy=mirrored",
        "--set",
        "cluster.mode=in_process",
        "--set",
        "cluster.workers=2",
        *settings,
    )
    ours, theirs = [
        json.loads((tmp / d / "train_result.json").read_text())["early_stopping"]
        for d in ("bn_collective", "bn_mirrored")
    ]
    assert len(ours["history"]) >= 2, ours
    assert [(e["epoch"], e["step"]) for e in ours["history"]] == [
        (e["epoch"], e["step"]) for e in theirs["history"]
    ]
    for a, b in zip(ours["history"], theirs["history"]):
        assert abs(a["value"] - b["value"]) < 1e-4, (ours, theirs)
    assert ours["best"]["epoch"] == theirs["best"]["epoch"]
    state = checkpoint(tmp / "bn_collective")
    moving = [k for k in state if "moving_mean" in k]
    assert moving and all(abs(state[k]).max() > 0 for k in moving), sorted(state)
    assert_same_state(tmp / "bn_collective", tmp / "bn_mirrored")


def test_a_run_resumes_under_the_other_strategy_both_ways(runs):
    config, tmp = runs
    two_epochs = ("--set", "train.epochs=2")
    shutil.copytree(tmp / "one_worker", tmp / "ps_then_collective")
    output = train(config, tmp / "ps_then_collective", *COLLECTIVE, *two_epochs)
    assert "resume   from" in output and "step 32" in output
    shutil.copytree(
        tmp / "collective", tmp / "collective_then_ps", ignore=shutil.ignore_patterns("logs")
    )
    output = train(config, tmp / "collective_then_ps", *SHARDED, *two_epochs)
    assert "resume   from" in output and "2 ps" in output
    assert_same_state(tmp / "ps_then_collective", tmp / "collective_then_ps")
    assert checkpoint(tmp / "ps_then_collective")["global_step/.ATTRIBUTES/VARIABLE_VALUE"] == 64


def test_a_killed_worker_restarts_the_job_from_its_last_checkpoint(runs):
    config, tmp = runs
    model_dir = tmp / "killed"
    # --data reaches the workers (the resolved config they read keeps the file's data.path)
    synthesize(tmp / "other", days=3, rows_per_day=3000, seed=4, rows_per_file=1500)
    run = TrainRun(
        config,
        model_dir,
        *COLLECTIVE,
        "--data",
        str(tmp / "other"),
        "--set",
        "train.epochs=3",
        "--set",
        "train.checkpoint_every_steps=20",
    )
    saved = int(run.wait_for(r"^checkpoint step ([\d,]*\d)").group(1).replace(",", ""))
    workers = run.collective_workers()
    assert len(workers) == 2
    os.kill(workers[1], signal.SIGKILL)
    run.wait_for(r"^restart +worker 1 of 2 \(multi_worker_mirrored\) was killed by SIGKILL")
    restored = int(run.wait_for(r"^resume +from .*: step ([\d,]*\d)").group(1).replace(",", ""))
    assert run.finish() == 0, run.output[-3000:]
    assert restored >= saved
    assert run.collective_workers() == []  # no worker outlives the run
    digest = hashlib.sha1(str(model_dir).encode()).hexdigest()[:12]
    assert not list(pathlib.Path(tempfile.gettempdir()).glob(f"recsys_dist_worker_{digest}_*")), (
        "worker 1's scratch checkpoints were left behind"
    )
    newest = sorted(model_dir.glob("checkpoints/ckpt-*/_COMPLETE"))[-1].parent
    state = json.loads((newest / "state.json").read_text())
    assert state["complete"] and state["position"]["finished_rows"] == 3 * 6000
    result = json.loads((model_dir / "train_result.json").read_text())
    # it learned: held-out AUC above what no signal reaches (a few thousand rows of weak
    # signal score about 0.55; a lost state is caught by the restored step and rows done)
    above, line = learned(result)
    assert above, line


def test_tf_config_workers_restart_from_the_checkpoint_when_one_is_lost(runs):
    config, tmp = runs
    model_dir = tmp / "tf_config"
    spec = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    args = (
        "--no-eval",
        "--set",
        "cluster.strategy=multi_worker_mirrored",
        "--set",
        "cluster.mode=tf_config",
        "--set",
        "train.epochs=3",
        "--set",
        "train.checkpoint_every_steps=20",
    )

    def worker(index: int) -> TrainRun:
        tf_config = {"cluster": spec, "task": {"type": "worker", "index": index}}
        return TrainRun(config, model_dir, *args, env={"TF_CONFIG": json.dumps(tf_config)})

    chief, other = worker(0), worker(1)
    chief.wait_for(r"^checkpoint step")
    other.process.send_signal(signal.SIGKILL)
    other.finish()
    chief.wait_for(
        r"^restart +lost a task of the cluster .*a worker of the synchronous job "
        r"is gone, so training must restart from the last checkpoint"
    )
    again = worker(1)  # what an orchestrator does with a lost pod
    assert again.finish() == 0, again.output[-3000:]
    assert chief.finish() == 0, chief.output[-3000:]
    assert "resume   from" in chief.output and "resume   from" in again.output
    assert "cluster  worker 1 of 2 (multi_worker_mirrored" in again.output
    newest = sorted(model_dir.glob("checkpoints/ckpt-*/_COMPLETE"))[-1].parent
    state = json.loads((newest / "state.json").read_text())
    assert state["complete"] and state["position"]["finished_rows"] == 3 * 8000


def test_bad_data_on_the_second_worker_stops_the_job_with_its_error(runs):
    """Worker 1 meets an infinite value in its share of an item: it stops with the data
    error, worker 0 is stopped, and the command exits 3 naming the worker, the file, the
    column and the row."""
    config, tmp = runs
    bad = tmp / "bad_data"
    shutil.copytree(tmp / "data", bad)
    path = sorted(bad.glob("dt=2026-01-01/*.parquet"))[0]
    table = pq.read_table(path)
    values = table["I1"].to_numpy(zero_copy_only=False).copy()
    # Row groups of 500 rows make two items, rows 0, 2, ..., 498 and 1, 3, ..., 499:
    # of the first, worker 1 reads rows 250, 252, ..., 498.
    values[300] = np.inf
    table = table.set_column(
        table.schema.get_field_index("I1"),
        pa.field("I1", pa.float32()),
        pa.array(values, pa.float32()),
    )
    pq.write_table(table, path, row_group_size=500)  # the row groups it was written with
    result = command_forks.run(
        [
            CLI,
            "train",
            "--config",
            config,
            "--data",
            str(bad),
            "--model-dir",
            str(tmp / "bad_run"),
            "--no-eval",
            *COLLECTIVE,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 3, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(
        "error: worker 1 of 2 (multi_worker_mirrored) stopped with exit code 3; last lines of "
    ), result.stderr
    assert (
        f"error: numeric column 'I1' (feature 'I1') has an infinite value in {path} "
        "(rows 250..500 in steps of 2) at row 300 (set data.on_bad_row: skip to skip such "
        "rows)\n"
    ) in result.stderr


def test_sparse_gradients_with_no_rows_on_every_worker_are_summed_without_a_crash():
    """TensorFlow's all-gather of sparse gradients crashed both workers (SIGSEGV) in a step
    where every worker's gradient of a table had no rows (a list feature whose ids were
    all null). Steps with both, one and neither worker empty: the sum is exact (SGD at rate
    1 on a sum of looked-up rows moves each row by minus its count, in small integers)."""
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.sparse_sum_worker"],
            env={
                **os.environ,
                "SPARSE_SUM_OPTIMIZER": "sgd",
                "TF_CONFIG": json.dumps(
                    {"cluster": cluster, "task": {"type": "worker", "index": i}}
                ),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in processes]
    assert [p.returncode for p in processes] == [0, 0], outputs
    counts = np.zeros(8)
    np.add.at(counts, [3, 3, 1, 5, 5, 2], 1)
    table = np.array(json.loads(outputs[0].strip().splitlines()[-1]))
    np.testing.assert_array_equal(table, -np.repeat(counts[:, None], 2, axis=1))
