"""Gradients of a worker's replicas are combined exactly once.

ParameterServerStrategy runs one replica per GPU of a worker; there is no GPU here, so
this runs the trainer's loss under a MirroredStrategy over 2 logical CPU devices, which
combines replica gradients in ``apply_gradients`` the same way (one sum). The update
must equal a single-replica step on the whole batch: no double averaging that would
shrink updates or optimizer moments.
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
    from recsys_dist.train.trainer import replica_loss
    from recsys_dist.cluster.replicas import replica_slice

    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 3)).astype("float32")
    y = (rng.random(8) < 0.5).astype("float32")
    valid = np.ones(8, "float32")
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
        np.testing.assert_allclose(w2.numpy(), w1.numpy(), rtol=1e-5, atol=1e-6)
        assert not np.allclose(w1.numpy(), init)
    print("OK")
""")


def test_two_replicas_update_like_one_replica_on_the_whole_batch():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("OK")
