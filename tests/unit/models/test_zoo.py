"""The model zoo: every model is built on a tiny feature config and trained for a few dozen
steps with separate optimizers for embedding and dense variables; checkpoints, seeds,
the training flag and the rejections.

Covers the base class of the models (``models/zoo/ranking_model.py``) and each model's
module: ``lr.py``, ``wide_deep.py``, ``deepfm.py``, ``dcn_v2.py``, ``dlrm.py``, ``mmoe.py``,
``din.py`` and ``bst.py`` of ``models/zoo/`` (what DIN and BST read of a history is in
test_sequence_models.py).

Training every model under a real ParameterServerStrategy with partitioned tables is in
tests/cluster/test_models_on_ps.py.
"""

from __future__ import annotations

import numpy as np
import pytest

# isort: off
import recsys_dist  # noqa: F401  sets TF_USE_LEGACY_KERAS, so it must come before TensorFlow
import tensorflow as tf
# isort: on

from recsys_dist.config.model_params import DCNv2Params, DLRMParams, MMoEParams, WideDeepParams
from recsys_dist.models.embedding import FeatureEmbeddings
from recsys_dist.models.zoo import MODELS, RankingModel, build_model
from tests.support.configs import changed
from tests.support.models import (
    LABELS,
    TINY_FEATURES,
    model_inputs,
    tiny_batch,
    total_loss,
    write_feature_config,
)


def _refs(variables: list[tf.Variable]) -> set:
    return {v.ref() for v in variables}


MODEL_CASES = [(name, None) for name in MODELS] + [
    (
        "dcn_v2",
        DCNv2Params(
            cross_layers=2,
            low_rank=2,
            structure="parallel",
            hidden_units=[16, 8],
            dropout=0.1,
            batch_norm=True,
        ),
    ),
    ("dlrm", DLRMParams(bottom_units=[], top_units=[8], self_interaction=True, batch_norm=True)),
    ("mmoe", MMoEParams(num_experts=2, expert_units=[8], tower_units=[4], dropout=0.1)),
]


def _case_id(case) -> str:
    name, params = case
    return name if params is None else f"{name}-custom"


@pytest.mark.parametrize("name, params", MODEL_CASES, ids=[_case_id(c) for c in MODEL_CASES])
def test_model_trains_with_split_optimizers(tiny, name, params):
    model = build_model(name, tiny, model_inputs(name, tiny), LABELS, params=params, seed=0)
    assert isinstance(model, RankingModel)
    model.create_variables()
    batch, labels = tiny_batch()

    logits = model(batch)
    assert sorted(logits) == sorted(LABELS)
    assert all(v.shape == (64,) and v.dtype == tf.float32 for v in logits.values())

    embedding, dense = model.embedding_variables, model.dense_variables
    assert embedding and dense
    assert not _refs(embedding) & _refs(dense)
    assert _refs(embedding) | _refs(dense) == _refs(model.trainable_variables)
    stacks = [
        s.variable for m in model.submodules if isinstance(m, FeatureEmbeddings) for s in m.stacks
    ]
    assert _refs(embedding) == _refs(stacks)

    with tf.GradientTape() as tape:  # the model's own losses too, as training adds them
        loss = total_loss(model(batch, training=True), labels) + sum(model.losses)
    grads = tape.gradient(loss, embedding + dense)
    unused = [v.name for v, g in zip(embedding + dense, grads) if g is None]
    assert not unused, f"variables without a gradient: {unused}"

    embedding_opt = tf.keras.optimizers.legacy.Adagrad(0.5)
    dense_opt = tf.keras.optimizers.legacy.Adam(0.01)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = total_loss(model(batch, training=True), labels) + sum(model.losses)
        grads = tape.gradient(loss, embedding + dense)
        embedding_opt.apply_gradients(zip(grads[: len(embedding)], embedding))
        dense_opt.apply_gradients(zip(grads[len(embedding) :], dense))

    before = float(total_loss(model(batch), labels))
    for _ in range(50):
        step()
    after = float(total_loss(model(batch), labels))
    print(f"{name}: loss {before:.3f} -> {after:.3f}")
    assert after < 0.5 * before, (before, after)


def test_single_label_model_predicts_only_that_label(tiny):
    model = build_model("deepfm", tiny, model_inputs("deepfm", tiny), ["conversion"])
    logits = model(tiny_batch(8)[0])
    assert list(logits) == ["conversion"] and logits["conversion"].shape == (8,)


def test_wide_deep_groups_can_differ(tiny):
    inputs = {"wide": ["ad_id", "ad_x_user"], "deep": ["user_id", "price", "tags"]}
    model = build_model("wide_deep", tiny, inputs, LABELS)
    model.create_variables()
    assert sorted(v.name for v in model.embedding_variables) == sorted(
        ["deep_embeddings/embedding/stack_d4:0", "wide_embeddings/embedding/stack_d2:0"]
    )
    assert [list(s.layout) for s in model.wide.embeddings.stacks] == [["ad", "cross"]]
    assert model.wide.embeddings.tables["ad"].shape == (50, 2)  # one column per label


@pytest.mark.parametrize(
    "name, linear_prefixes",
    [
        ("lr", {"linear_embeddings"}),
        ("wide_deep", {"wide_embeddings"}),
        ("deepfm", {"linear_embeddings"}),
        ("dcn_v2", set()),
    ],
)
def test_linear_variables_are_the_per_id_weights_of_linear_parts(tiny, name, linear_prefixes):
    model = build_model(name, tiny, model_inputs(name, tiny), LABELS)
    model.create_variables()
    linear = model.linear_variables
    assert _refs(linear) <= _refs(model.embedding_variables)
    assert {v.name.split("/")[0] for v in linear} == linear_prefixes
    if name != "lr":
        assert _refs(model.embedding_variables) - _refs(linear)  # the deep part's tables


@pytest.mark.parametrize("name", ["dcn_v2", "mmoe"])
def test_same_seed_same_weights(tiny, name):
    def weights(seed: int) -> list[np.ndarray]:
        model = build_model(name, tiny, model_inputs(name, tiny), LABELS, seed=seed)
        model.create_variables()
        return [v.numpy() for v in model.trainable_variables]

    first, again, other = weights(0), weights(0), weights(1)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


@pytest.mark.parametrize("name", list(MODELS))
def test_checkpoint_restores_predictions(tiny, tmp_path, name):
    batch = tiny_batch(8)[0]
    model = build_model(name, tiny, model_inputs(name, tiny), LABELS, seed=0)
    model.create_variables()
    rng = np.random.default_rng(1)
    for variable in model.trainable_variables:
        variable.assign(rng.normal(size=variable.shape).astype(np.float32))
    expected = model(batch)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))

    restored = build_model(name, tiny, model_inputs(name, tiny), LABELS, seed=1)
    restored.create_variables()
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    for label, value in restored(batch).items():
        np.testing.assert_allclose(value.numpy(), expected[label].numpy(), rtol=1e-5)


MIXED_DIMS = changed(TINY_FEATURES, {"tables.user.dim": 8})


@pytest.mark.parametrize("name", ["deepfm", "dlrm"])
def test_models_needing_one_dim_reject_mixed_dims(tmp_path, name):
    cfg = write_feature_config(tmp_path, MIXED_DIMS)
    with pytest.raises(
        ValueError,
        match=rf"model '{name}' needs one embedding dim for all its "
        r"tables; got 'ad' \(dim 4\), 'user' \(dim 8\)",
    ):
        build_model(name, cfg, {"deep": list(cfg.features)}, LABELS)


def test_models_with_mixed_dims_that_allow_them(tmp_path):
    cfg = write_feature_config(tmp_path, MIXED_DIMS)
    model = build_model("dcn_v2", cfg, {"deep": list(cfg.features)}, LABELS)
    assert model(tiny_batch(4)[0])["click"].shape == (4,)


def test_dlrm_needs_dense_and_sparse_features(tiny):
    with pytest.raises(ValueError, match="'dlrm' needs at least one dense numeric feature"):
        build_model("dlrm", tiny, {"deep": ["ad_id", "age"]}, LABELS)
    with pytest.raises(ValueError, match="'dlrm' needs at least one id-valued feature"):
        build_model("dlrm", tiny, {"deep": ["price"]}, LABELS)


def test_mmoe_needs_two_labels(tiny):
    with pytest.raises(
        ValueError,
        match=r"'mmoe' is multi-task; it needs at least 2 labels, "
        r"got \['click'\]",
    ):
        build_model("mmoe", tiny, {"deep": list(tiny.features)}, ["click"])


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"name": "dcnv2"}, ValueError, "unknown model 'dcnv2'.*Did you mean \"dcn_v2\""),
        ({"params": WideDeepParams()}, TypeError, "takes DCNv2Params params, got WideDeepParams"),
        (
            {"inputs": {"wide": ["ad_id"]}},
            ValueError,
            r"reads input group\(s\) deep; got \['wide'\]",
        ),
        ({"inputs": {"deep": ["ad_idd"]}}, ValueError, "unknown feature 'ad_idd'.*Did you mean"),
        ({"labels": ["clicks"]}, ValueError, "unknown label 'clicks'.*Did you mean \"click\""),
        ({"labels": []}, ValueError, "at least one label"),
        ({"labels": ["click", "click"]}, ValueError, "more than once"),
    ],
)
def test_build_model_rejects_bad_arguments(tiny, kwargs, error, match):
    args = {
        "name": "dcn_v2",
        "features": tiny,
        "inputs": {"deep": ["ad_id"]},
        "labels": ["click"],
        **kwargs,
    }
    with pytest.raises(error, match=match):
        build_model(**args)


@pytest.mark.parametrize(
    "name,params",
    [
        ("dcn_v2", DCNv2Params(hidden_units=[16], dropout=0.5, batch_norm=True)),
        (
            "mmoe",
            MMoEParams(
                num_experts=2, expert_units=[8], tower_units=[4], dropout=0.5, batch_norm=True
            ),
        ),
    ],
)
def test_models_honour_the_training_flag(tiny, name, params):
    """Dropout draws anew and batch norm uses batch statistics only with training=True."""
    model = build_model(name, tiny, model_inputs(name, tiny), LABELS, params, seed=3)
    model.create_variables()
    features, _ = tiny_batch()
    evaluation = [model(features, training=False)["click"].numpy() for _ in range(2)]
    np.testing.assert_array_equal(evaluation[0], evaluation[1])
    training = [model(features, training=True)["click"].numpy() for _ in range(2)]
    assert not np.allclose(training[0], training[1])
    assert not np.allclose(training[0], evaluation[0])
    # training=True moved the batch-norm moving statistics; inference stays deterministic.
    after = model(features, training=False)["click"].numpy()
    assert not np.allclose(after, evaluation[0])
    np.testing.assert_array_equal(after, model(features, training=False)["click"].numpy())


def test_every_registered_model_has_its_class():
    """Every model registered in config (``register_model``) names a class that imports,
    a RankingModel whose registration is that model, with its own params."""
    from recsys_dist.config.experiment import MODEL_INPUT_GROUPS
    from recsys_dist.config.model_params import MODEL_PARAMS

    assert list(MODELS) == list(MODEL_PARAMS) == list(MODEL_INPUT_GROUPS)
    assert {"lr", "wide_deep", "deepfm", "dcn_v2", "dlrm", "mmoe"} <= set(MODELS)
    for name, cls in MODELS.items():
        assert issubclass(cls, RankingModel)
        spec = cls.registration()
        assert spec.name == name and spec.params is MODEL_PARAMS[name]
