"""In-graph feature transforms: exact outputs for every feature kind.

Covers what each built-in kind does to its columns: ``features/kinds/categorical.py``,
``numeric.py``, ``multi_categorical.py`` (with the padding of ``padding.py``),
``cross.py`` and the vocabulary lookup of ``vocabulary.py``; the ``sequence`` kind is in
test_sequences.py. The kinds' config rejections are in tests/unit/config/test_config.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist import hashing
from recsys_dist.features.config import load_feature_config
from recsys_dist.features.transforms import FeatureTransform
from tests.support.configs import write_yaml

FEATURES = {
    "tables": {
        "ads": {"rows": 50, "dim": 4},
        "sites": {"rows": 10, "dim": 4},
        "tags": {"rows": 20, "dim": 4},
        "buckets": {"rows": 4, "dim": 4},
        "cross": {"rows": 1000, "dim": 4},
    },
    "features": {
        "ad": {
            "kind": "categorical",
            "dtype": "int64",
            "table": "ads",
            "vocabulary": "ads.txt",
            "oov_buckets": 2,
        },
        "site": {
            "kind": "categorical",
            "dtype": "string",
            "table": "sites",
            "vocabulary": "sites.txt",
        },
        "site_hashed": {
            "kind": "categorical",
            "dtype": "string",
            "column": "site",
            "table": "sites",
        },
        "price": {"kind": "numeric", "transform": "standardize", "mean": 2.0, "std": 4.0},
        "count": {
            "kind": "numeric",
            "transform": "log1p",
            "nan_means_missing": True,
            "fill_value": 0,
        },
        "count_bucket": {
            "kind": "numeric",
            "column": "count",
            "transform": "bucketize",
            "boundaries": [0, 1, 10],
            "table": "buckets",
            "nan_means_missing": True,
            "fill_value": -5,
        },
        "tags": {"kind": "multi_categorical", "table": "tags", "max_length": 2, "separator": ","},
        "topics": {
            "kind": "multi_categorical",
            "table": "tags",
            "max_length": 3,
            "weighted": True,
            "vocabulary": "topics.txt",
        },
        "ad_x_site": {"kind": "cross", "inputs": ["ad", "site"], "table": "cross"},
    },
    "labels": {"click": {}},
}


@pytest.fixture
def transform(tmp_path):
    (tmp_path / "ads.txt").write_text("100\n7\n55\n")
    (tmp_path / "sites.txt").write_text("a.com\nb.com\n")
    (tmp_path / "topics.txt").write_text("sport\nnews\n")
    config = load_feature_config(write_yaml(tmp_path / "f.yaml", FEATURES))
    dtypes = {
        "ad": "int64",
        "site": "string",
        "price": "float64",
        "count": "float32",
        "tags": "string",
        "topics": "string",
        "click": "int32",
    }
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
    np.testing.assert_allclose(
        features["count"].numpy(), [0.0, np.log1p(0.5), np.log1p(99.0), -np.log1p(3.0)], rtol=1e-6
    )
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
    np.testing.assert_allclose(
        topics["weights"].numpy(), [[0.5, 2.0, 0], [1.0, 0, 0], [0, 0, 0], [0, 0, 0]]
    )
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


LIST_FEATURES = {
    "tables": {"t": {"rows": 100, "dim": 4}, "u": {"rows": 50, "dim": 4}},
    "features": {
        "ids": {"kind": "multi_categorical", "table": "t", "max_length": 2},
        "names": {
            "kind": "multi_categorical",
            "table": "t",
            "max_length": 3,
            "weights_column": "w",
        },
        "user": {"kind": "categorical", "dtype": "int64", "table": "u"},
        "age": {"kind": "numeric", "fill_value": -1, "missing_indicator": True},
        "user_x_user2": {"kind": "cross", "inputs": ["user", "user2"], "table": "t"},
        "user2": {"kind": "categorical", "dtype": "string", "table": "u"},
    },
    "labels": {"click": {}},
}


@pytest.fixture
def list_transform(tmp_path):
    config = load_feature_config(write_yaml(tmp_path / "f.yaml", LIST_FEATURES))
    dtypes = {
        "ids": "list<int64>",
        "names": "list<string>",
        "w": "list<float32>",
        "user": "int64",
        "user2": "string",
        "age": "float32",
        "click": "int64",
    }
    return lambda policy: FeatureTransform(config, ["click"], dtypes, policy)


def _list_batch():
    ragged = tf.ragged.constant
    raw = {
        "ids": ragged([[1, 2, 3], [], [4, 0, 5], [7]], tf.int64),
        "names": ragged([["x", "y"], ["z"], [], ["q"]]),
        "w": ragged([[0.5, 0.25], [1.0, 2.0], [], []], tf.float32),
        "user": tf.constant([3, 0, 9, 9], tf.int64),
        "user2": tf.constant(["a", "", "b", "b"]),
        "age": tf.constant([30.0, 0.0, 41.0, 7.0]),
        "click": tf.constant([0, 1, 0, 1], tf.int64),
    }
    present = {
        "ids": ragged([[True, True, True], [], [True, False, True], [True]]),
        "names": ragged([[True, True], [True], [], [True]]),
        "w": ragged([[True, False], [True, True], [], []]),
        "user": tf.constant([True, False, True, True]),
        "user2": tf.constant([True, True, True, False]),
        "age": tf.constant([True, False, True, True]),
        "click": tf.constant([True, True, True, False]),
    }
    return raw, present


def test_list_columns_nulls_and_weights_column(list_transform):
    raw, present = _list_batch()
    features, labels, valid = list_transform("skip")(
        raw, tf.constant("t"), tf.constant(0, tf.int64), present
    )

    def bucket(ids):
        return (
            hashing.to_bucket(hashing.hash_int64(tf.constant(ids, tf.int64)), 100).numpy().tolist()
        )

    ids = features["ids"]
    # Integer list ids hash as integer categorical ids; a null id is dropped, then the
    # first max_length are kept; an empty list pools nothing.
    assert ids["ids"].numpy().tolist() == [
        bucket([1, 2]),
        [0, 0],
        bucket([4, 5]),
        bucket([7]) + [0],
    ]
    assert ids["weights"].numpy().tolist() == [[1, 1], [0, 0], [1, 1], [1, 0]]
    names = features["names"]
    # "y" has a null weight: dropped. Rows 1 and 3: the two lists differ in length.
    assert names["ids"].numpy()[0].tolist() == [
        tf.strings.to_hash_bucket_fast(["x"], 100).numpy()[0],
        0,
        0,
    ]
    assert names["weights"].numpy().tolist() == [[0.5, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]
    # Null ids read the feature's missing row (the table's last: 49); a null input
    # makes the cross read its missing row (99).
    assert features["user"].numpy()[1] == 49 and features["user2"].numpy()[3] == 49
    crosses = features["user_x_user2"].numpy()
    assert crosses[1] == 99 and crosses[3] == 99 and crosses[0] != 99
    assert set(features["user"].numpy()[[0, 2]]) <= set(range(49))  # never the missing row
    # A null number reads fill_value and sets the indicator.
    assert features["age"].numpy().tolist() == [30.0, -1.0, 41.0, 7.0]
    assert features["age.missing"].numpy().tolist() == [0.0, 1.0, 0.0, 0.0]
    # Bad rows: 1 and 3 (list lengths differ), 3 also has a null label.
    assert valid.numpy().tolist() == [1.0, 0.0, 1.0, 0.0]
    assert labels["click"].numpy().tolist() == [0.0, 1.0, 0.0, 0.0]


def test_list_length_mismatch_and_null_label_fail_naming_the_column(list_transform):
    raw, present = _list_batch()
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"list column 'names' \(feature 'names'\) and its weights_column "
        r"'w' differ in length in f\.parquet at row 1",
    ):
        list_transform("fail")(raw, tf.constant("f.parquet"), tf.constant(0, tf.int64), present)
    raw["names"] = tf.ragged.constant([["x", "y"], ["z", "z"], [], []])  # lengths as w's
    present["names"] = tf.ragged.constant([[True, True], [True, True], [], []])
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"label column 'click' has a null or a value other than 0 or 1 "
        r"in f\.parquet at row 3",
    ):
        list_transform("fail")(raw, tf.constant("f.parquet"), tf.constant(0, tf.int64), present)
