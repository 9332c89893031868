"""Features of one kind are transformed stacked ``[K, N]``: the same values, bit for bit,
as each feature transformed alone by the documented functions, on random data with
nulls, NaN and infinities; and one assertion names the right column and row."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist import hashing
from recsys_dist.features.config import load_feature_config
from recsys_dist.features.transforms import FeatureTransform
from tests.support.configs import write_yaml
from tests.support.transform_chunks import DTYPES, FEATURES, N, random_chunk


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return load_feature_config(write_yaml(tmp_path_factory.mktemp("f") / "f.yaml", FEATURES))


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
        right_hash = hashing.hash_string(raw[right]) if right == "s" else hashes[right]
        ids = hashing.to_bucket(
            hashing.combine(hashes[left], right_hash), config.rows_of(config.features[name]) - 1
        )
        out[name] = tf.where(
            present[left] & present[right], ids, config.rows_of(config.features[name]) - 1
        )
    out["s"] = tf.where(present["s"], tf.strings.to_hash_bucket_fast(raw["s"], 2999), 2999)
    return out, bad


@pytest.mark.parametrize("seed", [1, 2])
def test_stacked_transforms_equal_each_feature_alone(config, seed):
    raw, present = random_chunk(seed)
    transform = FeatureTransform(config, ["click"], DTYPES, "skip")
    features, _, valid = transform(raw, tf.constant("t"), tf.constant(0, tf.int64), present)
    expected, bad = _reference(config, raw, present)
    assert sorted(features) == sorted(expected)
    for name, want in expected.items():
        got = features[name]
        assert got.dtype == want.dtype, name
        # Element-wise ops compute each element alone, so stacking changes no bit: N =
        # 20,000 is a multiple of the vector width, so no element falls in the scalar
        # tail, whose log1p may differ from the vectorised one by an ulp.
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=name)
    assert 0 < bad.sum() < N
    assert valid.numpy().tolist() == (~bad).astype(np.float32).tolist()


def test_one_assertion_names_the_first_bad_column_and_row(config):
    raw, present = random_chunk(3)
    values = np.zeros(N, np.float32)
    values[1234] = -np.inf
    raw.update(
        p=tf.constant(np.zeros(N)), q=tf.constant(values), r=tf.constant(np.zeros(N, np.float32))
    )
    transform = FeatureTransform(config, ["click"], DTYPES, "fail")
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"bad data: numeric column 'q' \(feature 'q'\) has a NaN or "
        r"infinite value .* in chunk.parquet at row 11234 \(set",
    ):
        transform(raw, tf.constant("chunk.parquet"), tf.constant(10_000, tf.int64), present)
