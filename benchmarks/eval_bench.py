"""Evaluation speed against training speed, on the same data, in one run.

It writes synthetic data, trains the demo model (``configs/demo.yaml``: DCN-v2 on a
local cluster of 2 workers + 2 parameter servers) for one pass over the training days,
then runs ``recsys-dist evaluate`` on exactly those days with the trained checkpoint.
It prints training examples/s (whole run, and after the first closure came back),
evaluation rows/s (scoring on the cluster plus the exact metrics on the coordinator,
first closure's tracing included), and their ratio.

Usage: ``python benchmarks/eval_bench.py [--rows-per-day 200000] [--days 2]``
"""

from __future__ import annotations

import argparse
import json
import pathlib
import tempfile

from common import DEMO_CONFIG  # this folder
from common import cli as run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows-per-day", type=int, default=200_000)
    parser.add_argument("--days", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data, model = f"{tmp}/data", f"{tmp}/model"
        run(
            "data",
            "synth",
            "--out",
            data,
            "--days",
            str(args.days),
            "--rows-per-day",
            str(args.rows_per_day),
            "--seed",
            "3",
            "--quiet",
        )
        dates = f"2026-01-01..2026-01-{args.days:02d}"
        config = DEMO_CONFIG
        local = ("--set", "cluster.mode=local")  # as measured; the demo runs in_process
        run(
            "train",
            "--config",
            config,
            "--data",
            data,
            "--model-dir",
            model,
            "--no-eval",
            "--set",
            f"data.train={{dates: '{dates}'}}",
            *local,
        )
        trained = json.loads(pathlib.Path(model, "train_result.json").read_text())
        run(
            "evaluate",
            "--config",
            config,
            "--model-dir",
            model,
            "--set",
            f"data.path={data}",
            "--dates",
            dates,
            "--out",
            f"{tmp}/eval",
            "--quiet",
            *local,
        )
        evaluated = json.loads(pathlib.Path(tmp, "eval", "metrics.json").read_text())
    rows = evaluated["rows"]
    train_rate = trained["examples_per_second"]
    warm_rate = trained["warm_examples_per_second"]
    eval_rate = evaluated["rows_per_second"]
    print(f"rows: {rows:,} (the same {args.days} days for both)")
    print(f"training:   {train_rate:10,.0f} examples/s whole run, {warm_rate:,.0f} after warm-up")
    print(f"evaluation: {eval_rate:10,.0f} rows/s (scoring + exact metrics)")
    print(f"ratio evaluation / training (after warm-up): {eval_rate / warm_rate:.2f}")
    print(f"ratio evaluation / training (whole run):     {eval_rate / train_rate:.2f}")


if __name__ == "__main__":
    main()
