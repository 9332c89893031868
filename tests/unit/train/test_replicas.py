"""Gradients of a worker's replicas are combined exactly once.

ParameterServerStrategy runs one replica per GPU of a worker; there is no GPU here, so
this runs the trainer's loss under a MirroredStrategy over 2 logical CPU devices, which
combines replica gradients in ``apply_gradients`` the same way (one sum). The update
must equal a single-replica step on the whole batch: no double averaging that would
shrink updates or optimizer moments, and no per-replica mean where the halves hold
different numbers of valid rows.

Covers the loss of one replica's step (``train/step.py``; its refusal of a table without
gradients is in test_require_gradients.py) and the replica slicing of
``cluster/replicas.py``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import recsys_dist
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from recsys_dist.train.step import replica_loss
    from recsys_dist.cluster.replicas import replica_slice

    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 3)).astype("float32")
    y = (rng.random(8) < 0.5).astype("float32")
    # Skipped rows (weight 0) in one half: each replica must divide by the whole batch's
    # weight (5), not its own (4 and 1), for the summed update to be the batch mean's.
    valid = np.array([1, 1, 1, 1, 0, 0, 0, 1], "float32")
    init = rng.normal(size=(3, 1)).astype("float32")

    def make(optimizer_cls):
        w = tf.Variable(init)
        return w, optimizer_cls(0.1)

    def step(w, opt, xb, yb, vb, replicas):
        with tf.GradientTape() as tape:
            logits = {"click": tf.squeeze(xb @ w, 1)}
            loss, _ = replica_loss(logits, {"click": yb}, vb, ["click"], replicas)
        opt.apply_gradients([(tape.gradient(loss, w), w)])

    for optimizer_cls in (tf.keras.optimizers.legacy.SGD, tf.keras.optimizers.legacy.Adam):
        w1, o1 = make(optimizer_cls)
        step(w1, o1, x, y, valid, 1)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            w2, o2 = make(optimizer_cls)
        assert strategy.num_replicas_in_sync == 2
        # The worker batch goes to every replica whole; replica_slice gives each its half.
        batch = {"x": tf.constant(x), "y": tf.constant(y), "valid": tf.constant(valid)}
        seen = []

        def replica_fn(batch):
            mine = replica_slice(batch)
            seen.append(mine["x"].shape[0])
            step(w2, o2, mine["x"], mine["y"], mine["valid"], 2)

        @tf.function
        def run(batch):
            strategy.run(replica_fn, args=(batch,))

        run(batch)
        assert seen and set(seen) == {4}, seen  # each replica got its half
        # The halves' gradients (4 rows each, |x| < 4) are summed in another order than the
        # whole batch's 8 rows: float32 rounding of about 1e-7 on weights below 1. A
        # double averaging or a per-replica mean would be off by a good part of a step
        # of lr 0.1.
        np.testing.assert_allclose(w2.numpy(), w1.numpy(), rtol=1e-5, atol=1e-6)
        assert not np.allclose(w1.numpy(), init)
    print("OK")
""")


def test_two_replicas_update_like_one_replica_on_the_whole_batch():
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("OK")


BATCH_NORM_SCRIPT = textwrap.dedent("""
    import recsys_dist
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from recsys_dist.cluster.mirrored import mirrored_strategy, settle_replica_local
    from recsys_dist.cluster.replicas import replica_slice
    from recsys_dist.models.blocks import MLP

    strategy = mirrored_strategy(2)
    with strategy.scope():
        mlp = MLP([4, 1], batch_norm=True, final_activation=None, seed=1)
        mlp.build((None, 3))
    bn = [layer for layer in mlp.stack if isinstance(layer, tf.keras.layers.BatchNormalization)][0]
    x = np.random.default_rng(0).normal(2.0, 1.0, size=(8, 3)).astype("float32")
    batch = {"x": tf.constant(x), "valid": tf.ones(8)}

    def copies(variable):
        return [v.numpy() for v in strategy.experimental_local_results(variable)]

    @tf.function
    def call(batch, training):
        return strategy.run(lambda b: mlp(replica_slice(b)["x"], training=training), args=(batch,))

    call(batch, False)
    for mean, var in zip(copies(bn.moving_mean), copies(bn.moving_variance)):
        assert np.all(mean == 0) and np.all(var == 1), (mean, var)  # inference: unmoved
    call(batch, True)
    # Each replica normalises its own 4 rows and moves its own copy (ON_READ variables);
    # read across replicas (as a checkpoint saves it) the moving mean is their average,
    # here the 8 rows' mean. Scoring first gives every copy that average.
    pre = x @ mlp.stack[0].kernel.numpy()
    halves = copies(bn.moving_mean)
    # Each side takes float32 dot products of 3 terms and a mean of 4 rows: each is within
    # 7 u = 3.5 eps of exact, relative to the sums of absolute values, whatever the order.
    # (rtol alone would fail a mean that is near 0 by cancellation.)
    atol = 8 * np.finfo(np.float32).eps * (1 - bn.momentum) * (
        np.abs(x) @ np.abs(mlp.stack[0].kernel.numpy())).max()
    for half, rows in zip(halves, (pre[:4], pre[4:])):
        np.testing.assert_allclose(
            half, (1 - bn.momentum) * rows.mean(axis=0), rtol=1e-5, atol=atol)
    expected = (1 - bn.momentum) * pre.mean(axis=0)
    np.testing.assert_allclose(bn.moving_mean.numpy(), expected, rtol=1e-5, atol=1e-6)
    settle_replica_local(strategy, mlp.variables)
    for mean in copies(bn.moving_mean):
        np.testing.assert_allclose(mean, expected, rtol=1e-5, atol=1e-6)
    assert not np.all(copies(bn.moving_variance)[0] == 1)
    before = copies(bn.moving_mean)
    out = call(batch, False)
    np.testing.assert_array_equal(copies(bn.moving_mean)[0], before[0])  # unmoved again
    out = np.concatenate([o.numpy() for o in strategy.experimental_local_results(out)])
    mean, var = bn.moving_mean.numpy(), bn.moving_variance.numpy()
    hidden = np.maximum((pre - mean) / np.sqrt(var + bn.epsilon) * bn.gamma.numpy()
                        + bn.beta.numpy(), 0)
    final = mlp.stack[-1]
    np.testing.assert_allclose(out, hidden @ final.kernel.numpy() + final.bias.numpy(),
                               rtol=1e-5, atol=1e-5)
    print("OK")
""")


def test_batch_norm_statistics_move_only_in_training_and_agree_over_replicas():
    result = subprocess.run(
        [sys.executable, "-c", BATCH_NORM_SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("OK")
