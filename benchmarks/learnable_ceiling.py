"""How much of the oracle AUC a model can learn from the training days of synthetic data.

The oracle knows every id's true effect. A model only sees the rows: an id shown n times
can be learned only up to the noise of n labels. This script estimates the best AUC a
model trained on days ``1..D-1`` can reach on day ``D``:

- It regenerates the rows of ``recsys-dist data synth`` (same seed, same generator, no
  files), counts how often every id, user and interacting pair appears on the training
  days, and replaces each per-id effect ``e`` of a day-``D`` row by its posterior mean
  ``e * n s^2 v / (1 + n s^2 v)``. Here ``s`` is the effect's standard deviation, ``n`` the
  id's training count and ``v = p (1 - p)`` at the base click rate: the Gaussian
  approximation of the logistic likelihood of one effect on its own. A pairwise
  interaction is the product of both ids' factors, each from that id's own count.
- Numeric, tag and topic terms are kept whole (thousands of rows inform each of them).

It is an optimistic estimate: it treats every effect as if all the others were known.
Prints the oracle AUC and the estimate on day ``D``'s rows and stored click labels, and how
much unlearnable logit variance each term leaves.

Usage: ``python benchmarks/learnable_ceiling.py [--days 7] [--rows-per-day 500000]
[--seed 11]`` (the defaults are the quality benchmark's data).
"""

from __future__ import annotations

import argparse
import collections

import numpy as np

from recsys_dist.data import synth
from recsys_dist.evaluation.metrics import auc

FILES_PER_DAY = 5
LOGIT_VARIANCE = 0.25 * 0.75  # p (1 - p) at the 25% click rate


def effect_terms(generator, seed: int, batch) -> dict[str, tuple]:
    """Per term: (id key per row, effect per row, effect standard deviation per row)."""
    scale, normal, key = synth._effect_scale, synth._normal, synth._key
    terms = {}
    for field, sigma in synth._CLICK_FIELD_SIGMAS.items():
        ids, slots = batch.categorical[field], batch.slots[field]
        terms[field] = (ids, sigma * scale(slots) * normal(key(seed, "click", field), ids),
                        sigma * scale(slots))
    for (f, g), sigma in synth._CLICK_PAIR_SIGMAS.items():
        s = sigma * np.sqrt(scale(batch.slots[f]) * scale(batch.slots[g]))
        effect = s * synth._affinity(key(seed, "click", f, g), batch.categorical[f],
                                     batch.categorical[g])
        # each id's latent vector is learned from that id's own rows
        terms[f"{f} x {g}"] = ((batch.categorical[f], batch.categorical[g]), effect, s)
    s = synth._USER_SIGMA * scale(batch.user_slot)
    terms["user"] = (batch.user_id, s * normal(key(seed, "click", "user"), batch.user_id), s)
    return terms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--rows-per-day", type=int, default=500_000)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    generator = synth._Generator(args.seed)

    def day_batches(day):
        for index in range(FILES_PER_DAY):
            rng = np.random.default_rng([args.seed, day, index])
            yield generator._features(day, rng, args.rows_per_day // FILES_PER_DAY), rng

    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for day in range(args.days - 1):
        for batch, _ in day_batches(day):
            for name, (ids, _, _) in effect_terms(generator, args.seed, batch).items():
                for part, part_ids in enumerate(ids if isinstance(ids, tuple) else (ids,)):
                    values, n = np.unique(part_ids, return_counts=True)
                    counts[(name, part)].update(dict(zip(values.tolist(), n.tolist())))
        print(f"counted day {day + 1} of {args.days - 1}", flush=True)
    oracle, learnable, labels, left = [], [], [], collections.defaultdict(list)
    for batch, rng in day_batches(args.days - 1):
        logit = (generator._click_logit(batch) + generator._click_bias).astype(np.float32)
        labels.append(rng.random(batch.n) < synth._sigmoid(logit.astype(np.float64)))
        logit = logit.astype(np.float64)
        estimate = logit.copy()
        for name, (ids, effect, sigma) in effect_terms(generator, args.seed, batch).items():
            learned = np.ones(batch.n)  # an interaction needs both ids' vectors
            for part, part_ids in enumerate(ids if isinstance(ids, tuple) else (ids,)):
                seen = np.array([counts[(name, part)].get(i, 0) for i in part_ids.tolist()],
                                dtype=np.float64)
                information = seen * sigma**2 * LOGIT_VARIANCE
                learned *= information / (1.0 + information)
            unlearned = effect * (1.0 - learned)
            estimate -= unlearned
            left[name].append(unlearned.var())
        oracle.append(logit)
        learnable.append(estimate)
    oracle, learnable = np.concatenate(oracle), np.concatenate(learnable)
    labels = np.concatenate(labels)  # the day's stored click labels
    oracle_auc, learnable_auc = auc(labels, oracle), auc(labels, learnable)
    print(f"day {args.days}, {oracle.size:,} rows: oracle AUC {oracle_auc:.4f}, learnable "
          f"estimate {learnable_auc:.4f} (gap {oracle_auc - learnable_auc:.4f})")
    print("unlearnable logit variance per term (largest first):")
    for name, values in sorted(left.items(), key=lambda kv: -np.mean(kv[1]))[:8]:
        print(f"  {name:12s} {np.mean(values):.4f}")


if __name__ == "__main__":
    main()
