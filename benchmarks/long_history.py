"""Long histories: SIM's hard search over 1,000 items against DIN over the newest 50.

Data (``--data``):

- ``synthetic`` (default): ``recsys-dist data synth --dataset behaviour --history-length
  N`` (default 1,000): each history holds 0..N items and the click depends on the matches
  of the candidate's category among all of them, so the newest 50 tell less than the
  whole. Three days, train on two, evaluate on the third, with
  features/behaviour_synth.yaml (the category sequence ``hist_cate_id``);
- ``ml1m``: the MovieLens-1M behaviour set (``--ml1m DIR``, or built from ``--raw RAW``;
  see sequence_quality.py), histories of up to 1,000 movies, with configs/ml1m_din.yaml
  (the genre sequence ``hist_genre_id``; days 1-8 train, day 9 stops, day 10 evaluates).

Each side sets its sequences' ``max_length``:

- ``din50``: ``din`` over the 50 newest items (``max_length: 50``);
- ``search``: ``din`` with ``search_by`` the category (genre) sequence over ``max_length:
  N``: of each history, the newest ``search_top_k`` (50) items of the candidate's
  category, and nothing else;
- ``sim``: SIM as published (Pi et al., 2020), short-term and long-term interest side by
  side: the 50 newest items (one history) and, read from the same columns as a second
  history (features ``long_*`` with ``column:``), the hard search's 50 over N; ``din``
  attends over each with a unit of its own;
- ``din_all`` (not run unless asked): ``din`` over all N items.

Each side trains with ``recsys-dist train`` (configs/amazon_din.yaml's optimizers, 2
passes, 2 workers and 2 parameter servers in-process) once per seed, the sides of a seed
interleaved; every run prints its AUC and examples/s after warm-up. The end: each side's
mean AUC with its standard error, and for ``search`` and ``sim`` the paired gap over
``din50``, the speed ratio of the medians, and the target line (>= ``din50`` in AUC at
>= 0.5 of its speed).

Usage: ``python benchmarks/long_history.py [--data synthetic|ml1m] [--seeds 0,1,2]
[--sides din50,search,sim] [--history-length 1000] [--rows-per-day 40000] [--ml1m DIR --raw RAW]``
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import statistics
import tempfile

import yaml
from common import ROOT, best_median, interleaved  # this folder
from sequence_quality import (
    ML1M_FEATURES,
    SYNTHETIC_FEATURES,
    chosen_sides,
    mean_se,
    prepare_data,
    round_printer,
    train_and_evaluate,
)

SIDES = ("din50", "search", "sim", "din_all")
TOP_K = 50


#: ``--data`` -> (its feature config, the sequence the hard search matches by)
DATA = {
    "synthetic": (SYNTHETIC_FEATURES, "hist_cate_id"),
    "ml1m": (ML1M_FEATURES, "hist_genre_id"),
}


def features_with_length(features: pathlib.Path, out: pathlib.Path, length: int) -> str:
    """A copy of the feature config ``features`` whose sequences keep ``length`` items."""
    doc = yaml.safe_load(features.read_text())
    for spec in doc["features"].values():
        if spec.get("kind") == "sequence":
            spec["max_length"] = length
    path = out / f"{features.stem}_{length}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def with_long_history(features: pathlib.Path, out: pathlib.Path, longest: int) -> str:
    """A copy of the feature config ``features`` whose sequences keep the 50 newest items
    and, as a second history ``long_<name>`` read from the same columns, ``longest``."""
    doc = yaml.safe_load(features.read_text())
    sequences = {n: s for n, s in doc["features"].items() if s.get("kind") == "sequence"}
    for name, spec in sequences.items():
        spec["max_length"] = 50
        long = {**spec, "column": spec.get("column", name), "max_length": longest}
        if "side_of" in spec:
            long["side_of"] = f"long_{spec['side_of']}"
        doc["features"][f"long_{name}"] = long
    path = out / f"{features.stem}_50_and_{longest}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def side_settings(side: str, scratch: pathlib.Path, longest: int, data: str) -> list[str]:
    """``--set`` values of a side."""
    features, search_by = DATA[data]
    if side == "din50":
        return [f"features={features_with_length(features, scratch, 50)}"]
    if side == "sim":
        return [
            f"features={with_long_history(features, scratch, longest)}",
            f"model.params.search_by=long_{search_by}",
            f"model.params.search_top_k={TOP_K}",
        ]
    settings = [f"features={features_with_length(features, scratch, longest)}"]
    if side == "search":
        settings += [f"model.params.search_by={search_by}", f"model.params.search_top_k={TOP_K}"]
    return settings


def target_line(side: str, runs: list[dict], din50: list[dict]) -> str:
    """``side`` against ``din50``: the paired AUC gaps, the speed ratio of the medians and
    the target (>= din50 in AUC at >= 0.5 of its speed)."""
    gaps = [r["auc"] - d["auc"] for r, d in zip(runs, din50)]
    se = statistics.stdev(gaps) / len(gaps) ** 0.5 if len(gaps) > 1 else float("nan")
    speed = statistics.median(r["ex_per_s"] for r in runs) / statistics.median(
        r["ex_per_s"] for r in din50
    )
    gap = statistics.mean(gaps)
    met = "met" if gap >= 0 and speed >= 0.5 else "not met"
    return (
        f"{side} - din50 per seed: {', '.join(f'{g:+.4f}' for g in gaps)}; mean {gap:+.4f} "
        f"(se {se:.4f}); speed {speed:.2f}x din50 (medians)\n"
        f"target long histories ({side} >= din50 in AUC at >= 0.5x its speed): {met} "
        f"(AUC {gap:+.4f}, speed {speed:.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=sorted(DATA), default="synthetic")
    parser.add_argument("--ml1m", help="the converted MovieLens-1M set")
    parser.add_argument("--raw", help="ratings.dat and movies.dat when --ml1m is not built")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--sides", default="din50,search,sim")
    parser.add_argument("--history-length", type=int, default=1000)
    parser.add_argument("--rows-per-day", type=int, default=40_000)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    sides = chosen_sides(args.sides, SIDES)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="long_history_"))
    try:
        data, config, extra = prepare_data(
            args.data, scratch, args.ml1m, args.raw, args.rows_per_day, args.history_length
        )
        common = ["model.name=din", *extra]  # each side's features= comes after, and wins
        shape = (
            f"{args.rows_per_day:,} rows a day, histories of 0..{args.history_length:,} items"
            if args.data == "synthetic"
            else f"{data}, histories of up to {args.history_length:,} items"
        )
        print(
            f"data {args.data}: {shape}; config {pathlib.Path(config).relative_to(ROOT)}; "
            f"seeds {seeds}; sides {sides}"
        )
        results: dict[str, list[dict]] = {side: [] for side in sides}
        for seed in seeds:
            runs = {
                side: (
                    lambda side=side, seed=seed: train_and_evaluate(
                        config,
                        data,
                        scratch / side,
                        [*common, *side_settings(side, scratch, args.history_length, args.data)],
                        seed,
                    )
                )
                for side in sides
            }
            for side, found in interleaved(runs, 1, show=round_printer(seed)).items():
                results[side] += found
        print()
        for side in sides:
            best, median = best_median(r["ex_per_s"] for r in results[side])
            aucs = [r["auc"] for r in results[side]]
            print(f"{side:7s} AUC mean {mean_se(aucs)}; ex/s best {best:,.0f} median {median:,.0f}")
        for side in ("search", "sim"):
            if {"din50", side} <= set(sides):
                print(target_line(side, results[side], results["din50"]))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
