"""The strengths and response curves of the synthetic data's label model (see
:mod:`recsys_dist.data.synth`).

How strongly each field moves the click and conversion logits, what a numeric value, a
pair of ids or an id's popularity adds to them, and the bisection that calibrates a
logit's bias to a target rate. Each is a pure function of its inputs and of hash
streams, so any process computes the same oracle.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from recsys_dist.data.synth_random import hashed_normal, stream_key

_EFFECT_HEAD, _EFFECT_DECAY = 300.0, 0.5  # rare ids carry smaller effects
_AFFINITY_RANK = 4  # latent dimensions of each pairwise interaction

# How strongly each term moves the click and conversion logits (the label model's s_*).
CLICK_FIELD_SIGMAS = {
    "C1": 0.25,
    "C2": 0.22,
    "C3": 0.22,
    "C4": 0.22,
    "C5": 0.18,
    "C6": 0.22,
    "C8": 0.18,
    "C10": 0.22,
    "C11": 0.22,
    "C12": 0.22,
    "C13": 0.18,
    "C14": 0.22,
    "C16": 0.22,
    "C17": 0.25,
    "C21": 0.22,
    "C24": 0.22,
}
CLICK_PAIR_SIGMAS = {
    ("C2", "C17"): 0.38,
    ("C5", "C8"): 0.38,
    ("C6", "C14"): 0.42,
    ("C9", "C13"): 0.38,
}
USER_SIGMA = 0.42
TAG_SIGMA, NO_TAG_EFFECT = 0.55, -0.25
TOPIC_SIGMA = 0.4
CVR_FIELD_SIGMAS = {"C4": 0.4, "C11": 0.35, "C16": 0.4, "C24": 0.35}
CVR_USER_SIGMA = 0.45


def affinity(key: int, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """``<u(first), v(second)> / sqrt(K)``: a rank-``K`` interaction of two ids whose latent
    vectors are standard normals hashed from ``key`` (unit variance, mean 0)."""
    total = np.zeros(first.shape)
    for k in range(_AFFINITY_RANK):
        total += hashed_normal(stream_key(key, "u", k), first) * hashed_normal(
            stream_key(key, "v", k), second
        )
    return total / math.sqrt(_AFFINITY_RANK)


def effect_scale(slot: np.ndarray) -> np.ndarray:
    """How strongly an id of popularity ``slot`` (0 = most popular) moves the logit."""
    return (1.0 + slot / _EFFECT_HEAD) ** -_EFFECT_DECAY


def _g1(x: np.ndarray) -> np.ndarray:
    return 0.55 * np.sin(1.7 * np.log1p(x))


def _g2(x: np.ndarray) -> np.ndarray:
    return 0.25 * np.tanh(np.log1p(np.maximum(x, 0.0)) - 2.0) - 0.4 * (x < 0)


def _g3(x: np.ndarray) -> np.ndarray:
    return 0.75 * np.exp(-((np.log1p(x) - 2.2) ** 2) / 0.4) - 0.2


def _g5(x: np.ndarray) -> np.ndarray:
    return 0.45 * (x < 300)


def _g7(x: np.ndarray) -> np.ndarray:
    return 0.9 * (1.0 - np.exp(-x / 4.0)) - 0.45


def _g12(x: np.ndarray) -> np.ndarray:
    return 0.35 * np.cos(2.0 * np.log1p(x))


# Numeric field -> (effect of a present value, effect when missing).
NUMERIC_EFFECTS = {
    "I1": (_g1, -0.3),
    "I2": (_g2, 0.0),
    "I3": (_g3, 0.25),
    "I5": (_g5, -0.2),
    "I7": (_g7, 0.1),
    "I12": (_g12, -0.15),
}


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def solve_bias(mean_rate: Callable[[float], float], target: float) -> float:
    """Bisection for the bias at which the increasing ``mean_rate`` equals ``target``."""
    low, high = -30.0, 30.0
    for _ in range(60):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if mean_rate(mid) < target else (low, mid)
    return 0.5 * (low + high)
