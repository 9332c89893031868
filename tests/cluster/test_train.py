"""Training on a real local cluster: 2 workers + 2 parameter servers on 127.0.0.1.

Every model of the zoo trains on a tiny config and its held-out logloss goes down;
embedding tables are really sharded over both parameter servers; a SIGTERM to
``recsys-dist train`` leaves no server process behind.

Covers one run end to end (``train/run.py``), the ``Trainer`` (``train/trainer.py``), the
loop (``train/loop.py``) with the coordinator's runner (``train/async_runner.py``), the
run's result (``train/result.py``) and the in-process cluster
(``cluster/in_process.py``).
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import time

import pytest
import tensorflow as tf

from recsys_dist.cluster.local import child_pids, server_pids
from recsys_dist.data.synth_files import synthesize
from recsys_dist.models.embedding import FeatureEmbeddings
from tests.support import command_forks
from tests.support.data import upload_dir
from tests.support.paths import CLI
from tests.support.refusals import refused_here
from tests.support.run_configs import zoo_config as write_config

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("train_data")
    synthesize(out, days=3, rows_per_day=6_000, seed=5, rows_per_file=3_000, row_groups_per_file=3)
    return out


@pytest.fixture(scope="module")
def runtime(s3_server, tmp_path_factory):  # the servers inherit the S3 settings
    from recsys_dist.cluster.runtime import connect
    from recsys_dist.config.sections import ClusterSpec

    with connect(ClusterSpec("local", 2, 2), str(tmp_path_factory.mktemp("logs")), 1024) as rt:
        yield rt


def _trainer(tmp_path, data, runtime, model, **extra):
    from recsys_dist.config import load_config
    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.train.trainer import Trainer

    config = load_config(write_config(tmp_path, data, model, **extra))
    train = prepare_input(config, "train", 2)
    evaluation = prepare_input(config, "eval", 2, extra_columns=("oracle_logit",))
    return Trainer(config, runtime, train, str(tmp_path / "model")), evaluation


def held_out(trainer, pipeline, oracle: dict[str, str]) -> dict:
    """Exact held-out metrics of the trainer's current weights."""
    from recsys_dist.evaluation.evaluate import evaluate_split

    return evaluate_split(trainer.runtime, trainer.model, pipeline, trainer.config.labels, oracle)[
        0
    ]


@pytest.mark.parametrize("model", ["lr", "wide_deep", "deepfm", "dcn_v2", "dlrm", "mmoe"])
def test_every_model_trains_and_held_out_logloss_goes_down(tmp_path, data, runtime, model):
    trainer, evaluation = _trainer(tmp_path, data, runtime, model)
    oracle = {"click": "oracle_logit"}
    before = held_out(trainer, evaluation, oracle)
    result = trainer.fit()
    after = held_out(trainer, evaluation, oracle)
    assert result.examples == 2 * 12_000 and result.steps >= 2 * 12_000 // 256
    for label in trainer.config.labels:
        assert after["labels"][label]["logloss"] < before["labels"][label]["logloss"] - 0.01, (
            before,
            after,
        )
    click_before, click_after = before["labels"]["click"], after["labels"]["click"]
    # 94 asynchronous steps: the weakest learner here (dlrm) once ended at 0.5495, up from
    # 0.515; a model that did not train stays at its start (about 0.5)
    assert click_after["auc"] > max(0.54, click_before["auc"] + 0.02), (before, after)
    assert click_after["oracle"]["auc"] > click_after["auc"]
    assert int(trainer.global_step.numpy()) == result.steps


def _with_nulls(source: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """A copy of ``source`` with real Parquet nulls: numerics, int and string ids, whole
    lists and list elements; one file's first row group has no I1 at all."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    for index, path in enumerate(sorted(source.rglob("*.parquet"))):
        table = pq.read_table(path)
        n = table.num_rows
        for column, rate in (
            ("I1", 0.1),
            ("I5", 0.3),
            ("C3", 0.1),
            ("C21", 0.2),
            ("user_id", 0.05),
        ):
            mask = rng.random(n) < rate
            if column == "I1" and index == 0:
                mask[:1000] = True  # a whole row group
            values = table[column].combine_chunks()
            nulled = pc.if_else(pa.array(mask), pa.scalar(None, values.type), values)
            table = table.set_column(
                table.schema.get_field_index(column), pa.field(column, values.type), nulled
            )
        tags = [
            None if rng.random() < 0.1 else [None if rng.random() < 0.2 else t for t in row]
            for row in table["tags"].to_pylist()
        ]
        table = table.set_column(
            table.schema.get_field_index("tags"), "tags", pa.array(tags, pa.list_(pa.int64()))
        )
        target = out / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, target, row_group_size=1000)
    return out


def test_nulls_and_list_columns_train_from_local_disk_and_s3(tmp_path, data, runtime, s3_server):
    nulls = _with_nulls(data, tmp_path / "nulls")
    url = upload_dir(s3_server["client"], s3_server["bucket"], nulls, "nulls")
    for where, root in (("local", nulls), ("s3", url)):
        run = tmp_path / where
        run.mkdir()
        trainer, evaluation = _trainer(run, root, runtime, "dcn_v2", epochs=2)
        assert trainer.pipeline.transform.column_dtypes["tags"] == "list<int64>"
        before = held_out(trainer, evaluation, {"click": "oracle_logit"})
        result = trainer.fit()
        after = held_out(trainer, evaluation, {"click": "oracle_logit"})
        assert result.examples == 2 * 12_000, where  # every row: nulls are values, not bad rows
        click_before, click_after = before["labels"]["click"], after["labels"]["click"]
        # two passes: 0.580-0.583 from 0.530 alone; one pass gained 0.017-0.023 alone and
        # 0.0096 beside the other cluster tests
        assert click_after["auc"] > click_before["auc"] + 0.02, (where, before, after)
        assert click_after["logloss"] < click_before["logloss"] - 0.005, (where, before, after)


def test_a_linear_optimizer_updates_only_the_linear_parts_tables(tmp_path, data, runtime):
    """wide_deep with ``train.linear_optimizer`` and an embedding rate of 0: the wide
    part's per-id weights move on the parameter servers, the deep tables stay put, and
    the linear optimizer's slots sit with their shards and are checkpointed."""
    import tensorflow as tf

    from recsys_dist.config import load_config
    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.train.trainer import Trainer

    config = load_config(
        write_config(tmp_path, data, "wide_deep", epochs=1),
        [
            "train.embedding_optimizer={name: sgd, learning_rate: 0.0}",
            "train.linear_optimizer={name: adagrad, learning_rate: 0.05}",
        ],
    )
    trainer = Trainer(config, runtime, prepare_input(config, "train", 2), str(tmp_path / "model"))
    model, optimizers = trainer.model, trainer.optimizers
    linear = {v.ref() for v in model.linear_variables}
    assert linear and linear < {v.ref() for v in model.embedding_variables}
    before = {v.ref(): v.numpy() for v in model.embedding_variables}
    trainer.fit()
    moved = {v.ref() for v in model.embedding_variables if (v.numpy() != before[v.ref()]).any()}
    assert moved == linear
    for variable in model.linear_variables:
        assert optimizers.linear.get_slot(variable, "accumulator").device == variable.device
    saved = trainer.checkpoints.latest()
    keys = [name for name, _ in tf.train.list_variables(saved.prefix)]
    assert any(key.startswith("linear_optimizer/") for key in keys), keys[:20]


def test_embedding_tables_are_sharded_over_both_parameter_servers(tmp_path, data, runtime):
    trainer, _ = _trainer(tmp_path, data, runtime, "dcn_v2")
    stacks = [
        s for m in trainer.model.submodules if isinstance(m, FeatureEmbeddings) for s in m.stacks
    ]
    (big,) = [s for s in stacks if "big" in s.layout]
    devices = [shard.device for shard in big.variable.variables]
    assert len(devices) == 2, devices
    assert {d.split("/job:ps/replica:0/task:")[1][0] for d in devices} == {"0", "1"}, devices
    assert {v.ref() for v in trainer.model.embedding_variables} == {
        shard.ref() for s in stacks for shard in s.variable.variables
    }
    # Optimizer slots live with their shard.
    trainer.fit()
    for variable in trainer.model.embedding_variables:
        slot = trainer.optimizers.embedding.get_slot(variable, "accumulator")
        assert slot.device == variable.device


def test_a_staged_checkpoint_is_written_and_read_by_the_coordinator_alone(
    tmp_path, runtime, s3_server, monkeypatch
):
    """A checkpoint to S3 is staged on the coordinator's disk and downloaded there to be
    read. Here the staging directories are relative paths in the coordinator's working
    directory, which is not the servers' (they started in pytest's), so no parameter
    server can reach them: the checkpoint I/O device makes the coordinator write and read
    every shard. Without it a parameter server fails (measured: NOT_FOUND
    .../variables_temp), i.e. the servers would need the coordinator's file system."""
    import numpy as np
    import tensorflow as tf

    from recsys_dist import storage_io
    from recsys_dist.checkpoint.restore import restore
    from recsys_dist.checkpoint.store import CheckpointManager
    from recsys_dist.cluster.placement import partitioned_tables

    values = np.arange(4000 * 8, dtype=np.float32).reshape(4000, 8)
    with runtime.strategy.scope(), partitioned_tables():
        table = tf.Variable(values, name="io_device_table")
    assert sorted(s.device.split("/device")[0] for s in table.variables) == [
        "/job:ps/replica:0/task:0",
        "/job:ps/replica:0/task:1",
    ]
    assert os.getcwd() != str(tmp_path)
    monkeypatch.chdir(tmp_path)
    made = []

    def relative_scratch(prefix: str) -> str:
        made.append(f"{prefix}{len(made)}")
        os.mkdir(made[-1])
        return made[-1]

    monkeypatch.setattr(storage_io, "local_scratch", relative_scratch)
    url = f"s3://{s3_server['bucket']}/io-device/run"
    saved = CheckpointManager(url).save(tf.train.Checkpoint(table=table), 7, {})
    assert storage_io.listdir(saved.directory) == [
        "_COMPLETE",
        "state.json",
        "variables.data-00000-of-00003",
        "variables.data-00001-of-00003",
        "variables.data-00002-of-00003",
        "variables.index",
    ]
    for shard in table.variables:
        shard.assign(tf.zeros_like(shard))
    restore(tf.train.Checkpoint(table=table), saved)
    np.testing.assert_array_equal(np.concatenate([s.numpy() for s in table.variables]), values)
    assert made == ["recsys_dist_stage_0", "recsys_dist_restore_1"]  # both relative
    assert not os.listdir(tmp_path)  # and both removed


def test_a_dynamic_tables_rows_in_use_go_through_a_staged_checkpoint(tmp_path, runtime, s3_server):
    """A dynamic table on the two server processes, checkpointed to S3 (staged, the
    coordinator writes every shard): the checkpoint holds each shard's rows in use only,
    and a restore brings them, and the ids' rows, back."""
    import numpy as np
    import tensorflow as tf

    from recsys_dist.checkpoint.restore import restore
    from recsys_dist.checkpoint.store import CheckpointManager, local_prefix
    from recsys_dist.cluster.placement import placement_for
    from recsys_dist.features.config import TableSpec
    from recsys_dist.models.dynamic_table import DynamicTable

    spec = TableSpec("user", 8, "dynamic", capacity_per_shard=5000)
    with runtime.strategy.scope():
        table = DynamicTable(spec, 8, shards=2, seed=1, placement=placement_for(runtime.strategy))
    assert sorted(s.emb.device.split("/device")[0] for s in table.shards) == [
        "/job:ps/replica:0/task:0",
        "/job:ps/replica:0/task:1",
    ]
    ids = tf.constant(np.arange(1, 301) * 7919, tf.int64)
    table.lookup(ids, training=True)
    before = table.lookup(ids).numpy()
    used = [int(s.next_row.numpy()) for s in table.shards]
    assert sum(used) == 300
    saved = CheckpointManager(f"s3://{s3_server['bucket']}/dynamic/run").save(
        tf.train.Checkpoint(table=table), 3, {}
    )
    with local_prefix(saved) as local:
        shapes = tf.train.load_checkpoint(local).get_variable_to_shape_map()
    for i, rows in enumerate(used):
        assert shapes[f"table/shards/{i}/emb/.ATTRIBUTES/VARIABLE_VALUE"] == [rows, 8]
    for shard in table.shards:
        shard.emb.assign(tf.zeros_like(shard.emb))
        shard.index.remove(shard.index.export()[0])
    assert not table.lookup(ids).numpy().any()
    restore(tf.train.Checkpoint(table=table), saved)
    np.testing.assert_array_equal(table.lookup(ids).numpy(), before)


@pytest.mark.parametrize(
    "when, sent",
    [
        ("starting", signal.SIGTERM),
        ("a server stopped", signal.SIGTERM),
        ("training", signal.SIGTERM),
        ("training", signal.SIGINT),
    ],
)
def test_sigterm_to_train_leaves_no_server_processes(tmp_path, data, when, sent):
    """SIGTERM while the servers start or the first step traces, and mid-training, with
    closures in flight; SIGINT (Ctrl-C) mid-training. Mid-training, a process once hung in
    ClusterCoordinator's destructor at exit (fixed in ``cli.run``); that hang depends on
    timing, and this test did not reproduce it on demand. With a parameter server stopped
    (SIGSTOP: it holds its connections and never answers) as the cluster starts, the
    command waits inside TensorFlow for it, where no Python signal handler runs."""
    config = write_config(tmp_path, data, "lr", epochs=1000)
    process = command_forks.popen(
        [
            CLI,
            "train",
            "--config",
            config,
            "--model-dir",
            str(tmp_path / "run"),
            "--set",
            "train.log_every_seconds=0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines, servers = [], set()
    try:  # a failure before the signal must not leave a 1000-epoch run behind
        for line in process.stdout:
            lines.append(line)
            if line.startswith("cluster "):
                # the servers' forking process and the stderr filter; the servers
                children = set(child_pids(process.pid))
                servers = set(server_pids(process.pid).values())
                assert len(servers) == 4 and len(children) == 2, "".join(lines)
                if when == "a server stopped":
                    os.kill(server_pids(process.pid)["ps", 1], signal.SIGSTOP)
                    time.sleep(5)  # the command is waiting for it by now
                if when != "training":
                    break
            if line.startswith("step "):  # training is under way
                break
        assert servers, "".join(lines)
    except BaseException:
        process.kill()
        raise
    process.send_signal(sent)
    try:  # a process that hangs on the way out fails the test, not the whole suite
        output, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail("train did not exit within 60 s of the signal:\n" + "".join(lines) + output)
    assert process.returncode == 128 + sent, "".join(lines) + output
    assert output.splitlines()[-1] == f"error: stopped by {sent.name}", output
    assert "Traceback" not in output
    deadline = time.time() + 20
    started = children | servers
    while time.time() < deadline and any(os.path.exists(f"/proc/{p}") for p in started):
        time.sleep(0.2)
    assert not [p for p in started if os.path.exists(f"/proc/{p}")]


def test_train_command_writes_summaries_resolved_config_and_result(tmp_path, data):
    config = write_config(tmp_path, data, "lr", epochs=2)
    run = tmp_path / "run"
    started = time.time()
    result = command_forks.run(
        [
            CLI,
            "train",
            "--config",
            config,
            "--model-dir",
            str(run),
            "--set",
            "input.batch_size=512",
            "--set",
            "cluster.mode=in_process",  # what it writes does not depend on the mode
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    ended = time.time()
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "trained  " in result.stdout and "eval     click: AUC " in result.stdout
    assert "oracle AUC" in result.stdout
    import json

    import yaml

    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert resolved["features"] == "features.yaml"
    assert resolved["input"]["batch_size"] == 512  # the --set override is recorded
    assert (run / "features.yaml").read_text() == (tmp_path / "features.yaml").read_text()
    assert resolved["data"]["path"] == str(data)  # absolute: it loads from anywhere
    figures = json.loads((run / "train_result.json").read_text())
    assert figures["examples"] == 2 * 12_000 and figures["eval"]["rows"] == 6_000
    # the first step's end, by a worker's clock: within the command's life
    assert started < figures["first_step_at"] < ended
    assert 0 < figures["seconds_to_first_step"] < ended - started
    assert (
        f"start-up first step {figures['seconds_to_first_step']:.1f}s after the command started"
    ) in result.stdout
    passes = figures["epochs"]  # the training AUC of each pass, over that pass's rows
    assert [p["epoch"] for p in passes] == [1, 2]
    assert all(0.5 < p["auc"]["click"] < 1 for p in passes)
    assert figures["auc"] == passes[-1]["auc"]
    first = passes[0]["auc"]["click"]
    assert f"epoch 1/2 done: train auc/click {first:.4f}" in result.stdout, result.stdout
    events = list((run / "train").glob("events.out.tfevents.*"))
    assert events
    scalars = {}
    for event in tf.compat.v1.train.summary_iterator(str(events[0])):
        for value in event.summary.value:  # as tf.summary.scalar writes them
            assert value.metadata.plugin_data.plugin_name == "scalars", value.tag
            scalars[value.tag] = float(tf.make_ndarray(value.tensor))
    assert {"loss", "examples_per_second", "auc/click"} <= set(scalars)
    assert scalars["auc/click"] == pytest.approx(passes[-1]["auc"]["click"], abs=1e-3)
    # the resolved config loads again as it is
    from recsys_dist.config import load_config

    assert load_config(run / "config.yaml").input.batch_size == 512


def _servers_of(pid: int) -> list[int]:
    return sorted(server_pids(pid).values())


def test_in_process_mode_trains_in_one_process_and_a_local_cluster_resumes_it(tmp_path, data):
    import json

    config, run = write_config(tmp_path, data, "lr", epochs=1), tmp_path / "run"
    process = command_forks.popen(
        [
            CLI,
            "train",
            "--config",
            config,
            "--model-dir",
            str(run),
            "--set",
            "cluster.mode=in_process",
            "--set",
            "train.log_every_seconds=0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines, servers = [], None
    for line in process.stdout:
        lines.append(line)
        if line.startswith("step ") and servers is None:  # training is under way
            servers = _servers_of(process.pid)
    output = "".join(lines)
    assert process.wait(timeout=300) == 0, output[-3000:]
    assert "cluster  2 workers + 2 ps (in_process: servers inside this process)" in output
    assert servers == [], output  # no server process: they are threads of this one
    assert not (run / "logs").exists()
    first = json.loads((run / "train_result.json").read_text())
    assert first["examples"] == 12_000 and 0.5 < first["eval"]["labels"]["click"]["auc"] < 1
    # the same run goes on with one process per server: same strategy, same checkpoint
    resumed = command_forks.run(
        [
            CLI,
            "train",
            "--config",
            config,
            "--model-dir",
            str(run),
            "--set",
            "cluster.mode=local",
            "--set",
            "train.epochs=2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    assert "(local; server logs in " in resumed.stdout
    assert (
        f"resume   from {run}/checkpoints/ckpt-" in resumed.stdout
        and "12,000 of 24,000 rows done" in resumed.stdout
    ), resumed.stdout
    assert json.loads((run / "train_result.json").read_text())["examples"] == 12_000


def test_sigterm_to_an_in_process_train_ends_it_with_one_line(tmp_path, data):
    config = write_config(tmp_path, data, "lr", epochs=1000)
    process = command_forks.popen(
        [
            CLI,
            "train",
            "--config",
            config,
            "--model-dir",
            str(tmp_path / "run"),
            "--set",
            "train.log_every_seconds=0",
            "--set",
            "cluster.mode=in_process",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if line.startswith("step "):
                break
        assert lines and lines[-1].startswith("step "), "".join(lines)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM, "".join(lines) + output
    assert output.splitlines()[-1] == "error: stopped by SIGTERM", output
    assert "Traceback" not in output


def test_an_unwritable_model_dir_stops_train_before_the_cluster_starts(
    tmp_path, data, s3_server, capsys
):
    config = write_config(tmp_path, data, "lr", epochs=1)
    (tmp_path / "file").write_text("")
    for model_dir, reason in (
        ("s3://no-such-bucket-train/run", "The specified bucket does not exist"),
        (str(tmp_path / "file" / "run"), "Not a directory"),
    ):
        result = refused_here(capsys, "train", "--config", config, "--model-dir", model_dir)
        assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
        assert result.stderr.startswith(
            f"error: {model_dir}: cannot write the run's checkpoints there: {reason}"
        ), result.stderr
        assert "Traceback" not in result.stderr and "cluster " not in result.stdout


def test_bad_value_on_a_worker_stops_train_with_one_clear_error(tmp_path, data):
    import shutil

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    bad_data = tmp_path / "data"
    shutil.copytree(data, bad_data)
    path = sorted(bad_data.glob("dt=2026-01-02/*.parquet"))[1]
    table = pq.read_table(path)
    values = table["I1"].to_numpy().copy()
    values[7] = np.inf
    table = table.set_column(
        table.schema.get_field_index("I1"),
        pa.field("I1", pa.float32(), nullable=False),
        pa.array(values),
    )
    pq.write_table(table, path, row_group_size=1000)
    config = write_config(tmp_path, bad_data, "lr", epochs=1)
    result = command_forks.run(
        [CLI, "train", "--config", config, "--model-dir", str(tmp_path / "run"), "--no-eval"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 3, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: numeric column 'I1' (feature 'I1') has an infinite value in {path} "
        "(rows 0..1000) at row 7 (set data.on_bad_row: skip to skip such rows)"
    )
