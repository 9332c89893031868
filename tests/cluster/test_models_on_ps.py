"""Every model of the zoo trains under a real ParameterServerStrategy with its tables
partitioned over two parameter servers (in-process servers, in a subprocess).

The models' other tests are in tests/unit/models/."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from recsys_dist.models.zoo import MODELS
from tests.support.configs import write_yaml
from tests.support.models import TINY_FEATURES
from tests.support.paths import REPO as PROJECT_ROOT

pytestmark = pytest.mark.cluster


PSS_SCRIPT = """\
import os, socket, sys
import numpy as np
import recsys_dist
import tensorflow as tf
from recsys_dist.features.config import load_feature_config
from recsys_dist.models.zoo import MODELS, build_model
from tests.support.models import LABELS, model_inputs, tiny_batch, total_loss

def port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

spec = {{"worker": [f"127.0.0.1:{{port()}}"], "ps": [f"127.0.0.1:{{port()}}" for _ in range(2)]}}
cluster = tf.train.ClusterSpec(spec)
config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=4)
servers = [tf.distribute.Server(cluster, job_name=job, task_index=i, config=config)
           for job in spec for i in range(len(spec[job]))]
strategy = tf.distribute.experimental.ParameterServerStrategy(
    tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, rpc_layer="grpc"),
    variable_partitioner=tf.distribute.experimental.partitioners.FixedShardsPartitioner(2))
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
features = load_feature_config({features!r})
batch, labels = tiny_batch(32)
models, optimizers = {{}}, {{}}
with strategy.scope():
    for name in MODELS:
        models[name] = build_model(name, features, model_inputs(name, features), LABELS)
        models[name].create_variables()
        optimizers[name] = (tf.keras.optimizers.legacy.Adagrad(0.5),
                            tf.keras.optimizers.legacy.Adam(0.01))
for name, model in models.items():
    tables = [s.variable for m in model.submodules if hasattr(m, "stacks") for s in m.stacks]
    assert all(isinstance(t, tf.__internal__.distribute.ShardedVariable)
               and len(t.variables) == 2 for t in tables), name
    assert ({{v.ref() for v in model.embedding_variables}}
            == {{s.ref() for t in tables for s in t.variables}}), name


@tf.function
def step():
    def replica_step():
        losses = {{}}
        for name, model in models.items():
            embedding, dense = model.embedding_variables, model.dense_variables
            with tf.GradientTape() as tape:
                losses[name] = total_loss(model(batch, training=True), labels)
                # trained with the model's own losses too (DIEN's auxiliary loss)
                loss = losses[name] + sum(model.losses)
            grads = tape.gradient(loss, embedding + dense)
            embedding_opt, dense_opt = optimizers[name]
            embedding_opt.apply_gradients(zip(grads[:len(embedding)], embedding))
            dense_opt.apply_gradients(zip(grads[len(embedding):], dense))
        return losses
    return strategy.run(replica_step)


results = [coordinator.schedule(step) for _ in range(5)]
coordinator.join()
first, last = results[0].fetch(), results[-1].fetch()
for name in MODELS:
    assert last[name] < first[name], (name, first[name], last[name])
    print(name, first[name], last[name], flush=True)
sys.stdout.flush()
os._exit(0)  # in-process servers cannot be shut down cleanly
"""


def test_models_train_with_sharded_tables_on_parameter_servers(tmp_path):
    features = write_yaml(tmp_path / "features.yaml", TINY_FEATURES)
    script = tmp_path / "pss.py"
    script.write_text(PSS_SCRIPT.format(features=features))
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_ROOT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "GRPC_FAIL_FAST": "use_caller"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert [line.split()[0] for line in result.stdout.splitlines()] == list(MODELS)
