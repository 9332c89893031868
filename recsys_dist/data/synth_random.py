"""Counter-based random numbers of the synthetic data: each value is a pure function of
a named stream's key and the ids it is drawn for, so a day, a file or a user's values never
depend on what else was generated (stable across processes and platforms)."""

from __future__ import annotations

import hashlib

import numpy as np

_MASK64 = (1 << 64) - 1


def stream_key(seed: int, *names: object) -> int:
    """A 64-bit key for a named hash stream, stable across processes and platforms."""
    text = "/".join([str(seed), *map(str, names)])
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array (a bijection with full avalanche)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def hash64(key: int, *values: np.ndarray) -> np.ndarray:
    """Hashes equal-length integer arrays elementwise under ``key`` to uint64."""
    h = _mix64(np.asarray(values[0]).astype(np.uint64) ^ np.uint64(key & _MASK64))
    for value in values[1:]:
        h = _mix64(h ^ np.asarray(value).astype(np.uint64))
    return h


def unit_interval(h: np.ndarray) -> np.ndarray:
    """Maps uint64 hashes to floats in the open interval (0, 1)."""
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53


def hashed_uniform(key: int, *values: np.ndarray) -> np.ndarray:
    """A uniform in (0, 1) per element, a pure function of ``key`` and ``values``."""
    return unit_interval(hash64(key, *values))


def hashed_normal(key: int, *values: np.ndarray) -> np.ndarray:
    """A standard normal per element, a pure function of ``key`` and ``values``."""
    h = hash64(key, *values)
    radius = np.sqrt(-2.0 * np.log(unit_interval(h)))
    return radius * np.cos(2.0 * np.pi * unit_interval(_mix64(h)))
