"""A checkpoint written by the TensorFlow 2.16 stack (tests/fixtures/tf216_checkpoint, made
by tests/fixtures/make_tf216_checkpoint.py) restores on the installed stack and predicts
what it predicted when it was written."""

from __future__ import annotations

import json

import numpy as np

from tests.support.tf216 import FIXTURE, fixed_features


def test_a_tf216_checkpoint_restores_and_predicts_as_when_written():
    from recsys_dist.checkpoint.store import find_checkpoint
    from recsys_dist.config import load_config
    from recsys_dist.export.saved_model import load_model

    expected = json.loads((FIXTURE / "expected.json").read_text())
    assert expected["tensorflow_version"].startswith("2.16.")
    config = load_config(FIXTURE / "model.yaml")
    model = load_model(config, find_checkpoint(str(FIXTURE / "run")))
    logits = model(fixed_features(config), training=False)["click"].numpy()
    # Written by TensorFlow 2.16 in another process, maybe on another CPU: float32 rounding
    # in other kernels. The head sums 8 hidden units (a cross layer and an MLP before it)
    # whose terms add up to 0.05-1.6 in absolute value on these rows; rtol + atol allow at
    # least 12 eps of that on each row (1.8e-7 seen, row 7 of 8). Weights restored into the
    # wrong rows (shifted by one) move the logits by 0.1.
    np.testing.assert_allclose(logits, expected["click_logits"], rtol=1e-5, atol=1e-6)
    assert np.std(logits) > 1e-4  # trained weights, not an initialisation
