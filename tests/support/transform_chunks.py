"""A feature config of every scalar kind and random chunks of its columns, for the
transform tests (stacked transforms, fused kernels)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

EDGES_A = [-0.5, 0.5, 1.72, 3.48, 6.39, 11.18, 19.09]
EDGES_B = [0.0, 100.0]
FEATURES = {
    "tables": {
        "a": {"rows": 3000, "dim": 4},
        "b": {"rows": 7, "dim": 4},
        "big": {"rows": 1_000_003, "dim": 4},
        "ba": {"rows": 8, "dim": 4},
        "bb": {"rows": 3, "dim": 4},
        "x": {"rows": 999, "dim": 4},
    },
    "features": {
        "u": {"kind": "categorical", "dtype": "int64", "table": "a"},
        "v": {"kind": "categorical", "dtype": "int64", "table": "b"},
        "w": {"kind": "categorical", "dtype": "int64", "table": "big", "column": "u"},
        "s": {"kind": "categorical", "dtype": "string", "table": "a"},
        "p": {"kind": "numeric", "transform": "log1p", "nan_means_missing": True},
        "q": {
            "kind": "numeric",
            "transform": "standardize",
            "mean": 1.5,
            "std": 3.0,
            "missing_indicator": True,
            "fill_value": 2.0,
        },
        "r": {"kind": "numeric", "nan_means_missing": True, "missing_indicator": True},
        "pa": {
            "kind": "numeric",
            "column": "p",
            "transform": "bucketize",
            "boundaries": EDGES_A,
            "table": "ba",
            "nan_means_missing": True,
            "fill_value": -1,
        },
        "rb": {
            "kind": "numeric",
            "column": "r",
            "transform": "bucketize",
            "boundaries": EDGES_B,
            "table": "bb",
            "nan_means_missing": True,
        },
        "u_x_v": {"kind": "cross", "inputs": ["u", "v"], "table": "x"},
        "v_x_s": {"kind": "cross", "inputs": ["v", "s"], "table": "x"},
    },
    "labels": {"click": {}},
}
DTYPES = {
    "u": "int64",
    "v": "int32",
    "s": "string",
    "p": "float64",
    "q": "float32",
    "r": "float32",
    "click": "int64",
}
N = 20_000


def random_chunk(seed: int):
    """``(raw, present)`` of N random rows for :data:`FEATURES`: nulls, NaN, infinities."""
    rng = np.random.default_rng(seed)
    floats = {
        c: rng.choice([-1e6, -3.0, 0.0, 0.5, 1.72, 19.09, 99.9, 100.0, 1e9], N)
        * rng.random(N).round(1)
        for c in "pqr"
    }
    for column, values in floats.items():
        values[rng.random(N) < 0.05] = np.nan
        if column == "q":
            values[rng.random(N) < 0.01] = np.inf
    raw = {
        "u": tf.constant(rng.integers(-(2**62), 2**62, N), tf.int64),
        "v": tf.constant(rng.integers(-50, 50, N), tf.int32),
        "s": tf.constant(rng.choice(["", "a", "bb", "ccc"], N)),
        "p": tf.constant(floats["p"], tf.float64),
        "q": tf.constant(floats["q"], tf.float32),
        "r": tf.constant(floats["r"], tf.float32),
        "click": tf.constant(rng.integers(0, 2, N), tf.int64),
    }
    present = {c: tf.constant(rng.random(N) > 0.1) for c in "uvsqr"}  # p: no validity
    present["click"] = tf.ones([N], tf.bool)
    return raw, present
