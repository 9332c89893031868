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
- A model does not learn the shrunk true effect ``k e`` (``k`` the factor above) but a
  noisy measurement of it: the posterior mean ``k (e + eta)``, with ``eta`` the noise of
  ``n`` labels. Its distribution is ``k e + sqrt(k (1 - k)) s z``; the script draws ``z``
  once per id (or id pair), from a hash. Leaving the noise out (as the script did before
  2026-11-22) overstates what is learnable; both figures are printed.
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

LOGIT_VARIANCE = 0.25 * 0.75  # p (1 - p) at the 25% click rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--rows-per-day", type=int, default=500_000)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    generator = synth.RowGenerator(args.seed)
    file_rows = synth.rows_per_file_of_day(args.rows_per_day)  # as `data synth` writes them

    counts: dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
    for day in range(args.days - 1):
        for index, n in enumerate(file_rows):
            batch = generator._features(day, np.random.default_rng([args.seed, day, index]), n)
            for name, term in generator.click_id_terms(batch).items():
                for part, ids in enumerate(term.ids):
                    values, seen = np.unique(ids, return_counts=True)
                    counts[(name, part)].update(dict(zip(values.tolist(), seen.tolist())))
        print(f"counted day {day + 1} of {args.days - 1}", flush=True)
    oracle, learnable, noise_free, labels = [], [], [], []
    left, noise_left = collections.defaultdict(list), collections.defaultdict(list)
    for index, n in enumerate(file_rows):
        batch, logit, click, _ = generator.clicks(args.days - 1, index, n)
        logit = logit.astype(np.float64)
        estimate, shrunk = logit.copy(), logit.copy()
        for name, term in generator.click_id_terms(batch).items():
            learned = np.ones(n)  # an interaction needs both ids' vectors
            for part, ids in enumerate(term.ids):
                seen = np.array([counts[(name, part)].get(i, 0) for i in ids.tolist()],
                                dtype=np.float64)
                information = seen * term.scale**2 * LOGIT_VARIANCE
                learned *= information / (1.0 + information)
            # The posterior mean of an effect e with prior sd s, measured with noise:
            # k e + sqrt(k (1 - k)) s z, z one standard normal per id (or id pair).
            noise = synth.hashed_normal(synth.stream_key(args.seed, "ceiling", name), *term.ids)
            estimate += (learned - 1.0) * term.effect + (
                np.sqrt(learned * (1.0 - learned)) * term.scale * noise)
            shrunk -= term.effect * (1.0 - learned)
            noise_left[name].append((learned * (1.0 - learned) * term.scale**2).mean())
            left[name].append((term.effect * (1.0 - learned)).var() + noise_left[name][-1])
        oracle.append(logit)
        learnable.append(estimate)
        noise_free.append(shrunk)
        labels.append(click)  # the day's stored click labels
    oracle, learnable, noise_free, labels = (
        np.concatenate(a) for a in (oracle, learnable, noise_free, labels))
    oracle_auc, learnable_auc = auc(labels, oracle), auc(labels, learnable)
    print(f"day {args.days}, {oracle.size:,} rows: oracle AUC {oracle_auc:.4f}, learnable "
          f"estimate {learnable_auc:.4f} (gap {oracle_auc - learnable_auc:.4f}); without "
          f"the estimation noise (shrinkage only) {auc(labels, noise_free):.4f}")
    total = sum(np.mean(values) for values in left.values())
    noise = sum(np.mean(values) for values in noise_left.values())
    print(f"logit error variance of all per-id terms: {total:.4f} (of which label noise "
          f"{noise:.4f}); per term, shrinkage + noise (largest first):")
    for name, values in sorted(left.items(), key=lambda kv: -np.mean(kv[1]))[:8]:
        print(f"  {name:12s} {np.mean(values):.4f}")


if __name__ == "__main__":
    main()
