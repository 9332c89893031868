"""In-graph hashing of ids into rows (``recsys_dist/hashing.py``): the splitmix64 finalizer
against a numpy copy of its published steps, negative ids, strings, crosses and buckets."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from recsys_dist import hashing


def splitmix64_finalizer(x: np.ndarray) -> np.ndarray:
    """The finalizer of Vigna's splitmix64 (no golden-gamma step), in numpy."""
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


IDS = np.array([0, 1, 2, 12345, -1, -(2**63), 2**63 - 1, 2**62], np.int64)


def test_integer_ids_hash_through_the_splitmix64_finalizer_of_their_bits():
    out = hashing.hash_int64(tf.constant(IDS)).numpy()
    assert out.dtype == np.uint64
    assert out.tolist() == splitmix64_finalizer(IDS.view(np.uint64)).tolist()
    assert int(out[0]) == 0  # the finalizer keeps 0
    assert len(set(out.tolist())) == len(IDS)
    # Narrow integer ids hash as their int64 value.
    assert (
        hashing.hash_int64(tf.constant([7, -3], tf.int32)).numpy().tolist()
        == hashing.hash_int64(tf.constant([7, -3], tf.int64)).numpy().tolist()
    )


def test_strings_hash_to_63_bits_of_fingerprint64():
    values = tf.constant(["", "a", "b", "ad_1", "ad_1 "])
    out = hashing.hash_string(values).numpy()
    assert out.dtype == np.uint64 and len(set(out.tolist())) == 5
    assert all(v < 2**63 for v in out.tolist())
    expected = tf.strings.to_hash_bucket_fast(values, 2**63 - 1).numpy()
    assert out.tolist() == expected.astype(np.uint64).tolist()


def test_a_cross_depends_on_the_order_of_its_inputs():
    a = hashing.hash_int64(tf.constant([1, 2, 3], tf.int64))
    b = hashing.hash_string(tf.constant(["x", "y", "z"]))
    ab, ba = hashing.combine(a, b).numpy(), hashing.combine(b, a).numpy()
    assert not np.any(ab == ba)
    with np.errstate(over="ignore"):
        expected = splitmix64_finalizer(a.numpy() * np.uint64(0x9E3779B97F4A7C15) + b.numpy())
    assert ab.tolist() == expected.tolist()


def test_buckets_are_the_hash_modulo_their_count():
    hashed = hashing.hash_int64(tf.constant(np.arange(-5000, 5000, dtype=np.int64)))
    rows = hashing.to_bucket(hashed, 97).numpy()
    assert rows.dtype == np.int64 and rows.min() >= 0 and rows.max() < 97
    assert rows.tolist() == (hashed.numpy() % np.uint64(97)).astype(np.int64).tolist()
    counts = np.bincount(rows, minlength=97)
    assert counts.min() > 50 and counts.max() < 160  # about 103 per row
