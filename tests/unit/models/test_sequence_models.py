"""DIN, BST and DIEN: what each reads of a history, padding, empty histories and
rejections.

Covers the models (``models/zoo/din.py``, ``bst.py``, ``dien.py``) and the behaviour
inputs they read, with the checks of their histories (``models/behaviour.py``); DIEN's
layers are tested in test_interest.py.

Every model of the zoo (these included) is also trained a few steps in test_zoo.py; the
cluster tests train them on parameter servers and export them.
"""

from __future__ import annotations

import numpy as np
import pytest

# isort: off
import recsys_dist  # noqa: F401  sets TF_USE_LEGACY_KERAS, so it must come before TensorFlow
import tensorflow as tf
# isort: on

from recsys_dist.config.model_params import BSTParams, DIENParams, DINParams
from recsys_dist.models.zoo import build_model
from tests.support.configs import DELETE, changed
from tests.support.models import TINY_FEATURES, model_inputs, tiny_batch, write_feature_config

HISTORY = {
    "ids": tf.constant([[3, 9, 4, 0], [7, 0, 0, 0], [0, 0, 0, 0]], tf.int64),
    "weights": tf.constant([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], tf.float32),
}


def _batch(history: dict) -> dict:
    batch, _ = tiny_batch(rows=3)
    return {**batch, "hist_ad": history}


def _model(tmp_path, name: str, params=None, features=TINY_FEATURES):
    config = write_feature_config(tmp_path, features)
    model = build_model(name, config, model_inputs(name, config), ["click"], params=params, seed=4)
    model.create_variables()
    return model


def _logits(model, history: dict) -> np.ndarray:
    return model(_batch(history), training=False)["click"].numpy()


@pytest.mark.parametrize(
    "name, params",
    [
        ("din", None),
        ("din", DINParams(attention_normalization="softmax", activation="dice")),
        ("din", DINParams(sequence_pooling="mean")),
        ("din", DINParams(attention_positions=False)),
        ("din", DINParams(search_by="hist_ad")),
        ("bst", None),
        ("dien", None),
        ("dien", DIENParams(auxiliary_loss_weight=1.0)),
    ],
)
def test_padding_never_changes_a_prediction_and_empty_histories_are_finite(tmp_path, name, params):
    model = _model(tmp_path, name, params)
    base = _logits(model, HISTORY)
    other_padding = {
        "ids": tf.where(HISTORY["weights"] > 0, HISTORY["ids"], 17),
        "weights": HISTORY["weights"],
    }
    np.testing.assert_allclose(_logits(model, other_padding), base, rtol=1e-5, atol=1e-6)
    assert np.isfinite(base).all()


def test_din_without_positions_weighs_items_by_the_candidate_and_ignores_their_order(tmp_path):
    model = _model(tmp_path, "din", DINParams(attention_positions=False))
    base = _logits(model, HISTORY)
    reordered = {
        "ids": tf.constant([[4, 3, 9, 0], [7, 0, 0, 0], [0, 0, 0, 0]], tf.int64),
        "weights": HISTORY["weights"],
    }
    # the attention sums the same 3 terms in another order: a few ulp of embeddings of
    # at most 0.05, far below atol
    np.testing.assert_allclose(_logits(model, reordered), base, rtol=1e-5, atol=1e-6)
    changed_item = {
        "ids": tf.constant([[3, 9, 5, 0], [7, 0, 0, 0], [0, 0, 0, 0]], tf.int64),
        "weights": HISTORY["weights"],
    }
    moved = _logits(model, changed_item)
    assert moved[0] != pytest.approx(base[0], abs=1e-6) and moved[1:] == pytest.approx(base[1:])


def test_din_with_attention_positions_reads_the_order_of_the_history(tmp_path):
    model = _model(tmp_path, "din")  # attention_positions by default
    base = _logits(model, HISTORY)
    reordered = {
        "ids": tf.constant([[4, 3, 9, 0], [7, 0, 0, 0], [0, 0, 0, 0]], tf.int64),
        "weights": HISTORY["weights"],
    }
    moved = _logits(model, reordered)
    assert moved[0] != pytest.approx(base[0], abs=1e-6) and moved[1:] == pytest.approx(base[1:])
    positions = model.positions[0].embeddings
    assert positions.shape == (4, model.inputs_layer.history_dims[0])  # max_length rows
    # the unit's weights keep its layer's name, though DIN calls it on ragged rows
    names = [v.name for v in model.attention[0].trainable_variables]
    assert names and all("/attention_0/" in n for n in names), names


def test_bst_reads_the_order_of_the_history(tmp_path):
    model = _model(tmp_path, "bst", BSTParams(attention_dropout=0.0))
    base = _logits(model, HISTORY)
    reordered = {
        "ids": tf.constant([[4, 3, 9, 0], [7, 0, 0, 0], [0, 0, 0, 0]], tf.int64),
        "weights": HISTORY["weights"],
    }
    assert _logits(model, reordered)[0] != pytest.approx(base[0], abs=1e-6)


def test_dien_reads_the_order_of_the_history_and_adds_its_auxiliary_loss_in_training(tmp_path):
    model = _model(tmp_path, "dien", DIENParams(auxiliary_loss_weight=1.0))
    base = _logits(model, HISTORY)
    reordered = {
        "ids": tf.constant([[4, 3, 9, 0], [7, 0, 0, 0], [0, 0, 0, 0]], tf.int64),
        "weights": HISTORY["weights"],
    }
    moved = _logits(model, reordered)
    assert moved[0] != pytest.approx(base[0], abs=1e-6) and moved[1:] == pytest.approx(base[1:])
    assert model.losses == []  # scoring adds no loss
    with tf.GradientTape() as tape:
        model(_batch(HISTORY), training=True)
        (auxiliary,) = model.losses
    grads = tape.gradient(auxiliary, model.inputs_layer.trainable_variables)
    assert float(auxiliary) > 0 and any(g is not None for g in grads)  # it trains the items
    off = _model(tmp_path, "dien")  # the default: no auxiliary loss
    off(_batch(HISTORY), training=True)
    assert off.losses == [] and not off.auxiliary[0].built


def test_din_with_hard_search_reads_only_the_positions_of_the_candidates_id(tmp_path):
    model = _model(tmp_path, "din", DINParams(search_by="hist_ad", search_top_k=1))

    def logits(history: dict) -> np.ndarray:
        batch = {**_batch(history), "ad_id": tf.constant([9, 7, 1], tf.int64)}
        return model(batch, training=False)["click"].numpy()

    base = logits(HISTORY)  # row 0 reads its item 9 (position 1), row 1 its 7
    others_changed = {
        "ids": tf.constant([[5, 9, 6, 0], [7, 0, 0, 0], [0, 0, 0, 0]], tf.int64),
        "weights": HISTORY["weights"],
    }
    np.testing.assert_array_equal(logits(others_changed), base)  # the same rows, the same ops
    moved = {
        "ids": tf.constant([[3, 4, 9, 0], [7, 0, 0, 0], [0, 0, 0, 0]], tf.int64),
        "weights": HISTORY["weights"],
    }
    assert logits(moved)[0] != pytest.approx(base[0], abs=1e-6)  # older: another position
    with pytest.raises(ValueError, match=r"search_by 'tags' is not a sequence of a history"):
        _model(tmp_path, "din", DINParams(search_by="tags"))


def test_sequence_pooling_none_reads_no_history(tmp_path):
    model = _model(tmp_path, "din", DINParams(sequence_pooling="none"))
    empty = {"ids": tf.zeros([3, 4], tf.int64), "weights": tf.zeros([3, 4])}
    np.testing.assert_allclose(_logits(model, HISTORY), _logits(model, empty), rtol=1e-6)


def test_a_history_without_target_or_a_bad_head_count_is_refused(tmp_path):
    no_target = changed(TINY_FEATURES, {"features.hist_ad.target": DELETE})
    with pytest.raises(
        ValueError,
        match=r"model 'din' compares sequence 'hist_ad' with its "
        r"candidate: set features\.hist_ad\.target",
    ):
        _model(tmp_path, "din", features=no_target)
    with pytest.raises(
        ValueError,
        match=r"model 'bst': a position of history 'hist_ad' has dim 4 .* "
        r"num_heads=3 does not divide",
    ):
        _model(tmp_path, "bst", BSTParams(num_heads=3))


def test_a_history_whose_target_or_main_sequence_is_not_an_input_is_refused(tmp_path):
    config = write_feature_config(tmp_path, TINY_FEATURES)
    without_target = [n for n in config.features if n != "ad_id"]
    with pytest.raises(
        ValueError,
        match=r"model 'din': the target 'ad_id' of sequence "
        r"'hist_ad' is not among the model's inputs",
    ):
        build_model("din", config, {"deep": without_target}, ["click"])
    side = changed(
        TINY_FEATURES,
        {
            "features.hist_user": {
                "kind": "sequence",
                "table": "user",
                "max_length": 4,
                "dtype": "string",
                "target": "user_id",
                "side_of": "hist_ad",
            }
        },
    )
    config = write_feature_config(tmp_path, side)
    with pytest.raises(
        ValueError,
        match=r"model 'din': sequence 'hist_user' is side_of "
        r"'hist_ad', which is not among the model's inputs",
    ):
        build_model("din", config, {"deep": ["ad_id", "user_id", "hist_user"]}, ["click"])
