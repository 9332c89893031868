"""The drifting click model of synthetic rows: no drift is the plain generator, the
features never move, the id effects of partition ``k`` are ``cos(rate k)`` of the seed's
plus ``sin(rate k)`` of the other seed's, the click rate stays; bad rates are refused by
name."""

from __future__ import annotations

import math

import numpy as np
import pytest

from recsys_dist.data.synth import RowGenerator
from recsys_dist.data.synth_drift import OTHER_SEED_OFFSET, DriftingRowGenerator
from recsys_dist.data.synth_files import synthesize

ROWS = 20_000


def test_no_drift_is_the_plain_generator():
    plain, still = RowGenerator(3), DriftingRowGenerator(3, rate=0.0)
    for day in (0, 5):
        for a, b in zip(plain.table(day, 0, 500).columns, still.table(day, 0, 500).columns):
            assert a.to_pylist() == b.to_pylist() or np.array_equal(
                a.to_numpy(), b.to_numpy(), equal_nan=True
            )


def test_the_id_effects_turn_by_the_angle_of_the_partition():
    rate = 0.1
    drifting, plain = DriftingRowGenerator(3, rate=rate), RowGenerator(3)
    for k in (5, 15):
        batch, logit, _, _ = drifting.clicks(k, 0, ROWS)
        plain_batch = plain.clicks(k, 0, ROWS)[0]
        assert all(
            np.array_equal(batch.categorical[f], plain_batch.categorical[f])
            for f in batch.categorical
        )
        ids = {name: term.effect for name, term in plain.click_id_terms(batch).items()}
        rest = sum(v for name, v in plain.click_terms(batch).items() if name not in ids)
        turned = logit.astype(np.float64) - plain._click_bias - rest
        other = RowGenerator(3 + OTHER_SEED_OFFSET).click_id_terms(batch)
        expected = math.cos(rate * k) * sum(ids.values()) + math.sin(rate * k) * sum(
            term.effect for term in other.values()
        )
        # The stored logit is float32: off by at most half a unit in its last place.
        bound = np.abs(logit.astype(np.float64)) * 2.0**-24 + 1e-12
        assert np.all(np.abs(turned - expected) <= bound * 1.01 + 1e-9)


def test_bad_drift_is_refused(tmp_path):
    from recsys_dist.data.synth_behaviour import BehaviourGenerator

    with pytest.raises(ValueError, match="drift rate must be at least 0, got -0.1"):
        DriftingRowGenerator(1, rate=-0.1)
    with pytest.raises(ValueError, match="drift applies to the criteo dataset only"):
        synthesize(tmp_path, 1, 100, drift=0.1, generator_class=BehaviourGenerator)
