"""Synthetic Criteo-like rows whose relation between features and clicks drifts from one
partition to the next (``recsys-dist data synth --drift RATE``).

In the click logit of :class:`~recsys_dist.data.synth.RowGenerator`, the effects of the
ids (every categorical field, the pairs of fields and the user) of partition ``t`` (the
day index, or the hour with ``--hourly``) turn toward independent ones of the same form,
hashed from another seed; the tags, topics and numeric terms stay::

    click_logit(t) = rest + cos(RATE * t) * ids_seed + sin(RATE * t) * ids_other + bias

The two id parts have the same distribution and are independent, so the logit's spread
and the click rate stay what they are, and the id parts of two partitions ``k`` apart
correlate as ``cos(RATE * k)``. The features, the conversion model and the stored
``oracle_logit`` (the drifted one) are as in ``RowGenerator``.
"""

from __future__ import annotations

import math

import numpy as np

from recsys_dist.data.synth import USERS, RowGenerator
from recsys_dist.data.synth_effects import sigmoid

#: Added to the seed for the label model the logit turns toward.
OTHER_SEED_OFFSET = 1_000_003


class DriftingRowGenerator(RowGenerator):
    """:class:`RowGenerator` with a click model that turns by ``rate`` radians a partition.

    Args:
      seed: As for ``RowGenerator``.
      users: As for ``RowGenerator``.
      rate: Radians per partition, at least 0 (0: no drift).
    """

    def __init__(self, seed: int, users: int = USERS, rate: float = 0.0):
        if not rate >= 0.0:
            raise ValueError(f"drift rate must be at least 0, got {rate}")
        super().__init__(seed, users=users)
        self.rate = float(rate)
        self._other = RowGenerator(seed + OTHER_SEED_OFFSET, users=users)

    def clicks(self, day: int, file_index: int, n: int):
        """As :meth:`RowGenerator.clicks`, with the logit of partition ``day``."""
        rng = np.random.default_rng([self._seed, day, file_index])
        batch = self._features(day, rng, n)
        angle = self.rate * day
        logit = self._click_logit(batch)
        if angle:
            ids = self.click_id_terms(batch)
            turned = self._other.click_id_terms(batch)
            for name, term in ids.items():
                logit += (math.cos(angle) - 1.0) * term.effect
                logit += math.sin(angle) * turned[name].effect
        click_logit = (logit + self._click_bias).astype(np.float32)
        click = rng.random(n) < sigmoid(click_logit.astype(np.float64))
        return batch, click_logit, click, rng
