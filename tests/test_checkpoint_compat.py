"""A checkpoint written by the TensorFlow 2.16 stack (tests/fixtures/tf216_checkpoint, made
by tests/fixtures/make_tf216_checkpoint.py) restores on the installed stack and predicts
what it predicted when it was written."""

from __future__ import annotations

import json
import pathlib

import numpy as np

FIXTURE = pathlib.Path(__file__).resolve().parent / "fixtures" / "tf216_checkpoint"


def fixed_features(config) -> dict:
    """Eight fixed rows through the config's own transform (no Parquet needed)."""
    import tensorflow as tf

    from recsys_dist.features.transforms import FeatureTransform

    dtypes = {"I1": "float32", "C1": "int64", "C21": "string", "tags": "list<int64>"}
    transform = FeatureTransform(config.features, [], dtypes, "fail")
    raw = {"I1": tf.constant([0.0, 1.0, 5.0, float("nan"), 30.0, 2.0, 0.5, 100.0]),
           "C1": tf.constant([1, 2, 3, 4, 5, 6, 7, 8], tf.int64),
           "C21": tf.constant(["a", "b", "c", "", "e", "f", "g", "h"]),
           "tags": tf.ragged.constant([[1], [2, 3], [], [4], [5, 6, 7], [8], [], [9]],
                                      tf.int64)}
    return transform.features_only(raw, tf.constant("fixture"), tf.constant(0, tf.int64))


def test_a_tf216_checkpoint_restores_and_predicts_as_when_written():
    from recsys_dist.config import load_config
    from recsys_dist.export.saved_model import load_model
    from recsys_dist.checkpoint.store import find_checkpoint

    expected = json.loads((FIXTURE / "expected.json").read_text())
    assert expected["tensorflow_version"].startswith("2.16.")
    config = load_config(FIXTURE / "model.yaml")
    model = load_model(config, find_checkpoint(str(FIXTURE / "run")))
    logits = model(fixed_features(config), training=False)["click"].numpy()
    np.testing.assert_allclose(logits, expected["click_logits"], rtol=1e-5, atol=1e-6)
    assert np.std(logits) > 1e-4  # trained weights, not an initialisation
