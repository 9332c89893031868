"""Strategies side by side: examples/s and held-out AUC of the demo model under each.

The demo's training command (``configs/demo.yaml``: DCN-v2, its tables fit in memory) on
the same synthetic data, once per strategy per round, interleaved in alternating order.
The ``mirrored`` strategies refuse dynamic tables, so every strategy runs the demo's
feature config with its dynamic user table made hashed, with the rows the dynamic table
holds on the demo's 2 parameter servers (``common.hashed_features``):

- ``single``: ``cluster.strategy: mirrored`` with one replica: one process, one device,
  synchronous (the baseline);
- ``mirrored``: ``cluster.strategy: mirrored`` with 2 replicas (2 logical CPU devices of
  one process: there is no GPU here), the global batch split between them;
- ``parameter_server``: the default, 2 workers + 2 parameter servers in the command's
  process (``cluster.mode: in_process``, the demo's), asynchronous;
- ``multi_worker_mirrored``: 2 worker processes on 127.0.0.1 (``cluster.mode: local``)
  exchanging gradients with collective ops over gRPC, synchronous, the global batch split
  between them.

Each run trains ``--epochs`` passes over the first two days and evaluates on the third.
It prints every run (examples/s after warm-up, over the whole run, held-out AUC), then
per strategy the best and median rate, the ratio to ``single`` (bests and medians) and
the AUC difference to ``single`` (medians; the issue's bar is within 0.002).

Usage: ``python benchmarks/strategy_bench.py [--rounds 2] [--rows-per-day 200000]
[--strategies mirrored,multi_worker_mirrored]``
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import statistics
import tempfile

import yaml
from common import (  # this folder
    DEMO_CONFIG,
    best_median,
    cli,
    hashed_features,
    interleaved,
    ratios,
)

STRATEGIES = {
    "single": ("--set", "cluster.strategy=mirrored", "--set", "cluster.workers=1"),
    "mirrored": ("--set", "cluster.strategy=mirrored", "--set", "cluster.workers=2"),
    "parameter_server": (
        "--set",
        "cluster.strategy=parameter_server",
        "--set",
        "cluster.workers=2",
        "--set",
        "cluster.ps=2",
    ),
    "multi_worker_mirrored": (
        "--set",
        "cluster.strategy=multi_worker_mirrored",
        "--set",
        "cluster.mode=local",
        "--set",
        "cluster.workers=2",
    ),
}


def train_once(
    data: str, features: str, model_dir: pathlib.Path, epochs: int, extra: tuple[str, ...]
) -> dict[str, float]:
    """One training run of the demo with evaluation; its rates and held-out AUC."""
    cli(
        "train",
        "--config",
        DEMO_CONFIG,
        "--data",
        data,
        "--model-dir",
        str(model_dir),
        "--set",
        f"features={features}",
        "--set",
        f"train.epochs={epochs}",
        *extra,
    )
    result = json.loads((model_dir / "train_result.json").read_text())
    figures = {
        "warm ex/s": result["warm_examples_per_second"],
        "ex/s": result["examples_per_second"],
        "auc": result["eval"]["labels"]["click"]["auc"],
    }
    shutil.rmtree(model_dir, ignore_errors=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rows-per-day", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument(
        "--strategies",
        default=",".join(STRATEGIES),
        help="comma-separated, from: "
        + ", ".join(STRATEGIES)
        + " (single is always run: it is the baseline)",
    )
    args = parser.parse_args()
    chosen = ["single"] + [s for s in args.strategies.split(",") if s and s != "single"]
    unknown = [s for s in chosen if s not in STRATEGIES]
    if unknown:
        parser.error(
            f"--strategies: unknown {', '.join(unknown)}; choose from " + ", ".join(STRATEGIES)
        )
    work = pathlib.Path(tempfile.mkdtemp(prefix="strategy_bench_"))
    try:
        data = str(work / "data")
        cli(
            "data",
            "synth",
            "--out",
            data,
            "--days",
            "3",
            "--rows-per-day",
            str(args.rows_per_day),
            "--seed",
            "7",
            "--quiet",
        )

        demo = yaml.safe_load(pathlib.Path(DEMO_CONFIG).read_text())
        features = hashed_features(
            str(pathlib.Path(DEMO_CONFIG).parent / demo["features"]), work, demo["cluster"]["ps"]
        )

        def run(name: str):
            return lambda: train_once(
                data, features, work / f"run-{name}", args.epochs, STRATEGIES[name]
            )

        def show(round_: int, done: dict) -> None:
            name, f = list(done.items())[-1]
            print(
                f"{round_:>5} {name:<21} {f['warm ex/s']:>11,.0f} {f['ex/s']:>9,.0f} "
                f"{f['auc']:>8.4f}",
                flush=True,
            )

        print(f"{'round':>5} {'strategy':<21} {'warm ex/s':>11} {'ex/s':>9} {'auc':>8}")
        results = interleaved(
            {name: run(name) for name in chosen}, args.rounds, alternate=True, show=show
        )
        print()
        print(
            f"{'strategy':<21} {'best ex/s':>10} {'median':>9} {'ratio best':>11} "
            f"{'median':>7} {'auc median':>11} {'vs single':>10}"
        )
        base = [r["warm ex/s"] for r in results["single"]]
        base_auc = statistics.median(r["auc"] for r in results["single"])
        for name, runs in results.items():
            rates = [r["warm ex/s"] for r in runs]
            best, median = best_median(rates)
            ratio_best, ratio_median = ratios(rates, base)
            auc = statistics.median(r["auc"] for r in runs)
            print(
                f"{name:<21} {best:>10,.0f} {median:>9,.0f} {ratio_best:>11.2f} "
                f"{ratio_median:>7.2f} {auc:>11.4f} {auc - base_auc:>+10.4f}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
