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


#: How far two runs of the same steps may drift apart, per float tensor, norm-wise (see
#: :func:`assert_same_state`).
DRIFT = 1e-3


def assert_same_state(a: pathlib.Path, b: pathlib.Path, noise_only: tuple[str, ...] = ()) -> None:
    """Two runs that trained the same batches in the same order, under other strategies,
    devices or thread counts, saved the same state.

    Exact where the arithmetic is exact: the same keys and shapes, and integer tensors
    (step counters, hash table keys) equal. Float tensors are the same computation summed
    in another order (an all-reduce across processes, Eigen's reductions split over
    other thread pools), so they differ by rounding, and rounding is not bounded per
    value: Adagrad and Adam divide a gradient by its running scale, so a row whose
    gradient is rounding noise (a rarely seen id, a sum that cancels) takes a step of up
    to the learning rate in either sign. Per tensor the drift stays small against the
    tensor's size, so each is compared norm-wise: ``||x - y|| <= DRIFT * ||x||``. A run
    that trained other batches, or lost one replica's gradients, misses that by orders
    of magnitude; the tests compare the predictions (held-out AUC) as well.

    ``noise_only``: parts of checkpoint keys whose gradient is zero in exact arithmetic
    (e.g. an attention's key bias: it adds the same ``q . b`` to every score of a row,
    which a softmax ignores). Adam turns their rounding noise into steps, so they hold
    nothing two runs share; only their shapes are compared (with their slots)."""
    left, right = checkpoint(a), checkpoint(b)
    assert sorted(left) == sorted(right)
    slots = [k for k in left if "OPTIMIZER_SLOT" in k]
    assert len(slots) >= 10, sorted(left)
    apart = []
    for key in left:
        x, y = np.asarray(left[key]), np.asarray(right[key])
        assert x.shape == y.shape, (key, x.shape, y.shape)
        if any(part in key for part in noise_only):
            continue
        if x.dtype.kind == "f":
            x, y = x.astype(np.float64), y.astype(np.float64)
            drift, size = np.linalg.norm(x - y), max(np.linalg.norm(x), np.linalg.norm(y))
            if drift > DRIFT * size:
                apart.append(
                    f"{key}: ||a - b|| = {drift:.3g} > {DRIFT} * ||a|| = {DRIFT * size:.3g}; "
                    f"largest difference {np.max(np.abs(x - y)):.3g}"
                )
        else:
            np.testing.assert_array_equal(x, y, err_msg=key)
    assert not apart, "\n".join(apart)
