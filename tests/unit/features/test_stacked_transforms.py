"""Features of one kind are transformed stacked ``[K, N]``: the same values, bit for bit,
as each feature transformed alone by the documented functions, on random data with
nulls, NaN and infinities; and one assertion names the right column and row."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist.config.features import load_feature_config
from recsys_dist.features import hashing
from recsys_dist.features.transforms import FeatureTransform
from tests.support.configs import write_yaml

EDGES_A = [-0.5, 0.5, 1.72, 3.48, 6.39, 11.18, 19.09]
EDGES_B = [0.0, 100.0]
FEATURES = {
    "tables": {"a": {"rows": 3000, "dim": 4}, "b": {"rows": 7, "dim": 4},
               "big": {"rows": 1_000_003, "dim": 4}, "ba": {"rows": 8, "dim": 4},
               "bb": {"rows": 3, "dim": 4}, "x": {"rows": 999, "dim": 4}},
    "features": {
        "u": {"kind": "categorical", "dtype": "int64", "table": "a"},
        "v": {"kind": "categorical", "dtype": "int64", "table": "b"},
        "w": {"kind": "categorical", "dtype": "int64", "table": "big", "column": "u"},
        "s": {"kind": "categorical", "dtype": "string", "table": "a"},
        "p": {"kind": "numeric", "transform": "log1p", "nan_means_missing": True},
        "q": {"kind": "numeric", "transform": "standardize", "mean": 1.5, "std": 3.0,
              "missing_indicator": True, "fill_value": 2.0},
        "r": {"kind": "numeric", "nan_means_missing": True, "missing_indicator": True},
        "pa": {"kind": "numeric", "column": "p", "transform": "bucketize",
               "boundaries": EDGES_A, "table": "ba", "nan_means_missing": True,
               "fill_value": -1},
        "rb": {"kind": "numeric", "column": "r", "transform": "bucketize",
               "boundaries": EDGES_B, "table": "bb", "nan_means_missing": True},
        "u_x_v": {"kind": "cross", "inputs": ["u", "v"], "table": "x"},
        "v_x_s": {"kind": "cross", "inputs": ["v", "s"], "table": "x"},
    },
    "labels": {"click": {}},
}
DTYPES = {"u": "int64", "v": "int32", "s": "string", "p": "float64", "q": "float32",
          "r": "float32", "click": "int64"}
N = 20_000


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return load_feature_config(write_yaml(tmp_path_factory.mktemp("f") / "f.yaml", FEATURES))


def _random_chunk(seed: int):
    rng = np.random.default_rng(seed)
    floats = {c: rng.choice([-1e6, -3.0, 0.0, 0.5, 1.72, 19.09, 99.9, 100.0, 1e9], N)
              * rng.random(N).round(1) for c in "pqr"}
    for column, values in floats.items():
        values[rng.random(N) < 0.05] = np.nan
        if column == "q":
            values[rng.random(N) < 0.01] = np.inf
    raw = {"u": tf.constant(rng.integers(-2**62, 2**62, N), tf.int64),
           "v": tf.constant(rng.integers(-50, 50, N), tf.int32),
           "s": tf.constant(rng.choice(["", "a", "bb", "ccc"], N)),
           "p": tf.constant(floats["p"], tf.float64),
           "q": tf.constant(floats["q"], tf.float32),
           "r": tf.constant(floats["r"], tf.float32),
           "click": tf.constant(rng.integers(0, 2, N), tf.int64)}
    present = {c: tf.constant(rng.random(N) > 0.1) for c in "uvsqr"}  # p: no validity
    present["click"] = tf.ones([N], tf.bool)
    return raw, present


def _reference(config, raw, present):
    """Each feature alone, from the documented functions."""
    out, bad = {}, np.zeros(N, bool)
    hashes = {}
    for name in ("u", "v", "w"):
        feat = config.features[name]
        column = config.column_of(feat)
        missing_row = config.rows_of(feat) - 1
        hashes[column] = hashing.hash_int64(raw[column])
        ids = hashing.to_bucket(hashes[column], missing_row)
        out[name] = tf.where(present[column], ids, missing_row)
    for name in ("p", "q", "r", "pa", "rb"):
        feat = config.features[name]
        column = config.column_of(feat)
        x = tf.cast(raw[column], tf.float32)
        missing = tf.logical_not(present.get(column, tf.ones([N], tf.bool)))
        if feat.nan_means_missing:
            missing = tf.logical_or(missing, tf.math.is_nan(x))
        x = tf.where(missing, feat.fill_value, x)
        not_finite = tf.logical_not(tf.math.is_finite(x))
        bad |= not_finite.numpy()
        x = tf.where(not_finite, feat.fill_value, x)
        if feat.transform == "log1p":
            x = tf.sign(x) * tf.math.log1p(tf.abs(x))
        elif feat.transform == "standardize":
            x = (x - feat.mean) / feat.std
        elif feat.transform == "bucketize":
            x = tf.cast(tf.raw_ops.Bucketize(input=x, boundaries=feat.boundaries), tf.int64)
        out[name] = x
        if feat.missing_indicator:
            out[f"{name}.missing"] = tf.cast(missing, tf.float32)
    for name, (left, right) in (("u_x_v", ("u", "v")), ("v_x_s", ("v", "s"))):
        right_hash = (hashing.hash_string(raw[right]) if right == "s" else hashes[right])
        ids = hashing.to_bucket(hashing.combine(hashes[left], right_hash),
                                config.rows_of(config.features[name]) - 1)
        out[name] = tf.where(present[left] & present[right], ids,
                             config.rows_of(config.features[name]) - 1)
    out["s"] = tf.where(present["s"], tf.strings.to_hash_bucket_fast(raw["s"], 2999), 2999)
    return out, bad


@pytest.mark.parametrize("seed", [1, 2])
def test_stacked_transforms_equal_each_feature_alone(config, seed):
    raw, present = _random_chunk(seed)
    transform = FeatureTransform(config, ["click"], DTYPES, "skip")
    features, _, valid = transform(raw, tf.constant("t"), tf.constant(0, tf.int64), present)
    expected, bad = _reference(config, raw, present)
    assert sorted(features) == sorted(expected)
    for name, want in expected.items():
        got = features[name]
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=name)
    assert 0 < bad.sum() < N
    assert valid.numpy().tolist() == (~bad).astype(np.float32).tolist()


def test_one_assertion_names_the_first_bad_column_and_row(config):
    raw, present = _random_chunk(3)
    values = np.zeros(N, np.float32)
    values[1234] = -np.inf
    raw.update(p=tf.constant(np.zeros(N)), q=tf.constant(values),
               r=tf.constant(np.zeros(N, np.float32)))
    transform = FeatureTransform(config, ["click"], DTYPES, "fail")
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"bad data: numeric column 'q' \(feature 'q'\) has a NaN or "
                             r"infinite value .* in chunk.parquet at row 11234 \(set"):
        transform(raw, tf.constant("chunk.parquet"), tf.constant(10_000, tf.int64), present)
