"""Input benchmark: the worker input function against pyarrow, on the same files, in one run.

Measures rows/s of

  (a) the worker-side tf.data input function with every transform of the demo feature
      config (hashing, vocab-free lookups, log1p, bucketize, multi-valued splits,
      crosses, label checks), batched, as one worker runs it (one process, all units);
  (b) the same, reading only (no transforms), to show where the time goes;
  (c) ``pyarrow.parquet.read_table(..., use_threads=False)`` of the same columns.

and prints the ratio a/c (target: >= 0.5). (a) is run with ``read_parallelism`` 1 and
with the configured default, since tf.data uses several threads on a worker while
(c) uses one; both ratios are printed.

Usage: ``python benchmarks/input_bench.py [--rows 1000000] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import tempfile
import time

import recsys_dist  # noqa: F401  sets TF env defaults before TensorFlow loads

import pyarrow.parquet as pq  # noqa: E402
import tensorflow as tf  # noqa: E402

from recsys_dist.config import load_config  # noqa: E402
from recsys_dist.data.input_fn import InputPipeline, prepare_input  # noqa: E402
from recsys_dist.data.synth import synthesize  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def best_rate(run, rows: int, repeats: int) -> float:
    """Best rows/s over ``repeats`` timed runs, after one untimed warm-up run."""
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return rows / best


def input_fn_rate(pipeline: InputPipeline, parallelism: int, repeats: int,
                  transforms: bool, columns: list[str] | None = None) -> float:
    spec = dataclasses.replace(pipeline.spec, read_parallelism=parallelism)
    pipeline = dataclasses.replace(pipeline, spec=spec)
    if not transforms:
        pipeline = dataclasses.replace(pipeline, transform=_ReadOnly(pipeline.transform, columns))
    dataset = pipeline.dataset_fn(training=False, worker_index=0)()

    def run():
        for _ in dataset:
            pass

    return best_rate(run, pipeline.plan.total_rows, repeats)


class _ReadOnly:
    """Stands in for the transform: passes raw columns through (for the breakdown only)."""

    def __init__(self, transform, columns: list[str] | None = None):
        self.columns = columns or transform.columns
        self.column_dtypes = transform.column_dtypes

    def __call__(self, raw, source, first_row):
        rows = tf.shape(next(iter(raw.values())))[0]
        return dict(raw), {}, tf.ones([rows], tf.float32)


def pyarrow_rate(files: list[str], columns: list[str], rows: int, repeats: int) -> float:
    def run():
        for path in files:
            pq.read_table(path, columns=columns, use_threads=False)

    return best_rate(run, rows, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of synthetic data")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per measurement")
    parser.add_argument("--data", help="existing synthetic data (default: generate in a temp dir)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="input_bench_") as tmp:
        data = args.data
        if data is None:
            data = tmp
            synthesize(tmp, days=1, rows_per_day=args.rows, seed=1)
        config = load_config(ROOT / "configs" / "demo.yaml")
        pipeline = prepare_input(config, None, num_workers=1, data_path=data).single_worker()
        plan, columns = pipeline.plan, pipeline.transform.columns
        rows = plan.total_rows
        print(f"data: {len(plan.files)} files, {rows:,} rows, {len(plan.units)} units "
              f"(row groups), {len(columns)} columns read")
        default_parallelism = config.input.read_parallelism
        arrow = pyarrow_rate(list(plan.files), columns, rows, args.repeats)
        results = {
            "input fn, read only, parallelism 1": input_fn_rate(pipeline, 1, args.repeats, False),
            "input fn, all transforms, parallelism 1": input_fn_rate(pipeline, 1, args.repeats,
                                                                    True),
            f"input fn, all transforms, parallelism {default_parallelism}":
                input_fn_rate(pipeline, default_parallelism, args.repeats, True),
        }
        by_type = {}
        for kind in ("float32", "int64", "string"):
            subset = [c for c in columns if pipeline.transform.column_dtypes[c] == kind]
            by_type[kind] = (len(subset),
                             input_fn_rate(pipeline, 1, args.repeats, False, subset),
                             pyarrow_rate(list(plan.files), subset, rows, args.repeats))
    print("where the read time goes (read only, parallelism 1), per column type:")
    for kind, (count, tf_rate, pa_rate) in by_type.items():
        print(f"  {count:2d} {kind:7s} columns: tensorflow-io {tf_rate * count / 1e6:6.1f}M values/s, "
              f"pyarrow {pa_rate * count / 1e6:6.1f}M values/s (ratio {tf_rate / pa_rate:.2f})")
    print(f"{'pyarrow read_table(use_threads=False)':45s} {arrow:>12,.0f} rows/s  (baseline)")
    for name, rate in results.items():
        print(f"{name:45s} {rate:>12,.0f} rows/s  ratio {rate / arrow:.2f}")
    headline = results[f"input fn, all transforms, parallelism {default_parallelism}"] / arrow
    print(f"ratio (input fn with all transforms, default parallelism / pyarrow): {headline:.2f} "
          f"(target >= 0.5: {'met' if headline >= 0.5 else 'NOT met'})")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
