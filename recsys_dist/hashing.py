"""In-graph hashing of ids into table rows, identical on workers and at serving time.

Integer ids go through the splitmix64 finalizer; strings through TensorFlow's
Fingerprint64 (``tf.strings.to_hash_bucket_fast``). Both are pure TensorFlow ops, so
an exported SavedModel hashes exactly as training did. TensorFlow is imported on first
use (:mod:`recsys_dist.lazy`): the feature kinds of the config part import this module.
"""

from __future__ import annotations

from recsys_dist.lazy import tensorflow as tf

_MASK63 = 2**63 - 1


def _u64(value: int) -> tf.Tensor:
    return tf.constant(value, tf.uint64)


def mix64(x: tf.Tensor) -> tf.Tensor:
    """splitmix64 finalizer on a uint64 tensor: a fast bijective bit mixer."""
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u64(30))) * _u64(0xBF58476D1CE4E5B9)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u64(27))) * _u64(0x94D049BB133111EB)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u64(31)))


def hash_int64(ids: tf.Tensor) -> tf.Tensor:
    """Hashes int64 ids to uint64."""
    return mix64(tf.bitcast(tf.cast(ids, tf.int64), tf.uint64))


def hash_string(values: tf.Tensor) -> tf.Tensor:
    """Hashes strings to uint64 (63 significant bits of Fingerprint64)."""
    return tf.bitcast(tf.strings.to_hash_bucket_fast(values, _MASK63), tf.uint64)


def combine(left: tf.Tensor, right: tf.Tensor) -> tf.Tensor:
    """Order-dependent combination of two uint64 hashes (for crosses)."""
    return mix64(left * _u64(0x9E3779B97F4A7C15) + right)


def to_bucket(hashed: tf.Tensor, buckets: int) -> tf.Tensor:
    """Maps uint64 hashes to int64 rows in ``[0, buckets)``."""
    return tf.cast(tf.math.floormod(hashed, _u64(buckets)), tf.int64)
