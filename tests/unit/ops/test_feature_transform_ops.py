"""The fused feature kernels (``recsys_dist/ops/feature_transforms.cc``) give the stock
ops' values bit for bit: the whole transform with and without them, on random chunks
with nulls, NaN, infinities, long tails of list lengths, empty and malformed tokens."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist import ops
from recsys_dist.features.config import load_feature_config
from recsys_dist.features.transforms import FeatureTransform
from tests.support.configs import write_yaml
from tests.support.transform_chunks import DTYPES as SCALAR_DTYPES
from tests.support.transform_chunks import FEATURES as SCALAR_FEATURES
from tests.support.transform_chunks import random_chunk

N = 20_000
MULTI_FEATURES = {
    "tables": {"t": {"rows": 1009, "dim": 4}, "big": {"rows": 2**40 + 15, "dim": 4}},
    "features": {
        "topics": {"kind": "multi_categorical", "table": "t", "max_length": 3, "weighted": True},
        "plain": {"kind": "multi_categorical", "table": "big", "max_length": 4, "separator": "||"},
        "tags": {"kind": "multi_categorical", "table": "t", "max_length": 2},
        "names": {
            "kind": "multi_categorical",
            "table": "big",
            "max_length": 5,
            "weights_column": "w",
        },
        "codes": {"kind": "multi_categorical", "table": "t", "max_length": 3},
    },
    "labels": {"click": {}},
}
MULTI_DTYPES = {
    "topics": "string",
    "plain": "string",
    "tags": "list<int64>",
    "names": "list<string>",
    "w": "list<double>",
    "codes": "list<int32>",
    "click": "int64",
}
TOKENS = [
    "3:0.7",
    "15:0.30",
    "",
    "x",
    ":",
    "7:",
    "9:abc",
    "4:1e3",
    "5:-0",
    "6:.5",
    "8:+2.",
    "1:1e40",
    "2:1e-45",
    "a:b:1",
    "12:00012",
    " 3:1",
    "3: 1",
    "0:-.25e+2",
]


def _ragged(rng, rows: int, make, null_share: float):
    lengths = rng.choice([0, 0, 1, 2, 3, 7], rows)
    values = make(int(lengths.sum()))
    ragged = tf.RaggedTensor.from_row_lengths(values, lengths)
    valid = tf.RaggedTensor.from_row_lengths(
        tf.constant(rng.random(int(lengths.sum())) > null_share), lengths
    )
    return ragged, valid, lengths


def _multi_chunk(seed: int):
    rng = np.random.default_rng(seed)
    topics = ["|".join(rng.choice(TOKENS, rng.integers(0, 6))) for _ in range(N)]
    plain = [
        "||".join(rng.choice(["a", "", "bb", "a|b", "ccc"], rng.integers(0, 5))) for _ in range(N)
    ]
    tags, tags_valid, _ = _ragged(
        rng, N, lambda m: tf.constant(rng.integers(-(2**62), 2**62, m), tf.int64), 0.1
    )
    names, names_valid, lengths = _ragged(
        rng, N, lambda m: tf.constant(rng.choice(["u", "v", "", "w" * 40], m)), 0.05
    )
    wrong = rng.random(N) < 0.05  # a weights list of another length
    weight_lengths = np.where(wrong, lengths + 1, lengths)
    weights = tf.RaggedTensor.from_row_lengths(
        tf.constant(rng.normal(size=int(weight_lengths.sum()))), weight_lengths
    )
    weights_valid = tf.RaggedTensor.from_row_lengths(
        tf.constant(rng.random(int(weight_lengths.sum())) > 0.05), weight_lengths
    )
    codes, codes_valid, _ = _ragged(
        rng, N, lambda m: tf.constant(rng.integers(-100, 100, m), tf.int32), 0.0
    )
    raw = {
        "topics": tf.constant(topics),
        "plain": tf.constant(plain),
        "tags": tags,
        "names": names,
        "w": weights,
        "codes": codes,
        "click": tf.constant(rng.integers(0, 2, N), tf.int64),
    }
    present = {
        "tags": tags_valid,
        "names": names_valid,
        "w": weights_valid,
        "topics": tf.constant(rng.random(N) > 0.1),
    }
    return raw, present


def _both(config, dtypes, raw, present):
    stock = FeatureTransform(config, ["click"], dtypes, "skip")
    fused = stock.with_fused_kernels()
    source, first = tf.constant("t"), tf.constant(0, tf.int64)
    return stock(raw, source, first, present), fused(raw, source, first, present)


def _assert_same(stock, fused):
    for got, want in zip(tf.nest.flatten(fused), tf.nest.flatten(stock)):
        assert got.dtype == want.dtype and got.shape == want.shape
        # bit for bit, -0.0 against 0.0 and NaN included
        np.testing.assert_array_equal(
            tf.bitcast(got, tf.int32).numpy() if got.dtype == tf.float32 else got.numpy(),
            tf.bitcast(want, tf.int32).numpy() if want.dtype == tf.float32 else want.numpy(),
        )
    assert tf.nest.map_structure(lambda t: t.dtype, fused[0]) == tf.nest.map_structure(
        lambda t: t.dtype, stock[0]
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fused_kernels_give_the_stock_values_for_multi_valued_features(tmp_path, seed):
    config = load_feature_config(write_yaml(tmp_path / "f.yaml", MULTI_FEATURES))
    raw, present = _multi_chunk(seed)
    stock, fused = _both(config, MULTI_DTYPES, raw, present)
    _assert_same(stock, fused)
    features, _, valid = stock
    assert 0 < float(tf.reduce_sum(valid)) < N  # some bad rows: weights and lengths
    weights = features["topics"]["weights"].numpy()
    assert (weights == 0).any() and (weights == 1000).any() and np.isinf(weights).any()


@pytest.mark.parametrize("seed", [1, 2])
def test_fused_kernels_give_the_stock_values_for_ids_crosses_and_buckets(tmp_path, seed):
    config = load_feature_config(write_yaml(tmp_path / "f.yaml", SCALAR_FEATURES))
    raw, present = random_chunk(seed)
    _assert_same(*_both(config, SCALAR_DTYPES, raw, present))
    no_validity = {c: v for c, v in present.items() if c not in "uvsqr"}
    _assert_same(*_both(config, SCALAR_DTYPES, raw, no_validity))


def test_weights_parse_as_the_stock_op_parses_them():
    """Long, tiny, huge and half-way texts: the same float as tf.strings.to_number."""
    texts = [
        "1" * 32,
        "1" * 45,
        "0." + "0" * 60 + "1",
        "1." + "5" * 80,
        "1" * 400,
        "3.4028235677973366e38",
        "3.4028236e38",
        "1.17549435e-38",
        "7e-46",
        "-0.0",
    ]
    ids, weights, bad = ops.delimited_ids(tf.constant([f"3:{t}" for t in texts]), "|", ":", 10, 1)
    want = tf.strings.to_number(tf.constant(texts), tf.float32)
    np.testing.assert_array_equal(
        tf.bitcast(weights[:, 0], tf.int32).numpy(), tf.bitcast(want + 0.0, tf.int32).numpy()
    )
    assert not bad.numpy().any()


@pytest.mark.parametrize("width", [1, 2, 7, 25, 64])
def test_bucketize_rows_counts_as_searchsorted(width):
    """Edge values, NaN, infinities and +inf padding: the counts of searchsorted(right)."""
    rng = np.random.default_rng(width)
    edges = np.sort(rng.normal(size=[3, width]).astype(np.float32), axis=1)
    edges[1, width // 2 :] = np.inf  # a shorter row, padded
    x = rng.normal(size=[3, 5000]).astype(np.float32) * 2
    x[:, :width] = edges  # exactly on an edge
    x[:, -4:] = [np.nan, np.inf, -np.inf, -0.0]
    got = ops.bucketize_rows(tf.constant(x), edges).numpy()
    want = tf.searchsorted(
        tf.constant(edges), tf.constant(x), side="right", out_type=tf.int64
    ).numpy()
    np.testing.assert_array_equal(got, want)


def _raw_list_ids(values, splits, weights_splits=(), buckets=7, max_length=2, weights_valid=()):
    return ops.load().list_ids(
        values=tf.constant(values, tf.int64),
        row_splits=tf.constant(splits, tf.int64),
        valid=tf.zeros([0], tf.bool),
        weights=tf.zeros([3]),
        weights_splits=tf.constant(weights_splits, tf.int64),
        weights_valid=tf.constant(weights_valid, tf.bool),
        buckets=buckets,
        max_length=max_length,
    )


KERNEL_REJECTIONS = [
    (
        lambda: ops.hash_int_ids(tf.zeros([3, 4], tf.int64), None, [5, 5], [4, 4]),
        r"values must be \[len\(buckets\), N\]",
    ),
    (
        lambda: ops.hash_int_ids(
            tf.zeros([2, 4], tf.int64), tf.ones([2, 3], tf.bool), [5, 5], [4, 4]
        ),
        "present must be empty or shaped as values",
    ),
    (
        lambda: ops.hash_int_ids(tf.zeros([2, 4], tf.int64), None, [5, 5], [4]),
        "buckets and missing_rows differ in length",
    ),
    (
        lambda: ops.hash_int_ids(tf.zeros([1, 4], tf.int64), None, [0], [4]),
        "buckets must be positive",
    ),
    (lambda: ops.bucketize_rows(tf.zeros([4]), [[1.0]]), r"x must be \[K, N\] and edges"),
    (lambda: ops.delimited_ids(tf.constant([["a"]]), "|", None, 7, 2), r"strings must be \[N\]"),
    (
        lambda: ops.delimited_ids(tf.constant(["a"]), "|", None, 0, 2),
        "separator, buckets and max_length must be set",
    ),
    (lambda: _raw_list_ids([1], []), r"row_splits must be \[N \+ 1\]"),
    (lambda: _raw_list_ids([1, 2], [0, 5]), "row_splits or validity do not fit the values"),
    (lambda: _raw_list_ids([1, 2], [-1, 2]), "row_splits or validity do not fit the values"),
    (lambda: _raw_list_ids([1, 2], [0, 2, 1]), "row_splits or validity do not fit the values"),
    (
        lambda: _raw_list_ids([1, 2], [0, 2], weights_splits=[0, 4]),
        "weights_splits do not fit the weights",
    ),
    (
        lambda: _raw_list_ids([1, 2], [0, 2], weights_splits=[2, 1]),
        "weights_splits do not fit the weights",
    ),
    (
        lambda: _raw_list_ids([1, 2], [0, 2], weights_splits=[0, 2], weights_valid=[True]),
        "weights_valid must be empty or as long as weights",
    ),
    (
        lambda: _raw_list_ids([1, 2], [0, 2], weights_splits=[0, 1, 3]),
        r"weights_splits must be \[N \+ 1\]",
    ),
    (lambda: _raw_list_ids([1], [0, 1], max_length=0), "buckets and max_length must be positive"),
]


@pytest.mark.parametrize(
    "call,message",
    KERNEL_REJECTIONS,
    ids=[m.split(" ")[0].strip("\\") + str(i) for i, (_, m) in enumerate(KERNEL_REJECTIONS)],
)
def test_the_kernels_check_their_inputs(call, message):
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        call()
