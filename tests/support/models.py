"""A tiny feature config, batches for it, and helpers for models and embedding tables.

Shared by the model tests (tests/unit/models/), the warm start tests and the test that
trains every model on parameter servers (tests/cluster/test_models_on_ps.py, which
imports this module in a subprocess).
"""

from __future__ import annotations

import pathlib

import numpy as np

# isort: off
import recsys_dist  # noqa: F401  sets TF_USE_LEGACY_KERAS, so it must come before TensorFlow
import tensorflow as tf
# isort: on

from recsys_dist.config.experiment import MODEL_INPUT_GROUPS
from recsys_dist.features.config import FeatureConfig, load_feature_config
from tests.support.configs import write_yaml

TINY_FEATURES = {
    "tables": {
        "ad": {"rows": 50, "dim": 4},
        "user": {"rows": 40, "dim": 4},
        "age_bucket": {"rows": 5, "dim": 4},
        "tag": {"rows": 30, "dim": 4},
        "cross": {"rows": 60, "dim": 4},
    },
    "features": {
        "ad_id": {"kind": "categorical", "dtype": "int64", "table": "ad"},
        "user_id": {"kind": "categorical", "dtype": "string", "table": "user"},
        "price": {"kind": "numeric", "transform": "log1p"},
        "age": {
            "kind": "numeric",
            "transform": "bucketize",
            "boundaries": [18, 30, 45, 60],
            "table": "age_bucket",
        },
        "tags": {"kind": "multi_categorical", "table": "tag", "max_length": 3, "combiner": "mean"},
        "ad_x_user": {"kind": "cross", "inputs": ["ad_id", "user_id"], "table": "cross"},
        "hist_ad": {"kind": "sequence", "table": "ad", "max_length": 4, "target": "ad_id"},
    },
    "labels": {"click": {}, "conversion": {}},
}

LABELS = ["click", "conversion"]


def write_feature_config(
    directory: pathlib.Path, doc: dict, name: str = "features.yaml"
) -> FeatureConfig:
    """Writes the feature config ``doc`` as ``directory/name`` and loads it."""
    return load_feature_config(write_yaml(directory / name, doc))


def model_inputs(name: str, features: FeatureConfig) -> dict[str, list[str]]:
    """Every feature in each input group model ``name`` reads."""
    return {group: list(features.features) for group in MODEL_INPUT_GROUPS[name]}


def tiny_batch(rows: int = 64, seed: int = 0) -> tuple[dict, dict]:
    """A batch for TINY_FEATURES whose labels are functions of the ids."""
    rng = np.random.default_rng(seed)
    ad = rng.integers(0, 50, rows)
    user = rng.integers(0, 40, rows)
    batch = {
        "ad_id": tf.constant(ad, tf.int64),
        "user_id": tf.constant(user, tf.int64),
        "price": tf.constant(rng.lognormal(size=rows), tf.float32),
        "age": tf.constant(rng.integers(0, 5, rows), tf.int64),
        "tags": {
            "ids": tf.constant(rng.integers(0, 30, (rows, 3)), tf.int64),
            "weights": tf.constant(rng.random((rows, 3)) < 0.6, tf.float32),
        },
        "ad_x_user": tf.constant((ad * 7 + user) % 60, tf.int64),
        "hist_ad": {
            "ids": tf.constant(rng.integers(0, 50, (rows, 4)), tf.int64),
            "weights": tf.constant(np.arange(4) < rng.integers(0, 5, (rows, 1)), tf.float32),
        },
    }
    labels = {
        "click": tf.constant(ad % 2 == 0, tf.float32),
        "conversion": tf.constant(user < 20, tf.float32),
    }
    return batch, labels


def total_loss(logits: dict[str, tf.Tensor], labels: dict[str, tf.Tensor]) -> tf.Tensor:
    """The sum over labels of the mean sigmoid cross-entropy."""
    return tf.add_n(
        [
            tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels[k], v))
            for k, v in logits.items()
        ]
    )


def sharding_creator(num_shards: int):
    """A variable creator that splits 2-D variables by rows into a ShardedVariable,
    the way ParameterServerStrategy does with a variable_partitioner ("div" layout)."""

    def creator(next_creator, **kwargs):
        shape = tf.TensorShape(kwargs.get("shape"))
        if shape.rank != 2:
            return next_creator(**kwargs)
        initial = kwargs["initial_value"]
        value = tf.convert_to_tensor(initial() if callable(initial) else initial)
        shards = []
        for i, rows in enumerate(np.array_split(np.arange(shape[0]), num_shards)):
            shards.append(
                next_creator(
                    **{
                        **kwargs,
                        "initial_value": value[rows[0] : rows[-1] + 1],
                        "shape": (len(rows), shape[1]),
                        "name": f"{kwargs['name']}/part_{i}",
                    }
                )
            )
        return tf.__internal__.distribute.ShardedVariable(shards)

    return creator
