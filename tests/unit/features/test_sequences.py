"""The ``sequence`` feature kind (``features/kinds/sequence.py``): config checks, in-graph
transform, embeddings."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf

from recsys_dist import hashing
from recsys_dist.data.schema_check import check_file_schema, required_columns
from recsys_dist.errors import ConfigError, DataError
from recsys_dist.features.config import SequenceGroup, load_feature_config
from recsys_dist.features.transforms import FeatureTransform
from recsys_dist.models.embedding import FeatureEmbeddings
from tests.support.configs import DELETE, changed, write_yaml

FEATURES = {
    "tables": {"item": {"rows": 101, "dim": 4}, "cate": {"rows": 11, "dim": 4}},
    "features": {
        "item": {"kind": "categorical", "dtype": "int64", "table": "item"},
        "cate": {"kind": "categorical", "dtype": "int64", "table": "cate"},
        "hist": {"kind": "sequence", "table": "item", "max_length": 3, "target": "item"},
        "hist_cate": {
            "kind": "sequence",
            "table": "cate",
            "max_length": 3,
            "target": "cate",
            "side_of": "hist",
        },
    },
    "labels": {"click": {}},
}
DTYPES = {
    "item": "int64",
    "cate": "int64",
    "hist": "list<int64>",
    "hist_cate": "list<int64>",
    "click": "int64",
}


def _rows(values, rows: int) -> list[int]:
    """Table rows of int ids as a categorical feature hashes them."""
    return (
        hashing.to_bucket(hashing.hash_int64(tf.constant(values, tf.int64)), rows - 1)
        .numpy()
        .tolist()
    )


def _config(tmp_path, features=FEATURES):
    return load_feature_config(write_yaml(tmp_path / "f.yaml", features))


def _batch():
    raw = {
        "item": tf.constant([5, 6, 7, 8], tf.int64),
        "cate": tf.constant([1, 2, 3, 4]),
        "hist": tf.ragged.constant([[1, 2, 3, 4, 5], [], [9, 5], [1, 2]], tf.int64),
        "hist_cate": tf.ragged.constant([[1, 1, 2, 2, 1], [], [3, 1], [1]], tf.int64),
        "click": tf.constant([1, 0, 1, 0]),
    }
    present = {
        "hist": tf.ragged.constant(
            [[True, True, True, False, True], [], [True, True], [True, True]]
        )
    }
    return raw, present


def test_history_is_newest_first_truncated_masked_and_shares_the_candidates_rows(tmp_path):
    config = _config(tmp_path)
    assert config.sequence_groups() == [SequenceGroup("hist", ("hist_cate",), ("item", "cate"))]
    raw, present = _batch()
    features, _, valid = FeatureTransform(config, ["click"], DTYPES, "skip")(
        raw, tf.constant("f.parquet"), tf.constant(0, tf.int64), present
    )
    # Row 0: [1, 2, 3, null, 5] -> the null is dropped, the 3 newest kept, newest first.
    ids, weights = features["hist"]["ids"].numpy(), features["hist"]["weights"].numpy()
    assert ids[0].tolist() == _rows([5, 3, 2], 101)
    assert ids[2].tolist() == _rows([5, 9], 101) + [0]
    assert weights.tolist() == [[1, 1, 1], [0, 0, 0], [1, 1, 0], [0, 0, 0]]
    # The side keeps the same positions (its element 3 goes with the null item).
    assert features["hist_cate"]["ids"].numpy()[0].tolist() == _rows([1, 2, 1], 11)
    # The candidate item 5 and the history's item 5 read the same row.
    assert features["item"].numpy()[0] == ids[0][0]
    # Row 3: the side is shorter than its main sequence: a bad row, nothing kept.
    assert valid.numpy().tolist() == [1, 1, 1, 0]
    assert features["hist_cate"]["weights"].numpy()[3].tolist() == [0, 0, 0]


def test_a_side_of_another_length_fails_naming_column_file_and_row(tmp_path):
    raw, present = _batch()
    transform = FeatureTransform(_config(tmp_path), ["click"], DTYPES, "fail")
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"sequence column 'hist_cate' \(feature 'hist_cate'\) differs in "
        r"length from 'hist' \(feature 'hist'\), which it is side_of in "
        r"f\.parquet at row 13",
    ):
        transform(raw, tf.constant("f.parquet"), tf.constant(10, tf.int64), present)


def test_newest_first_lists_and_delimited_strings(tmp_path):
    features = changed(
        FEATURES,
        {
            "features.hist.newest": "first",
            "features.hist_cate": DELETE,
            "features.hist.dtype": "string",
            "features.item.dtype": "string",
        },
    )
    config = _config(tmp_path, features)
    transform = FeatureTransform(
        config, [], {"item": "string", "cate": "int64", "hist": "string"}, "fail"
    )
    raw = {
        "item": tf.constant(["a", "b"]),
        "cate": tf.constant([1, 2]),
        "hist": tf.constant(["c|b||a|z", ""]),
    }
    out, _, _ = transform(raw, tf.constant("f"), tf.constant(0, tf.int64))
    expected = tf.strings.to_hash_bucket_fast(["c", "b", "a"], 100).numpy().tolist()
    assert out["hist"]["ids"].numpy()[0].tolist() == expected
    assert out["hist"]["weights"].numpy().tolist() == [[1, 1, 1], [0, 0, 0]]
    assert out["item"].numpy()[1] == expected[1]  # "b" reads the same row in both


def test_a_delimited_integer_history_with_a_word_is_bad_data(tmp_path):
    features = changed(FEATURES, {"features.hist_cate": DELETE})
    transform = FeatureTransform(
        _config(tmp_path, features),
        [],
        {"item": "int64", "cate": "int64", "hist": "string"},
        "fail",
    )
    raw = {
        "item": tf.constant([1, 2], tf.int64),
        "cate": tf.constant([1, 2]),
        "hist": tf.constant(["4|5", "6|x"]),
    }
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"sequence column 'hist' \(feature 'hist'\) has an id that is not "
        r"an integer .* in f at row 1",
    ):
        transform(raw, tf.constant("f"), tf.constant(0, tf.int64))


def test_empty_and_null_histories_in_every_row(tmp_path):
    config = _config(tmp_path)
    raw = {
        "item": tf.constant([1, 2], tf.int64),
        "cate": tf.constant([1, 2]),
        "hist": tf.ragged.constant([[], []], tf.int64),
        "hist_cate": tf.ragged.constant([[], []], tf.int64),
        "click": tf.constant([0, 1]),
    }
    present = {"hist": tf.ragged.constant([[], []], tf.bool)}
    out, _, valid = FeatureTransform(config, ["click"], DTYPES, "fail")(
        raw, tf.constant("f"), tf.constant(0, tf.int64), present
    )
    assert out["hist"]["weights"].numpy().tolist() == [[0, 0, 0], [0, 0, 0]]
    assert valid.numpy().tolist() == [1, 1]


def test_a_list_column_and_a_delimited_side_agree_on_empty_and_null_histories(tmp_path):
    """A null or empty string splits into one empty token (a null id): it agrees with a
    list of one id, and with an empty or null list too, since either way no position is
    kept (every empty history was a side of another length, bad data, when one column
    was a list and the other a delimited string)."""
    transform = FeatureTransform(
        _config(tmp_path), ["click"], dict(DTYPES, hist_cate="string"), "fail"
    )
    raw = {
        "item": tf.constant([1, 2, 3, 4, 5], tf.int64),
        "cate": tf.constant([1, 2, 3, 4, 5]),
        "hist": tf.ragged.constant([[], [], [7, 8], [7, 8], [9]], tf.int64),  # row 1: null
        "hist_cate": tf.constant(["", "", "1|2", "1|", ""]),  # row 1: null
        "click": tf.constant([0, 1, 0, 1, 0]),
    }
    present = {
        "hist": tf.ragged.constant([[], [], [True, True], [True, True], [True]]),
        "hist_cate": tf.constant([True, False, True, True, True]),
    }
    out, _, valid = transform(raw, tf.constant("f"), tf.constant(0, tf.int64), present)
    assert valid.numpy().tolist() == [1, 1, 1, 1, 1]
    # row 3: the side's id 2 is null; row 4: its only id
    weights = [[0, 0, 0], [0, 0, 0], [1, 1, 0], [1, 0, 0], [0, 0, 0]]
    assert out["hist_cate"]["weights"].numpy().tolist() == weights
    assert out["hist_cate"]["ids"].numpy()[2].tolist()[:2] == _rows([2, 1], 11)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"differs in length .* at row 0"):
        transform(
            dict(raw, hist_cate=tf.constant(["5", "", "1|2", "1|", ""])),
            tf.constant("f"),
            tf.constant(0, tf.int64),
            present,
        )


@pytest.mark.parametrize(
    "changes, pattern",
    [
        (
            {"features.hist.max_length": 0},
            r"features\.hist\.max_length: got 0; expected a value >= 1",
        ),
        (
            {"features.hist.target": "cate"},
            r"features\.hist\.target: feature 'cate' reads table 'cate' \(dim 4\) but this "
            r"sequence "
            r"reads 'item' \(dim 4\)",
        ),
        (
            {"features.hist.target": "itm"},
            r"features\.hist\.target: unknown feature 'itm'.*"
            r"Did you mean \"item\"",
        ),
        (
            {"features.hist.target": "hist_cate"},
            r"features\.hist\.target: feature 'hist_cate' is sequence; a sequence is compared "
            r"with a "
            r"categorical feature",
        ),
        (
            {"features.hist.dtype": "string"},
            r"features\.hist\.dtype: got 'string' but its target 'item' has dtype 'int64'",
        ),
        (
            {"features.hist_cate.max_length": 5},
            r"features\.hist_cate\.max_length: got 5 but the sequence it is side_of, 'hist', has 3",
        ),
        (
            {"features.hist_cate.side_of": "item"},
            r"features\.hist_cate\.side_of: feature 'item' is not a main sequence",
        ),
        (
            {"features.hist.hash_buckets": 50},
            r"features\.hist\.hash_buckets: got 50 but its target 'item' has hash_buckets None",
        ),
        (
            {"features.item.vocabulary": "items.txt"},
            r"features\.hist\.target: feature 'item' maps its ids with a vocabulary",
        ),
        (
            {"features.hist.pooling": "max"},
            r"features\.hist\.pooling: got 'max'; expected one of "
            r"'mean', 'sum'",
        ),
        ({"features.hist.newest": "latest"}, r"features\.hist\.newest: got 'latest'"),
    ],
)
def test_sequence_config_rejections_name_file_line_and_key(tmp_path, changes, pattern):
    (tmp_path / "items.txt").write_text("1\n2\n")
    with pytest.raises(ConfigError, match=pattern) as info:
        _config(tmp_path, changed(FEATURES, changes))
    assert "f.yaml:" in str(info.value)


def test_a_sequence_column_that_is_neither_a_list_nor_a_string(tmp_path):
    config = _config(tmp_path)

    class Meta:
        path = "data/part-0.parquet"
        schema = pa.schema(
            [
                ("item", pa.int64()),
                ("cate", pa.int64()),
                ("hist", pa.int64()),
                ("hist_cate", pa.list_(pa.int64())),
                ("click", pa.int64()),
            ]
        )

    with pytest.raises(
        DataError,
        match=r"data/part-0\.parquet: column 'hist' has type int64, "
        r"but sequence feature 'hist' needs a list<int64> or "
        r"list<string> column, or a delimited string column",
    ):
        check_file_schema(Meta, required_columns(config))


def test_embeddings_keep_a_sequence_or_pool_it(tmp_path):
    config = _config(tmp_path)
    batch = {
        "item": tf.constant([3, 4], tf.int64),
        "cate": tf.constant([1, 2], tf.int64),
        "hist": {
            "ids": tf.constant([[3, 7, 0], [0, 0, 0]], tf.int64),
            "weights": tf.constant([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]),
        },
        "hist_cate": {
            "ids": tf.constant([[1, 2, 0], [0, 0, 0]], tf.int64),
            "weights": tf.constant([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]),
        },
    }
    names = ["item", "cate", "hist", "hist_cate"]
    kept = FeatureEmbeddings(config, names, keep_sequences=True, seed=1)
    pooled = FeatureEmbeddings(config, names, seed=1)
    sequence, _ = kept(batch)
    mean, _ = pooled(batch)
    table = kept.tables["item"].numpy()
    # kept at its two real positions, (0, 0) and (0, 1); padded on demand
    np.testing.assert_array_equal(sequence["hist"].positions.numpy(), [[0, 0], [0, 1]])
    np.testing.assert_allclose(sequence["hist"].values.numpy(), [table[3], table[7]])
    padded = sequence["hist"].padded()
    assert padded.shape == (2, 3, 4)
    np.testing.assert_allclose(padded.numpy()[0], [table[3], table[7], np.zeros(4)])
    np.testing.assert_allclose(padded.numpy()[1], np.zeros((3, 4)))
    np.testing.assert_allclose(sequence["item"].numpy()[0], table[3])
    np.testing.assert_allclose(mean["hist"].numpy()[0], (table[3] + table[7]) / 2, rtol=1e-6)
    np.testing.assert_allclose(mean["hist"].numpy()[1], np.zeros(4))
