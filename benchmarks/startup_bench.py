"""Start-up: how long the demo's ``train`` takes from command start to its first step.

It runs the demo's training command (``configs/demo.yaml`` on the demo's synthetic data,
200 steps, no evaluation) as a user does, once per cluster mode per round, interleaved:

- ``local``: one server process per worker and parameter server (the baseline);
- ``in_process``: the servers inside the command's own process (the demo's mode).

Every line the command prints is time-stamped from the moment it was started, and the
phases are read off those lines:

- ``plan``: Python, TensorFlow and the package imported, config read, Parquet footers
  planned (the ``train ...`` line);
- ``cluster``: servers up and connected (the ``cluster ...`` line);
- ``first step``: the end of the first training step, as ``train_result.json`` records it
  (``first_step_at``, the Unix time at which a worker had the first step's gradients):
  building the model on the parameter servers, tracing the step, the workers' first
  input and that step;
- ``first line``: the first progress line, printed when the first work item (one row
  group, 49 steps of the demo on each of the two workers) has trained, so it also counts
  about a hundred steps of training;
- ``total``: the command's exit, after its 200 steps and a checkpoint.

It prints every round, then each side's best and median and the ratio in_process /
local (below 1: in_process is faster). The target (at most half) is on ``first step``.

Usage: ``python benchmarks/startup_bench.py [--rounds 3] [--data DIR]``
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from common import CLI, DEMO_CONFIG, best_median, cli, interleaved, ratios  # this folder

MODES = ("local", "in_process")
PHASES = {"plan": "train ", "cluster": "cluster ", "first line": "step "}


def timed_run(config: str, data: str, mode: str, model_dir: str) -> dict[str, float]:
    """Seconds from start to each phase's first line, and to the exit."""
    command = [
        CLI,
        "train",
        "--config",
        config,
        "--data",
        data,
        "--model-dir",
        model_dir,
        "--no-eval",
        "--set",
        "train.max_steps=200",
        "--set",
        f"cluster.mode={mode}",
        "--set",
        "train.log_every_seconds=0",
    ]
    start, started_at = time.perf_counter(), time.time()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict[str, float] = {}
    lines = []
    for line in process.stdout:
        lines.append(line)
        for phase, prefix in PHASES.items():
            if phase not in seen and line.startswith(prefix):
                seen[phase] = time.perf_counter() - start
    if process.wait() != 0 or len(seen) != len(PHASES):
        sys.exit(f"error: {mode} run failed (exit {process.returncode}):\n" + "".join(lines[-20:]))
    seen["total"] = time.perf_counter() - start
    result = json.loads((pathlib.Path(model_dir) / "train_result.json").read_text())
    seen["first step"] = result["first_step_at"] - started_at
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data", help="demo data (default: synthesized as make demo does)")
    args = parser.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="startup_bench_"))
    try:
        data = args.data or str(work / "data")
        if not args.data:
            cli(
                "data",
                "synth",
                "--out",
                data,
                "--days",
                "3",
                "--rows-per-day",
                "200000",
                "--seed",
                "7",
                "--quiet",
            )
        columns = ["plan", "cluster", "first step", "first line", "total"]

        def run(mode: str) -> Callable[[], dict[str, float]]:
            def timed() -> dict[str, float]:
                model_dir = str(work / f"run-{mode}")
                seen = timed_run(DEMO_CONFIG, data, mode, model_dir)
                shutil.rmtree(model_dir, ignore_errors=True)
                return seen

            return timed

        def show(round_: int, done: dict[str, dict[str, float]]) -> None:
            mode, seen = list(done.items())[-1]
            print(
                f"{round_:>5} {mode:<10} " + " ".join(f"{seen[c]:>9.1f}s" for c in columns),
                flush=True,
            )

        print(f"{'round':>5} {'mode':<10} " + " ".join(f"{c:>10}" for c in columns))
        results = interleaved(
            {mode: run(mode) for mode in MODES}, args.rounds, alternate=True, show=show
        )
        print()

        def phase(mode: str, column: str) -> list[float]:
            return [seen[column] for seen in results[mode]]

        for stat, index in (("best", 0), ("median", 1)):
            for mode in MODES:
                figures = [best_median(phase(mode, c), min)[index] for c in columns]
                print(f"{stat:>6} {mode:<10} " + " ".join(f"{v:>9.1f}s" for v in figures))
            figures = [
                ratios(phase("in_process", c), phase("local", c), min)[index] for c in columns
            ]
            print(
                f"{stat:>6} {'ratio':<10} "
                + " ".join(f"{v:>10.2f}" for v in figures)
                + "  (in_process / local)"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
