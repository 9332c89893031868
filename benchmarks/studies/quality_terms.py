"""Which parts of the synthetic label model a trained model learned, and how much noise it adds.

The click logit of ``recsys-dist data synth`` is a sum of known terms: one per id field,
per interacting pair, the user, tags, topics and each numeric field
(``synth.RowGenerator.click_terms``). This script regenerates those terms for the rows of
one evaluated day and regresses the model's logits on them (least squares, with an
intercept). Per term it prints:

- ``coef``: how much of the term the model reproduces (1 = all of it, 0 = none; a
  well-calibrated model of a term it learned only partly shrinks it below 1);
- ``lost``: the logit variance the model misses, ``std**2 * (1 - coef)**2``.

The residual is what the model's logit holds that none of the terms explains. Together
with the lost variance it says where the AUC gap to the oracle comes from.

``--groups`` then splits the residual by what it depends on. For each grouping of the
rows (the id of a field, the user, an interacting pair of ids, a numeric field's bucket
of width 0.25 in ``log1p``) it estimates the part of the residual's variance shared by
rows of the same group: the mean over rows of ``residual * (mean residual of the other
rows of its group)``. It is about 0 for a grouping the residual does not depend on. Rows
alone in their group add nothing, so for fields with many ids seen once on the day it is a
lower bound. Groupings nest (a pair of ids contains each of its ids' shares).

Answered: docs/quality.md (points 1 and 2 of "Where DCN-v2's gap comes from") and the
README: what DCN-v2 misses is the shape of the four pairwise interactions.
``quality_terms(...)`` returns the figures as a :class:`TermFit`.

Usage: ``recsys-dist evaluate ... --out OUT`` on one day of synthetic data, then
``python benchmarks/studies/quality_terms.py OUT/predictions.parquet --seed 11 --day 7
--rows-per-day 500000 [--groups]`` (the data's ``synth`` arguments; ``--day`` counts
from 1).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np
import pyarrow.parquet as pq
from one_pass_bound import numeric_bucket  # this directory; the same buckets

from recsys_dist.data import synth, synth_files, synth_schema
from recsys_dist.data.input_fn import row_id


@dataclasses.dataclass(frozen=True)
class Term:
    """One term of the label model in the regression of the model's logits."""

    name: str
    std: float  # the term's standard deviation over the rows
    coef: float  # how much of it the model reproduces
    lost: float  # std**2 * (1 - coef)**2


@dataclasses.dataclass(frozen=True)
class TermFit:
    """What :func:`quality_terms` found: terms by lost variance, largest first; ``shares``
    (grouping -> residual variance shared within its groups, largest first) with
    ``groups=True``."""

    rows: int
    logit_std: float
    residual_std: float
    residual_variance: float
    terms: list[Term]
    shares: dict[str, float] | None


def quality_terms(
    predictions: str,
    seed: int = 11,
    day: int = 7,
    rows_per_day: int = 500_000,
    label: str = "click",
    groups: bool = False,
) -> TermFit:
    """Regresses the ``logit_LABEL`` column of ``predictions`` (the predictions.parquet of
    ``recsys-dist evaluate`` on day ``day``, from 1, of ``recsys-dist data synth --seed SEED
    --rows-per-day ROWS``) on the label model's terms; raises ``ValueError`` when the file
    is not that day's predictions."""
    table = pq.read_table(predictions)
    column = f"logit_{label}"
    if column not in table.column_names or "row_id" not in table.column_names:
        raise ValueError(
            f"{predictions} has no row_id and {column} columns (columns: "
            f"{', '.join(table.column_names)}); pass the predictions.parquet "
            "that recsys-dist evaluate writes"
        )
    generator = synth.RowGenerator(seed)
    terms: dict[str, list[np.ndarray]] = {}
    keys: dict[str, list[np.ndarray]] = {}
    ids = []
    for index, n in enumerate(synth_files.rows_per_file_of_day(rows_per_day)):
        batch, _, _, _ = generator.clicks(day - 1, index, n)
        for name, effect in generator.click_terms(batch).items():
            terms.setdefault(name, []).append(effect)
        for name, key in (_group_keys(batch) if groups else {}).items():
            keys.setdefault(name, []).append(key)
        ids.append(row_id(index, 0) + np.arange(n, dtype=np.int64))
    row_ids = np.concatenate(ids)
    wanted = table.column("row_id").to_numpy()
    order = np.argsort(row_ids)
    where = np.searchsorted(row_ids, wanted, sorter=order)
    found = order[np.minimum(where, len(order) - 1)]
    if len(wanted) != len(row_ids) or not np.array_equal(row_ids[found], wanted):
        raise ValueError(
            f"the rows of {predictions} are not day {day} of synthetic data "
            f"with seed {seed} and {rows_per_day:,} rows per day"
        )
    names = list(terms)
    x = np.column_stack([np.concatenate(terms[n])[found] for n in names] + [np.ones(len(found))])
    y = table.column(column).to_numpy().astype(np.float64)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ coef
    fitted = [
        Term(name, float(values.std()), float(c), float(values.std() ** 2 * (1.0 - c) ** 2))
        for name, c, values in zip(names, coef, x.T)
    ]
    fitted.sort(key=lambda term: term.lost, reverse=True)
    shares = None
    if groups:
        shares = {
            name: _shared_variance(residual, np.concatenate(parts)[found])
            for name, parts in keys.items()
        }
        shares = dict(sorted(shares.items(), key=lambda kv: kv[1], reverse=True))
    return TermFit(
        len(y), float(y.std()), float(residual.std()), float(residual.var()), fitted, shares
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("predictions", help="predictions.parquet written by recsys-dist evaluate")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--day", type=int, default=7, help="the evaluated day, from 1")
    parser.add_argument("--rows-per-day", type=int, default=500_000)
    parser.add_argument("--label", default="click")
    parser.add_argument(
        "--groups",
        action="store_true",
        help="also split the residual by field id, user, pair and numeric bucket",
    )
    args = parser.parse_args()
    try:
        fit = quality_terms(
            args.predictions, args.seed, args.day, args.rows_per_day, args.label, args.groups
        )
    except ValueError as exc:
        sys.exit(f"error: {exc}")
    print(
        f"{fit.rows:,} rows: model logit std {fit.logit_std:.3f}, residual std "
        f"{fit.residual_std:.3f} (variance {fit.residual_variance:.4f}); lost variance of "
        f"all terms {sum(term.lost for term in fit.terms):.4f}"
    )
    print(f"{'term':12s} {'std':>6s} {'coef':>6s} {'lost':>7s}")
    for term in fit.terms:
        print(f"{term.name:12s} {term.std:6.3f} {term.coef:6.3f} {term.lost:7.4f}")
    if fit.shares is not None:
        print(f"\nresidual variance shared within groups of rows (of {fit.residual_variance:.4f}):")
        print(f"{'grouping':12s} {'shared':>7s}")
        for name, share in fit.shares.items():
            print(f"{name:12s} {share:7.4f}")


def _group_keys(batch) -> dict[str, np.ndarray]:
    """One int64 group key per row for each grouping ``--groups`` reports."""
    keys = {f: batch.categorical[f].astype(np.int64) for f in synth_schema.CATEGORICAL_FIELDS}
    keys["user"] = batch.user_id.astype(np.int64)
    for f, g in synth.CLICK_PAIR_SIGMAS:
        keys[f"{f} x {g}"] = keys[f] * (1 << 33) + keys[g]  # ids are < 2**33
    for f in synth_schema.NUMERIC_FIELDS:
        keys[f"num {f}"] = numeric_bucket(batch.numeric[f])
    return keys


def _shared_variance(residual: np.ndarray, key: np.ndarray) -> float:
    """Mean over rows of residual times the mean residual of the other rows in its group."""
    _, group, size = np.unique(key, return_inverse=True, return_counts=True)
    total = np.bincount(group, weights=residual)[group]
    others = size[group] - 1
    leave_one_out = np.where(others > 0, (total - residual) / np.maximum(others, 1), 0.0)
    return float(np.mean(residual * leave_one_out))


if __name__ == "__main__":
    main()
