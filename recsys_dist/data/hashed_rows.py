"""Which rows a split with ``hash_share: [FROM, TO]`` keeps.

Row ``r`` of a file has the share ``u = mix64(key XOR r) / 2^64`` in [0, 1), where
``key`` is a 64-bit hash of the file's path relative to the deepest directory holding
every file of the plan (so the same data keeps the same rows from another root or
store) and ``mix64`` is splitmix64's finalizer (:func:`recsys_dist.hashing.mix64`). The
split keeps the rows with ``FROM <= u < TO``. Workers filter in-graph
(:func:`kept_in_graph`); the coordinator counts each work item's kept rows with the
same arithmetic in numpy (:func:`kept_count`), so every item's rows are still checked
against what it must return.
"""

from __future__ import annotations

import hashlib

import numpy as np
import tensorflow as tf

from recsys_dist import hashing
from recsys_dist.data.shard_plan import relative_paths

_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))
_UNIT = 2.0**-53  # a share from the top 53 bits of the hash


def file_keys(files: tuple[str, ...]) -> tuple[int, ...]:
    """The 64-bit key of each file: a hash of its path relative to the plan's root."""
    return tuple(
        int.from_bytes(hashlib.blake2b(p.encode(), digest_size=8).digest(), "little")
        for p in relative_paths(files)
    )


def _shares(key: int, rows: np.ndarray) -> np.ndarray:
    x = np.uint64(key) ^ rows.astype(np.uint64)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= _MIX[0]
        x ^= x >> np.uint64(27)
        x *= _MIX[1]
        x ^= x >> np.uint64(31)
    return (x >> np.uint64(11)).astype(np.float64) * _UNIT


def kept(key: int, rows: np.ndarray, share: tuple[float, float]) -> np.ndarray:
    """``[N]`` bool: which ``rows`` of the file with ``key`` ``share`` keeps."""
    shares = _shares(key, rows)
    return (shares >= share[0]) & (shares < share[1])


def kept_count(key: int, start: int, stop: int, stride: int, share: tuple[float, float]) -> int:
    """Rows ``start, start + stride, ...`` below ``stop`` of the file with ``key`` that
    ``share`` keeps."""
    return int(np.count_nonzero(kept(key, np.arange(start, stop, stride, dtype=np.int64), share)))


def kept_in_graph(key: tf.Tensor, rows: tf.Tensor, share: tuple[float, float]) -> tf.Tensor:
    """``[N]`` bool: which file ``rows`` (int64) of the file with ``key`` (a uint64
    scalar) ``share`` keeps; the same arithmetic as :func:`kept_count`."""
    mixed = hashing.mix64(tf.bitwise.bitwise_xor(key, tf.bitcast(rows, tf.uint64)))
    shares = tf.cast(tf.bitwise.right_shift(mixed, tf.constant(11, tf.uint64)), tf.float64)
    shares *= _UNIT
    return tf.logical_and(shares >= share[0], shares < share[1])
