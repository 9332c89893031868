"""Optimizer construction and learning-rate scaling with the per-step batch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist.config.sections import OptimizerSpec, TrainSpec
from recsys_dist.train.optimizers import make_optimizer, scaled_learning_rate


@pytest.mark.parametrize("scaling,expected", [("none", 0.1), ("linear", 0.4), ("sqrt", 0.2)])
def test_learning_rate_scales_with_the_batch_of_one_step(scaling, expected):
    train = TrainSpec(lr_scaling=scaling, base_batch_size=512)
    spec = OptimizerSpec("adagrad", 0.1)
    # One step applies 2048 rows (however many replicas share them): 4x the base batch.
    assert scaled_learning_rate(spec, train, 2048) == pytest.approx(expected)
    assert scaled_learning_rate(spec, train, 512) == pytest.approx(0.1)
    assert math.isclose(scaled_learning_rate(spec, TrainSpec(lr_scaling="sqrt"), 128), 0.05)


@pytest.mark.parametrize(
    "spec,cls,config",
    [
        (
            OptimizerSpec("adagrad", 0.05, initial_accumulator_value=0.2),
            "Adagrad",
            {"initial_accumulator_value": 0.2},
        ),
        (
            OptimizerSpec("ftrl", 0.1, l1=0.01, l2=0.02),
            "Ftrl",
            {"l1_regularization_strength": 0.01, "l2_regularization_strength": 0.02},
        ),
        (OptimizerSpec("sgd", 0.3), "SGD", {}),
        (OptimizerSpec("adam", 0.001, beta_1=0.8), "Adam", {"beta_1": 0.8}),
    ],
)
def test_make_optimizer_builds_the_legacy_optimizer_with_its_settings(spec, cls, config):
    optimizer = make_optimizer(spec, 0.5)
    assert type(optimizer).__name__ == cls
    assert isinstance(optimizer, getattr(tf.keras.optimizers.legacy, cls))
    got = optimizer.get_config()
    assert got["learning_rate"] == pytest.approx(0.5)
    for key, value in config.items():
        assert got[key] == pytest.approx(value)


def test_sparse_adagrad_step_touches_only_looked_up_rows():
    table = tf.Variable(tf.ones([5, 2]))
    optimizer = make_optimizer(OptimizerSpec("adagrad", 0.1), 0.1)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.nn.embedding_lookup(table, [1, 3]))
    optimizer.apply_gradients([(tape.gradient(loss, table), table)])
    changed = tf.reduce_any(tf.not_equal(table, 1.0), axis=1).numpy().tolist()
    assert changed == [False, True, False, True, False]


@pytest.mark.parametrize("name", ["adagrad", "ftrl", "sgd", "adam"])
def test_rows_of_dynamic_tables_skip_the_deduplication_with_the_same_update(name):
    """A dynamic table's rows never repeat within a step, so their sparse gradients are
    applied without the legacy optimizers' Unique/UnsortedSegmentSum, to the same values;
    other variables keep it (their rows may repeat, and repeats are summed)."""
    from recsys_dist.models.dynamic_table import UNIQUE_ROWS

    grad = tf.IndexedSlices(
        tf.constant([[1.0, 2.0], [-3.0, 0.5]]), tf.constant([3, 0]), tf.constant([5, 2])
    )
    values = []
    for marked in (True, False):
        table = tf.Variable(tf.ones([5, 2]))
        if marked:
            setattr(table, UNIQUE_ROWS, True)
        optimizer = make_optimizer(OptimizerSpec(name, 0.1), 0.1)

        @tf.function
        def step():
            # (called in this iteration, so the loop's current values are the ones meant)
            optimizer.apply_gradients([(grad, table)])  # noqa: B023

        step()
        graph_ops = {op.type for op in step.get_concrete_function().graph.get_operations()}
        assert ("Unique" in graph_ops) == (not marked and name != "sgd")
        values.append(table.numpy())
    np.testing.assert_allclose(values[0], values[1], rtol=1e-6)

    repeated = tf.IndexedSlices(
        tf.constant([[1.0, 1.0], [1.0, 1.0]]), tf.constant([2, 2]), tf.constant([5, 2])
    )
    table = tf.Variable(tf.zeros([5, 2]))
    make_optimizer(OptimizerSpec("sgd", 1.0), 1.0).apply_gradients([(repeated, table)])
    assert table.numpy()[2].tolist() == [-2.0, -2.0]  # unmarked: the repeats add up


def test_the_linear_optimizer_updates_the_linear_tables_and_nothing_else(tmp_path):
    """With ``train.linear_optimizer`` the groups partition the trainable variables, and
    each optimizer moves only its own (an embedding rate of 0 holds the deep tables)."""
    from recsys_dist.models.zoo import build_model
    from recsys_dist.train.optimizers import ModelOptimizers
    from tests.support.models import (
        LABELS,
        TINY_FEATURES,
        model_inputs,
        tiny_batch,
        total_loss,
        write_feature_config,
    )

    features = write_feature_config(tmp_path, TINY_FEATURES)
    model = build_model("deepfm", features, model_inputs("deepfm", features), LABELS)
    model.create_variables()
    train = TrainSpec(
        embedding_optimizer=OptimizerSpec("sgd", 0.0),
        linear_optimizer=OptimizerSpec("adagrad", 0.5),
    )
    optimizers = ModelOptimizers(model, train, 512)
    assert sorted(optimizers.checkpoint_objects()) == [
        "dense_optimizer",
        "embedding_optimizer",
        "linear_optimizer",
    ]
    grouped = [optimizers.tables[i] for _, indices in optimizers.table_groups for i in indices]
    assert sorted(v.name for v in grouped) == sorted(v.name for v in model.embedding_variables)
    before = {v.name: v.numpy().copy() for v in model.embedding_variables}
    batch, labels = tiny_batch()
    tables, dense = model.embedding_variables, model.dense_variables
    with tf.GradientTape() as tape:
        loss = total_loss(model(batch, training=True), labels)
    grads = tape.gradient(loss, tables + dense)
    optimizers.apply(grads[: len(tables)], grads[len(tables) :])
    moved = {v.name for v in tables if (v.numpy() != before[v.name]).any()}
    assert moved == {v.name for v in model.linear_variables}
    assert optimizers.linear.get_slot(model.linear_variables[0], "accumulator") is not None
    without = ModelOptimizers(model, TrainSpec(), 512)
    assert without.linear is None and len(without.table_groups) == 1
    assert sorted(without.checkpoint_objects()) == ["dense_optimizer", "embedding_optimizer"]


def test_warmup_ramps_the_learning_rate_linearly_then_keeps_it():
    from recsys_dist.train.optimizers import LinearWarmup

    schedule = LinearWarmup(0.4, 4)
    assert [float(schedule(tf.constant(s, tf.int64))) for s in range(6)] == pytest.approx(
        [0.1, 0.2, 0.3, 0.4, 0.4, 0.4]
    )
    again = tf.keras.optimizers.schedules.deserialize(
        tf.keras.optimizers.schedules.serialize(schedule)
    )
    assert (again.rate, again.steps) == (0.4, 4)


def test_warmup_steps_ramp_every_optimizer_of_a_model(tmp_path):
    """With ``train.warmup_steps`` each optimizer's step k (from 0) moves a weight by
    ``rate * (k + 1) / warmup_steps`` until the ramp ends: SGD steps on a gradient of 1."""
    from recsys_dist.models.zoo import build_model
    from recsys_dist.train.optimizers import LinearWarmup, ModelOptimizers
    from tests.support.models import LABELS, TINY_FEATURES, model_inputs, write_feature_config

    features = write_feature_config(tmp_path, TINY_FEATURES)
    model = build_model("deepfm", features, model_inputs("deepfm", features), LABELS)
    model.create_variables()
    train = TrainSpec(
        embedding_optimizer=OptimizerSpec("sgd", 0.2),
        dense_optimizer=OptimizerSpec("sgd", 0.4),
        linear_optimizer=OptimizerSpec("sgd", 0.8),
        warmup_steps=2,
    )
    optimizers = ModelOptimizers(model, train, 512)
    for optimizer, rate in [
        (optimizers.embedding, 0.2),
        (optimizers.dense, 0.4),
        (optimizers.linear, 0.8),
    ]:
        schedule = optimizer._get_hyper("learning_rate")  # noqa: SLF001
        assert isinstance(schedule, LinearWarmup) and (schedule.rate, schedule.steps) == (rate, 2)
    weight = model.dense_variables[0]
    moves = []
    for _ in range(3):
        before = weight.numpy().copy()
        ones = [tf.ones_like(v) for v in model.dense_variables]
        tables = [tf.zeros_like(v) for v in model.embedding_variables]
        optimizers.apply(tables, ones)
        moves.append(float(np.max(np.abs(weight.numpy() - before))))
    # read off float32 weights below 2 in magnitude: each new weight rounds by at most
    # half an ulp of 2 (1.2e-7), within approx's 1e-6 of a move of 0.2
    assert moves == pytest.approx([0.2, 0.4, 0.4])
    assert not isinstance(
        ModelOptimizers(model, TrainSpec(), 512).dense._get_hyper(  # noqa: SLF001
            "learning_rate"
        ),
        LinearWarmup,
    )


def test_warmup_follows_the_restored_step_counter(tmp_path):
    """The ramp reads the optimizer's step counter, which a checkpoint keeps: restored
    after 3 of 4 warm-up steps, the next step runs at the full rate, not from the start."""
    from recsys_dist.train.optimizers import LinearWarmup

    variable = tf.Variable([0.0])
    optimizer = make_optimizer(OptimizerSpec("sgd", 0.4), LinearWarmup(0.4, 4))
    for _ in range(3):
        optimizer.apply_gradients([(tf.constant([1.0]), variable)])
    assert variable.numpy()[0] == pytest.approx(-(0.1 + 0.2 + 0.3))
    path = tf.train.Checkpoint(optimizer=optimizer, variable=variable).save(str(tmp_path / "c"))
    fresh_variable = tf.Variable([0.0])
    fresh = make_optimizer(OptimizerSpec("sgd", 0.4), LinearWarmup(0.4, 4))
    tf.train.Checkpoint(optimizer=fresh, variable=fresh_variable).restore(path)
    fresh.apply_gradients([(tf.constant([1.0]), fresh_variable)])
    assert int(fresh.iterations.numpy()) == 4
    assert fresh_variable.numpy()[0] == pytest.approx(-(0.6 + 0.4))


def test_pass_decay_lowers_the_rate_by_its_factor_per_pass_under_the_warmup():
    """``train.lr_decay_per_epoch``: ``rate * factor ** (step / steps_per_pass)``; the
    warm-up's ramp multiplies it; both serialize."""
    from recsys_dist.train.optimizers import LinearWarmup, PassDecay

    decay = PassDecay(0.8, 0.5, 4)
    assert [float(decay(tf.constant(s, tf.int64))) for s in (0, 2, 4, 8)] == pytest.approx(
        [0.8, 0.8 * 0.5**0.5, 0.4, 0.2]
    )
    both = LinearWarmup(decay, 2)
    assert [float(both(tf.constant(s, tf.int64))) for s in (0, 1, 4)] == pytest.approx(
        [0.4, 0.8 * 0.5**0.25, 0.4]
    )
    again = tf.keras.optimizers.schedules.deserialize(tf.keras.optimizers.schedules.serialize(both))
    assert isinstance(again.rate, PassDecay) and again.steps == 2
    assert (again.rate.rate, again.rate.factor, again.rate.steps_per_pass) == (0.8, 0.5, 4)


def test_lr_decay_per_epoch_lowers_every_optimizer_and_needs_the_pass_length(tmp_path):
    from recsys_dist.models.zoo import build_model
    from recsys_dist.train.optimizers import ModelOptimizers, PassDecay
    from tests.support.models import LABELS, TINY_FEATURES, model_inputs, write_feature_config

    features = write_feature_config(tmp_path, TINY_FEATURES)
    model = build_model("deepfm", features, model_inputs("deepfm", features), LABELS)
    model.create_variables()
    train = TrainSpec(
        embedding_optimizer=OptimizerSpec("sgd", 0.2),
        dense_optimizer=OptimizerSpec("sgd", 0.4),
        lr_decay_per_epoch=0.5,
    )
    with pytest.raises(ValueError, match="lr_decay_per_epoch needs the steps of one pass"):
        ModelOptimizers(model, train, 512)
    optimizers = ModelOptimizers(model, train, 512, steps_per_epoch=2)
    for optimizer, rate in [(optimizers.embedding, 0.2), (optimizers.dense, 0.4)]:
        schedule = optimizer._get_hyper("learning_rate")  # noqa: SLF001
        assert isinstance(schedule, PassDecay)
        assert (schedule.rate, schedule.factor, schedule.steps_per_pass) == (rate, 0.5, 2)
    weight = model.dense_variables[0]
    moves = []
    for _ in range(3):
        before = weight.numpy().copy()
        optimizers.apply(
            [tf.zeros_like(v) for v in model.embedding_variables],
            [tf.ones_like(v) for v in model.dense_variables],
        )
        moves.append(float(np.max(np.abs(weight.numpy() - before))))
    assert moves == pytest.approx([0.4, 0.4 * 0.5**0.5, 0.2])  # rounding: as above
