"""Atomic checkpoints (local and on moto's S3 server), data positions, resharding.

The SIGKILL scenarios are in ``test_fault_tolerance.py``; these check the pieces.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist.data.shard_plan import Unit
from recsys_dist.train.checkpoints import (COMPLETE, CheckpointError, CheckpointManager,
                                           SavedCheckpoint, check_signature)
from recsys_dist.train.data_position import DataPosition, PositionMismatch

REPO = pathlib.Path(__file__).resolve().parents[1]


def _checkpoint(value: float) -> tf.train.Checkpoint:
    return tf.train.Checkpoint(v=tf.Variable(tf.fill([3], value)))


def test_keeps_the_last_k_and_restores_the_newest_complete(tmp_path):
    manager = CheckpointManager(str(tmp_path), keep=2)
    assert manager.latest() is None
    for step in (10, 20, 30, 40):
        manager.save(_checkpoint(float(step)), step, {"n": step})
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["ckpt-000000000030", "ckpt-000000000040"]
    latest = manager.latest()
    assert latest.step == 40 and latest.state["n"] == 40 and latest.state["step"] == 40
    target = _checkpoint(0.0)
    target.read(latest.prefix).expect_partial()
    np.testing.assert_array_equal(target.v.numpy(), [40.0] * 3)


def test_a_checkpoint_without_its_marker_is_never_restored_and_is_cleaned_up(tmp_path):
    manager = CheckpointManager(str(tmp_path), keep=3)
    manager.save(_checkpoint(1.0), 100, {})
    torn = manager.save(_checkpoint(2.0), 200, {})
    os.remove(os.path.join(torn.directory, COMPLETE))  # as if killed before the marker
    (pathlib.Path(torn.directory) / "variables.index").write_bytes(b"half")
    assert manager.latest().step == 100
    manager.save(_checkpoint(3.0), 300, {})
    assert not os.path.exists(torn.directory)  # older than the newest complete: removed
    assert [c.step for c in manager.all_complete()] == [100, 300]


def test_a_save_at_an_existing_step_replaces_it(tmp_path):
    manager = CheckpointManager(str(tmp_path))
    manager.save(_checkpoint(1.0), 5, {"a": 1})
    manager.save(_checkpoint(2.0), 5, {"a": 2})
    assert manager.latest().state["a"] == 2


def test_signature_mismatch_names_the_table(small_config):
    from recsys_dist.config import load_config
    from recsys_dist.train.checkpoints import model_signature

    config = load_config(small_config())
    signature = model_signature(config)
    table = sorted(signature["tables"])[0]
    signature["tables"][table] = [signature["tables"][table][0] + 1, 4]
    saved = SavedCheckpoint("/m/checkpoints/ckpt-000000000007", 7, {"signature": signature})
    with pytest.raises(CheckpointError, match=rf"table '{table}' is \d+ x 4 in the checkpoint"):
        check_signature(saved, config)


def _position(epochs: int = 2) -> DataPosition:
    items = tuple(Unit(0, i * 10, (i + 1) * 10) for i in range(5))
    return DataPosition(("a.parquet",), items, epochs, shuffle=True, seed=3)


def test_data_position_schedules_what_is_left_pass_by_pass():
    position = _position()
    order = list(position.schedule())
    assert sorted(order[:5]) == sorted(order[5:]) == list(range(5))
    assert order[:5] != list(range(5)) or order[5:] != list(range(5))  # shuffled
    for index in order[:7]:
        position.complete(index)
    resumed = _position()
    resumed.restore(json.loads(json.dumps(position.to_json())), "ckpt")
    assert resumed.finished_rows == 70 and not resumed.finished
    left = list(resumed.schedule())
    assert sorted(left) == sorted(order[7:])  # exactly the three unfinished passes
    for index in left:
        resumed.complete(index)
    assert resumed.finished and resumed.finished_rows == resumed.total_rows == 100


def test_data_position_of_other_data_is_refused():
    position = _position()
    other = DataPosition(("b.parquet",), position.items, 2, True, 3)
    with pytest.raises(PositionMismatch, match="ckpt-9: the checkpoint's data position was "
                                               "recorded over other data"):
        other.restore(position.to_json(), "ckpt-9")


S3_SCRIPT = textwrap.dedent("""
    import os, sys
    import recsys_dist
    import tensorflow as tf
    import tensorflow_io  # registers s3://
    from recsys_dist.train.checkpoints import CheckpointManager
    url = sys.argv[1]
    manager = CheckpointManager(url, keep=1)
    for step in (1, 2):
        manager.save(tf.train.Checkpoint(v=tf.Variable([float(step)] * 4)), step, {"s": step})
    latest = manager.latest()
    target = tf.train.Checkpoint(v=tf.Variable([0.0] * 4))
    target.read(latest.prefix).expect_partial()
    print("RESULT", latest.step, latest.state["s"], list(target.v.numpy()),
          sorted(tf.io.gfile.listdir(url + "/checkpoints")), flush=True)
    os._exit(0)  # tensorflow-io's S3 client aborts in exit handlers
""")


def test_checkpoints_on_s3(s3_server, tmp_path):
    url = f"s3://{s3_server['bucket']}/runs/ckpt-test"
    env = {**os.environ, **s3_server["env"], "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", S3_SCRIPT, url], capture_output=True,
                            text=True, env=env, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(l for l in result.stdout.splitlines() if l.startswith("RESULT"))
    assert line == "RESULT 2 2 [2.0, 2.0, 2.0, 2.0] ['ckpt-000000000002/']" or \
        line == "RESULT 2 2 [2.0, 2.0, 2.0, 2.0] ['ckpt-000000000002']", line
    keys = [o["Key"] for o in s3_server["client"].list_objects_v2(
        Bucket=s3_server["bucket"], Prefix="runs/ckpt-test/")["Contents"]]
    assert "runs/ckpt-test/checkpoints/ckpt-000000000002/_COMPLETE" in keys
    assert not [k for k in keys if "ckpt-000000000001" in k]  # keep=1 pruned step 1


RESHARD_SCRIPT = textwrap.dedent("""
    import sys, pathlib, numpy as np
    import recsys_dist
    import tensorflow as tf
    from recsys_dist.config import load_config
    from recsys_dist.config.experiment import ClusterSpec
    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.cluster.runtime import connect
    from recsys_dist.train.trainer import Trainer

    config_path, model_dir, mode, ps, out = sys.argv[1:6]
    config = load_config(config_path, ["train.max_steps=30"])
    pipeline = prepare_input(config, "train", 2)

    def whole(variable):
        container = getattr(variable, "_sharded_container", None)
        parts = container().variables if container else [variable]
        return container, np.concatenate([tf.convert_to_tensor(p).numpy() for p in parts])

    with connect(ClusterSpec("local", 2, int(ps)), model_dir + "/logs-" + mode, 1024) as rt:
        trainer = Trainer(config, rt, pipeline, model_dir)
        if mode == "save":
            trainer.fit(show_progress=False)
        else:
            trainer.resume()
        arrays, shards = {}, {}
        for i, v in enumerate(trainer.model.embedding_variables):
            container, value = whole(v)
            if container is None or v is container().variables[0]:
                name = v.name.replace("/part_0", "").replace(":0", "")
                arrays[name] = value
                shards[name] = len(container().variables) if container else 1
                slot = trainer.embedding_optimizer.get_slot(container() if container else v,
                                                            "accumulator")
                arrays[name + "/accumulator"] = whole(slot.variables[0] if container else slot)[1]
        for i, v in enumerate(trainer.model.dense_variables):
            arrays[f"dense{i}"] = v.numpy()
            for slot in ("m", "v"):
                arrays[f"dense{i}/{slot}"] = trainer.dense_optimizer.get_slot(v, slot).numpy()
        arrays["adam_iterations"] = np.array(trainer.dense_optimizer.iterations.numpy())
        arrays["step"] = np.array(trainer.step)
        np.savez(out, **arrays)
        print("SHARDS", max(shards.values()), flush=True)
""")


@pytest.mark.cluster
def test_a_checkpoint_of_2_parameter_servers_restores_exactly_into_3(tmp_path):
    from recsys_dist.data.synth import synthesize
    from tests.test_fault_tolerance import write_config

    synthesize(tmp_path / "data", days=3, rows_per_day=4000, seed=2, rows_per_file=2000,
               row_groups_per_file=2)
    config = write_config(tmp_path, tmp_path / "data")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    shards = {}
    for mode, ps in (("save", 2), ("load", 3)):
        result = subprocess.run([sys.executable, "-c", RESHARD_SCRIPT, config,
                                 str(tmp_path / "model"), mode, str(ps),
                                 str(tmp_path / f"{mode}.npz")],
                                capture_output=True, text=True, env=env, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        shards[mode] = int(result.stdout.split("SHARDS ")[1].split()[0])
    assert shards == {"save": 2, "load": 3}
    saved, loaded = np.load(tmp_path / "save.npz"), np.load(tmp_path / "load.npz")
    assert sorted(saved) == sorted(loaded)
    assert int(saved["step"]) == 30 and int(saved["adam_iterations"]) == 30
    for key in saved:
        np.testing.assert_array_equal(saved[key], loaded[key], err_msg=key)
    # the slots really trained (an untouched Adagrad accumulator is all 0.1)
    assert any(not np.allclose(saved[k], 0.1) for k in saved if k.endswith("/accumulator"))
