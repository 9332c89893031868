"""A model's dynamic tables share one lock per server: a training step of Wide & Deep
(a dynamic table in its wide part and in its tower) resolves both layers' ids in one
lock execution per server, with the same rows and outputs as each layer on its own."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from recsys_dist.config.features import load_feature_config
from recsys_dist.models.embedding import FeatureEmbeddings
from recsys_dist.models.sharding import dynamic_table_shards
from recsys_dist.models.zoo import MODELS, build_model
from recsys_dist.config.model_params import WideDeepParams
from tests.support.configs import write_yaml

FEATURES = {
    "tables": {"user": {"kind": "dynamic", "dim": 4, "capacity_per_shard": 100},
               "small": {"rows": 10, "dim": 4}},
    "features": {"user_id": {"kind": "categorical", "dtype": "int64", "table": "user"},
                 "C2": {"kind": "categorical", "dtype": "int64", "table": "small"}},
    "labels": {"click": {}},
}
INPUTS = {"wide": ["user_id", "C2"], "deep": ["user_id", "C2"]}


def _model(config, merged: bool):
    with dynamic_table_shards(2):
        if merged:
            return build_model("wide_deep", config, INPUTS, ["click"], seed=3)
        return MODELS["wide_deep"](config, INPUTS, ["click"], params=WideDeepParams(), seed=3)


def _train(model, batches):
    """A few forward passes in training mode (admission) through one traced function;
    returns the outputs and how many lock executions the function holds."""
    @tf.function
    def forward(batch):
        return model(batch, training=True)["click"]

    outputs = [forward(batch).numpy() for batch in batches]
    graph = forward.get_concrete_function(batches[0]).graph
    locks = sum(op.type == "MutexLock" for op in graph.get_operations())
    return outputs, locks


def test_one_lock_execution_per_server_and_the_same_result(tmp_path):
    config = load_feature_config(write_yaml(tmp_path / "f.yaml", FEATURES))
    rng = np.random.default_rng(0)
    batches = [{"user_id": tf.constant(rng.integers(0, 40, 64), tf.int64),
                "C2": tf.constant(rng.integers(0, 10, 64), tf.int64)} for _ in range(4)]
    merged, separate = _model(config, merged=True), _model(config, merged=False)
    layers = [m for m in merged._flatten_modules() if isinstance(m, FeatureEmbeddings)]
    assert len(layers) == 2 and layers[0].dynamic_tables_locks is layers[1].dynamic_tables_locks
    merged_out, merged_locks = _train(merged, batches)
    separate_out, separate_locks = _train(separate, batches)
    assert (merged_locks, separate_locks) == (2, 4)  # 2 servers; x 2 layers on their own
    for a, b in zip(merged_out, separate_out):
        np.testing.assert_array_equal(a, b)
    for name in ("user",):
        for a, b in zip(merged.dynamic_tables[name], separate.dynamic_tables[name]):
            assert a.stats()["live_ids"] == b.stats()["live_ids"] > 0
            for sa, sb in zip(a.shards, b.shards):
                ka, ra = (t.numpy() for t in sa.index.export())
                kb, rb = (t.numpy() for t in sb.index.export())
                assert dict(zip(ka, ra)) == dict(zip(kb, rb))
