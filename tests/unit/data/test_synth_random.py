"""Counter-based random numbers of the synthetic data (``recsys_dist/data/synth_random.py``):
splitmix64 against its reference outputs, values that depend only on their stream and ids
(also in another process), and the distributions of the uniforms and normals."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from recsys_dist.data.synth_random import (
    hash64,
    hashed_normal,
    hashed_uniform,
    stream_key,
    unit_interval,
)
from tests.support.paths import REPO


def test_hash64_of_one_array_is_splitmix64():
    # The first two outputs of Vigna's splitmix64 seeded with 0 (its reference code):
    # state 0 and state 0x9E3779B97F4A7C15, each advanced by the golden gamma first.
    out = hash64(0, np.array([0, 0x9E3779B97F4A7C15], np.uint64))
    assert [int(v) for v in out] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4]


def test_a_value_depends_only_on_its_key_and_ids():
    ids = np.arange(1000)
    whole = hashed_uniform(11, ids, ids % 7)
    assert np.array_equal(whole[500:], hashed_uniform(11, ids[500:], ids[500:] % 7))
    assert np.array_equal(whole[::-1], hashed_uniform(11, ids[::-1], ids[::-1] % 7))
    assert not np.array_equal(whole, hashed_uniform(12, ids, ids % 7))
    assert not np.array_equal(whole, hashed_uniform(11, ids % 7, ids))  # order of the ids
    assert len(np.unique(hash64(5, ids))) == 1000


def test_stream_keys_are_named_and_the_same_in_another_process():
    assert stream_key(7, "day", 3) == stream_key(7, "day", 3)
    keys = {
        stream_key(seed, name, day)
        for seed in (0, 1)
        for name in ("click", "day")
        for day in (0, 1, 2)
    }
    assert len(keys) == 12 and all(0 <= k < 2**64 for k in keys)
    code = "from recsys_dist.data.synth_random import stream_key; print(stream_key(7, 'day', 3))"
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={"PYTHONHASHSEED": "123"},
    )
    assert int(other.stdout) == stream_key(7, "day", 3)


def test_uniforms_lie_strictly_inside_zero_one_and_are_uniform():
    assert unit_interval(np.array([0, 2**64 - 1], np.uint64)).tolist() == [
        0.5 * 2.0**-53,
        1.0 - 0.5 * 2.0**-53,
    ]
    u = hashed_uniform(stream_key(0, "u"), np.arange(200_000))
    assert 0.0 < u.min() and u.max() < 1.0
    counts = np.histogram(u, bins=20, range=(0, 1))[0]
    assert abs(counts - 10_000).max() < 500  # about 5 standard deviations of a bin


def test_normals_have_mean_zero_and_variance_one():
    z = hashed_normal(stream_key(0, "z"), np.arange(200_000))
    assert np.isfinite(z).all()
    assert abs(z.mean()) < 0.012 and abs(z.std() - 1.0) < 0.01
    assert abs(np.mean(np.abs(z) < 1.0) - 0.6827) < 0.005
