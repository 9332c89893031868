"""In-graph feature transforms: exact outputs for every feature kind."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist.config.features import load_feature_config
from recsys_dist.features import hashing
from recsys_dist.features.transforms import FeatureTransform

FEATURES = """\
tables:
  ads: {rows: 50, dim: 4}
  sites: {rows: 10, dim: 4}
  tags: {rows: 20, dim: 4}
  buckets: {rows: 4, dim: 4}
  cross: {rows: 1000, dim: 4}
features:
  ad: {kind: categorical, dtype: int64, table: ads, vocabulary: ads.txt, oov_buckets: 2}
  site: {kind: categorical, dtype: string, table: sites, vocabulary: sites.txt}
  site_hashed: {kind: categorical, dtype: string, column: site, table: sites}
  price: {kind: numeric, transform: standardize, mean: 2.0, std: 4.0}
  count: {kind: numeric, transform: log1p, nan_means_missing: true, fill_value: 0}
  count_bucket: {kind: numeric, column: count, transform: bucketize, boundaries: [0, 1, 10],
                 table: buckets, nan_means_missing: true, fill_value: -5}
  tags: {kind: multi_categorical, table: tags, max_length: 2, separator: ","}
  topics: {kind: multi_categorical, table: tags, max_length: 3, weighted: true,
           vocabulary: topics.txt}
  ad_x_site: {kind: cross, inputs: [ad, site], table: cross}
labels:
  click: {}
"""


@pytest.fixture
def transform(tmp_path):
    (tmp_path / "ads.txt").write_text("100\n7\n55\n")
    (tmp_path / "sites.txt").write_text("a.com\nb.com\n")
    (tmp_path / "topics.txt").write_text("sport\nnews\n")
    (tmp_path / "f.yaml").write_text(textwrap.dedent(FEATURES))
    config = load_feature_config(tmp_path / "f.yaml")
    dtypes = {"ad": "int64", "site": "string", "price": "float64", "count": "float32",
              "tags": "string", "topics": "string", "click": "int32"}
    return FeatureTransform(config, ["click"], dtypes, "skip")


RAW = {
    "ad": tf.constant([7, 100, 12345, 55], tf.int64),
    "site": tf.constant(["b.com", "zzz", "a.com", ""]),
    "price": tf.constant([2.0, 6.0, -2.0, 10.0], tf.float64),
    "count": tf.constant([np.nan, 0.5, 99.0, -3.0], tf.float32),
    "tags": tf.constant(["x,y,z", "", "q,,r", "only"]),
    "topics": tf.constant(["sport:0.5|news:2", "weather:1", "", "news"]),
    "click": tf.constant([0, 1, 1, 3], tf.int32),
}


def run(transform):
    return transform(RAW, tf.constant("test"), tf.constant(0, tf.int64))


def test_vocabulary_lookup_with_out_of_vocabulary_buckets(transform):
    features, _, _ = run(transform)
    ad = features["ad"].numpy()
    assert ad[:2].tolist() == [1, 0] and ad[3] == 2  # positions in ads.txt
    assert ad[2] in (3, 4)  # unknown id -> one of the 2 oov rows after the vocabulary
    assert features["site"].numpy()[[0, 2]].tolist() == [1, 0]
    assert features["site"].numpy()[[1, 3]].tolist() == [2, 2]  # 1 oov bucket


def test_hashing_is_the_documented_function(transform):
    features, _, _ = run(transform)
    expected = tf.strings.to_hash_bucket_fast(RAW["site"], 9).numpy()  # row 9: missing
    assert features["site_hashed"].numpy().tolist() == expected.tolist()
    ids = tf.constant([0, 1, -1, 2**62], tf.int64)
    buckets = hashing.to_bucket(hashing.hash_int64(ids), 1000).numpy()
    assert np.all((buckets >= 0) & (buckets < 1000))
    assert len(set(buckets.tolist())) == 4
    assert hashing.to_bucket(hashing.hash_int64(ids), 1000).numpy().tolist() == buckets.tolist()


def test_numeric_transforms(transform):
    features, _, valid = run(transform)
    np.testing.assert_allclose(features["price"].numpy(), [0.0, 1.0, -1.0, 2.0])
    np.testing.assert_allclose(features["count"].numpy(),
                               [0.0, np.log1p(0.5), np.log1p(99.0), -np.log1p(3.0)], rtol=1e-6)
    # NaN -> fill -5 -> bucket 0; 0.5 -> 1; 99 -> 3; -3 -> 0
    assert features["count_bucket"].numpy().tolist() == [0, 1, 3, 0]
    assert features["count_bucket"].dtype == tf.int64


def test_multi_valued_split_truncate_and_pad(transform):
    features, _, _ = run(transform)
    tags = features["tags"]
    weights = tags["weights"].numpy()
    assert weights.tolist() == [[1, 1], [0, 0], [1, 1], [1, 0]]  # max_length 2, empty dropped
    buckets = tf.strings.to_hash_bucket_fast(["x", "y", "q", "r", "only"], 20).numpy()
    ids = tags["ids"].numpy()
    assert ids[0].tolist() == buckets[:2].tolist() and ids[2].tolist() == buckets[2:4].tolist()
    assert ids[3].tolist() == [buckets[4], 0]


def test_weighted_multi_valued_with_vocabulary(transform):
    features, _, valid = run(transform)
    topics = features["topics"]
    assert topics["ids"].numpy().tolist() == [[0, 1, 0], [2, 0, 0], [0, 0, 0], [1, 0, 0]]
    np.testing.assert_allclose(topics["weights"].numpy(),
                               [[0.5, 2.0, 0], [1.0, 0, 0], [0, 0, 0], [0, 0, 0]])
    # "news" without ":weight" is a bad entry: row 3 is invalid under skip.
    assert valid.numpy()[3] == 0.0


def test_cross_is_order_dependent_hash_of_inputs(transform):
    features, _, _ = run(transform)
    ad_h = hashing.hash_int64(RAW["ad"])
    site_h = hashing.hash_string(RAW["site"])
    expected = hashing.to_bucket(hashing.combine(ad_h, site_h), 999).numpy()
    assert features["ad_x_site"].numpy().tolist() == expected.tolist()
    swapped = hashing.to_bucket(hashing.combine(site_h, ad_h), 999).numpy()
    assert expected.tolist() != swapped.tolist()


def test_labels_and_validity(transform):
    _, labels, valid = run(transform)
    assert labels["click"].numpy().tolist() == [0.0, 1.0, 1.0, 0.0]  # 3 is bad -> 0, invalid
    assert valid.numpy().tolist() == [1.0, 1.0, 1.0, 0.0]
