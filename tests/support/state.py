"""The saved state of a run: every tensor of its newest checkpoint, and a comparison of two."""

from __future__ import annotations

import pathlib

import numpy as np
import tensorflow as tf


def checkpoint(model_dir: pathlib.Path) -> dict[str, np.ndarray]:
    """Every saved tensor of the newest complete checkpoint, by its key."""
    newest = sorted(model_dir.glob("checkpoints/ckpt-*/_COMPLETE"))[-1].parent
    reader = tf.train.load_checkpoint(str(newest / "variables"))
    return {
        key: reader.get_tensor(key)
        for key in reader.get_variable_to_shape_map()
        if not key.startswith("_CHECKPOINTABLE") and "save_counter" not in key
    }


def assert_same_state(a: pathlib.Path, b: pathlib.Path) -> None:
    left, right = checkpoint(a), checkpoint(b)
    assert sorted(left) == sorted(right)
    slots = [k for k in left if "OPTIMIZER_SLOT" in k]
    assert len(slots) >= 10, sorted(left)
    for key in left:
        x, y = np.asarray(left[key]), np.asarray(right[key])
        assert x.shape == y.shape, (key, x.shape, y.shape)
        if x.dtype.kind == "f":
            np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6, err_msg=key)
        else:
            np.testing.assert_array_equal(x, y, err_msg=key)
