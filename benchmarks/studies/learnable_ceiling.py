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

Answered: docs/quality.md ("How close a model can get") and docs/data.md: 0.7996 against
the oracle's 0.8025 on the quality benchmark's data. ``learnable_ceiling(...)`` returns the
figures as a :class:`Ceiling`.

Usage: ``python benchmarks/studies/learnable_ceiling.py [--days 7] [--rows-per-day 500000]
[--seed 11]`` (the defaults are the quality benchmark's data).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
from collections.abc import Callable

import numpy as np

from recsys_dist.data import synth, synth_files, synth_random
from recsys_dist.evaluation.metrics import auc

LOGIT_VARIANCE = 0.25 * 0.75  # p (1 - p) at the 25% click rate


@dataclasses.dataclass(frozen=True)
class Ceiling:
    """What :func:`learnable_ceiling` measured on day ``day``'s rows."""

    day: int
    rows: int
    oracle_auc: float
    learnable_auc: float  # shrinkage and the label noise of each estimate
    shrinkage_only_auc: float  # without the estimation noise (optimistic)
    error_variance: float  # logit error variance of all per-id terms
    noise_variance: float  # of which the label noise
    per_term: dict[str, float]  # term -> error variance, largest first


def learnable_ceiling(
    days: int = 7, rows_per_day: int = 500_000, seed: int = 11, log: Callable[[str], None] = print
) -> Ceiling:
    """Estimates the best AUC on day ``days`` of a model trained on days ``1..days-1`` of
    ``recsys-dist data synth --seed SEED --rows-per-day ROWS`` (see the module docstring);
    ``log`` gets a progress line per counted day."""
    if days < 2:
        raise ValueError(f"days must be at least 2 (train on 1..days-1), got {days}")
    generator = synth.RowGenerator(seed)
    file_rows = synth_files.rows_per_file_of_day(rows_per_day)  # as `data synth` writes them

    counts: dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
    for day in range(days - 1):
        for index, n in enumerate(file_rows):
            batch = generator.features(day, index, n)
            for name, term in generator.click_id_terms(batch).items():
                for part, ids in enumerate(term.ids):
                    values, seen = np.unique(ids, return_counts=True)
                    counts[(name, part)].update(dict(zip(values.tolist(), seen.tolist())))
        log(f"counted day {day + 1} of {days - 1}")
    oracle, learnable, noise_free, labels = [], [], [], []
    left, noise_left = collections.defaultdict(list), collections.defaultdict(list)
    for index, n in enumerate(file_rows):
        batch, logit, click, _ = generator.clicks(days - 1, index, n)
        logit = logit.astype(np.float64)
        estimate, shrunk = logit.copy(), logit.copy()
        for name, term in generator.click_id_terms(batch).items():
            learned = np.ones(n)  # an interaction needs both ids' vectors
            for part, ids in enumerate(term.ids):
                seen = np.array(
                    [counts[(name, part)].get(i, 0) for i in ids.tolist()], dtype=np.float64
                )
                information = seen * term.scale**2 * LOGIT_VARIANCE
                learned *= information / (1.0 + information)
            # The posterior mean of an effect e with prior sd s, measured with noise:
            # k e + sqrt(k (1 - k)) s z, z one standard normal per id (or id pair).
            key = synth_random.stream_key(seed, "ceiling", name)
            noise = synth_random.hashed_normal(key, *term.ids)
            estimate += (learned - 1.0) * term.effect + (
                np.sqrt(learned * (1.0 - learned)) * term.scale * noise
            )
            shrunk -= term.effect * (1.0 - learned)
            noise_left[name].append((learned * (1.0 - learned) * term.scale**2).mean())
            left[name].append((term.effect * (1.0 - learned)).var() + noise_left[name][-1])
        oracle.append(logit)
        learnable.append(estimate)
        noise_free.append(shrunk)
        labels.append(click)  # the day's stored click labels
    oracle, learnable, noise_free, labels = (
        np.concatenate(a) for a in (oracle, learnable, noise_free, labels)
    )
    per_term = {name: float(np.mean(values)) for name, values in left.items()}
    return Ceiling(
        day=days,
        rows=int(oracle.size),
        oracle_auc=auc(labels, oracle),
        learnable_auc=auc(labels, learnable),
        shrinkage_only_auc=auc(labels, noise_free),
        error_variance=sum(per_term.values()),
        noise_variance=float(sum(np.mean(values) for values in noise_left.values())),
        per_term=dict(sorted(per_term.items(), key=lambda kv: -kv[1])),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--rows-per-day", type=int, default=500_000)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    if args.days < 2:
        parser.error(f"--days must be at least 2 (train on 1..days-1), got {args.days}")
    found = learnable_ceiling(
        args.days, args.rows_per_day, args.seed, log=lambda line: print(line, flush=True)
    )
    print(
        f"day {found.day}, {found.rows:,} rows: oracle AUC {found.oracle_auc:.4f}, "
        f"learnable estimate {found.learnable_auc:.4f} (gap "
        f"{found.oracle_auc - found.learnable_auc:.4f}); without the estimation noise "
        f"(shrinkage only) {found.shrinkage_only_auc:.4f}"
    )
    print(
        f"logit error variance of all per-id terms: {found.error_variance:.4f} (of which "
        f"label noise {found.noise_variance:.4f}); per term, shrinkage + noise (largest "
        "first):"
    )
    for name, variance in list(found.per_term.items())[:8]:
        print(f"  {name:12s} {variance:.4f}")


if __name__ == "__main__":
    main()
