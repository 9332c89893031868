"""Histories kept at their real positions: the ragged values, their padded form, the mean,
a side sequence aligned with its main one, DIN's unit on either form, and SIM's hard
search."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist.features.config import load_feature_config
from recsys_dist.models.attention import TargetAttention
from recsys_dist.models.behaviour import BehaviourInputs, hard_search, masked_mean
from recsys_dist.models.collection import EmbeddingCollection
from recsys_dist.models.masking import masked_softmax, ragged_softmax
from tests.support.configs import write_yaml

FEATURES = {
    "tables": {"item": {"rows": 101, "dim": 4}, "cate": {"rows": 11, "dim": 2}},
    "features": {
        "item": {"kind": "categorical", "dtype": "int64", "table": "item"},
        "cate": {"kind": "categorical", "dtype": "int64", "table": "cate"},
        "hist": {"kind": "sequence", "table": "item", "max_length": 4, "target": "item"},
        "hist_cate": {
            "kind": "sequence",
            "table": "cate",
            "max_length": 4,
            "target": "cate",
            "side_of": "hist",
        },
    },
    "labels": {"click": {}},
}
HIST = [[3, 7, 9, 0], [0, 0, 0, 0], [5, 0, 0, 0]]
HIST_CATE = [[1, 2, 3, 0], [0, 0, 0, 0], [4, 0, 0, 0]]


def _rounding(terms) -> float:
    """A bound on float32 rounding of a sum of ``terms`` in any order: a few ulps of
    their absolute sum."""
    return 4 * np.finfo(np.float32).eps * float(np.abs(np.asarray(terms)).sum())


def _batch(side_weights=None):
    weights = (np.array(HIST) > 0).astype(np.float32)
    return {
        "item": tf.constant([3, 4, 5], tf.int64),
        "cate": tf.constant([1, 2, 4], tf.int64),
        "hist": {"ids": tf.constant(HIST, tf.int64), "weights": tf.constant(weights)},
        "hist_cate": {
            "ids": tf.constant(HIST_CATE, tf.int64),
            "weights": tf.constant(weights if side_weights is None else side_weights),
        },
    }


@pytest.fixture
def inputs(tmp_path):
    config = load_feature_config(write_yaml(tmp_path / "f.yaml", FEATURES))
    collection = EmbeddingCollection(config)
    return BehaviourInputs(collection, ["item", "cate", "hist", "hist_cate"], seed=1, model="din")


def _read(inputs: BehaviourInputs, batch: dict):
    """The layer's output for ``batch``, its group looked up by itself."""
    return inputs(batch, looked_up=inputs.embeddings(batch))


def test_a_history_is_its_real_positions_with_their_padded_form_and_mean(inputs):
    _, _, [history] = _read(inputs, _batch())
    item = inputs.embeddings.tables["item"].numpy()
    cate = inputs.embeddings.tables["cate"].numpy()
    np.testing.assert_array_equal(history.positions.numpy(), [[0, 0], [0, 1], [0, 2], [2, 0]])
    expected = [np.concatenate([item[i], cate[c]]) for i, c in [(3, 1), (7, 2), (9, 3), (5, 4)]]
    np.testing.assert_allclose(history.values.numpy(), expected)
    keys = history.keys.numpy()
    assert keys.shape == (3, 4, 6)
    np.testing.assert_allclose(keys[0, :3], expected[:3])
    np.testing.assert_allclose(keys[2, 0], expected[3])
    np.testing.assert_array_equal(keys[0, 3], 0.0)
    np.testing.assert_array_equal(keys[1], 0.0)
    # the ragged mean is the padded one, summed in another order: float32 rounding of at
    # most a few ulps of the absolute sum; an empty history pools to zeros
    mean = history.mean().numpy()
    atol = _rounding(expected[:3])
    padded_mean = masked_mean(history.keys, history.mask).numpy()
    np.testing.assert_allclose(mean, padded_mean, rtol=0, atol=atol)
    np.testing.assert_allclose(mean[0], np.mean(expected[:3], axis=0), rtol=0, atol=atol)
    np.testing.assert_array_equal(mean[1], 0.0)


def test_a_side_without_an_id_at_a_real_position_reads_zeros_there(inputs):
    side = (np.array(HIST) > 0).astype(np.float32)
    side[0, 1] = 0.0  # the side has no id where its main sequence has one
    _, _, [history] = _read(inputs, _batch(side))
    item = inputs.embeddings.tables["item"].numpy()
    cate = inputs.embeddings.tables["cate"].numpy()
    values = history.values.numpy()
    assert values.shape == (4, 6)  # still the main sequence's four real positions
    np.testing.assert_allclose(values[1], np.concatenate([item[7], [0.0, 0.0]]))
    np.testing.assert_allclose(values[2], np.concatenate([item[9], cate[3]]))


@pytest.mark.parametrize("normalization", ["none", "softmax"])
def test_the_unit_on_real_positions_equals_the_unit_on_padded_keys(inputs, normalization):
    _, _, [history] = _read(inputs, _batch())
    att = TargetAttention([5], activation="dice", normalization=normalization, seed=0)
    padded, weights = att(
        history.query, history.keys, history.mask, training=True, return_weights=True
    )
    ragged, scores = att.attend(history.query, history.values, history.rows, training=True)
    # the same unit on the same rows gives the same weights; the outputs sum them with
    # the values in another order
    at = tuple(history.positions.numpy().T)
    np.testing.assert_array_equal(scores.numpy(), weights.numpy()[at])
    terms = scores.numpy()[:, None] * history.values.numpy()
    np.testing.assert_allclose(ragged.numpy(), padded.numpy(), rtol=0, atol=_rounding(terms))
    np.testing.assert_array_equal(ragged.numpy()[1], 0.0)  # the empty history


def test_ragged_softmax_is_the_masked_softmax_of_the_real_positions():
    scores = tf.constant([[1.0, 3.0, -2.0, 50.0], [0.0, 0.0, 0.0, 0.0], [7.0, 1.0, 0.0, 0.0]])
    mask = tf.constant([[True, True, True, False], [False] * 4, [True, True, False, False]])
    positions = tf.where(mask)
    ragged = ragged_softmax(tf.gather_nd(scores, positions), positions[:, 0], 3)
    expected = tf.gather_nd(masked_softmax(scores, mask), positions)
    np.testing.assert_allclose(ragged.numpy(), expected.numpy(), rtol=1e-6)
    np.testing.assert_allclose(np.sum(ragged.numpy()[:3]), 1.0, rtol=1e-6)


def test_the_hard_search_keeps_the_newest_positions_of_the_candidates_category(inputs):
    """Row 0's categories (newest first) 2, 5, 2, 2 and candidate category 2: the two
    newest matches are kept (top 2), in the main sequence and its side; row 1 matches
    nothing; row 2's match sits after padding in the ids and is not real."""
    batch = {
        "item": tf.constant([1, 2, 3], tf.int64),
        "cate": tf.constant([2, 4, 6], tf.int64),
        "hist": {
            "ids": tf.constant([[3, 7, 9, 8], [5, 0, 0, 0], [5, 0, 0, 0]], tf.int64),
            "weights": tf.constant([[1, 1, 1, 1], [1, 0, 0, 0], [1, 0, 0, 0]], tf.float32),
        },
        "hist_cate": {
            "ids": tf.constant([[2, 5, 2, 2], [3, 0, 0, 0], [1, 6, 0, 0]], tf.int64),
            "weights": tf.constant([[1, 1, 1, 1], [1, 0, 0, 0], [1, 0, 0, 0]], tf.float32),
        },
    }
    (group,) = inputs.groups
    searched = hard_search(batch, group, "hist_cate", "cate", top_k=2)
    kept = [[1, 0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    for name in ("hist", "hist_cate"):
        assert searched[name]["weights"].numpy().tolist() == kept, name
        assert searched[name]["ids"] is batch[name]["ids"]
    assert searched["item"] is batch["item"]
    _, _, [history] = _read(inputs, searched)
    assert history.positions.numpy().tolist() == [[0, 0], [0, 2]]  # recency kept
    by_item = hard_search(batch, group, "hist", "item", top_k=5)
    assert by_item["hist"]["weights"].numpy().sum() == 0  # no candidate item in a history
