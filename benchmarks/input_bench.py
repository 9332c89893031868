"""Input benchmark: our Parquet op and the worker input pipeline against pyarrow, same files.

Three comparisons, each measured in interleaved rounds in one run (every round printed,
then each side's best and median, and their ratios):

  1. raw read: the ``ParquetReadRows`` op reading whole files into tensors, against
     ``pyarrow.parquet.read_table(use_threads=False)`` of the same columns (bar: 0.9);
  2. the whole worker input pipeline of the demo config (read, every transform, batches)
     as one worker runs it, against the same pyarrow read (bar: 0.7);
  3. the raw read from S3 (a moto server this script starts on 127.0.0.1), against
     pyarrow's own S3 filesystem reading the same objects;
  4. training's work items read as training reads them (every m-th row of a unit),
     against the same number of contiguous items, with ``--item-steps`` steps of the
     demo's batch each (items smaller than the row groups, as on data with large ones).

Rates are printed by wall clock and by this process's CPU time (all threads; the
pipeline runs ``read_parallelism`` units at once, pyarrow one thread). The last line is
``ratio X``: the whole pipeline's best-of-rounds wall-clock ratio (2).

Usage: ``python benchmarks/input_bench.py [--rows 1000000] [--rounds 5] [--no-s3]
[--item-steps 2]``
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time
from collections.abc import Callable

import pyarrow.parquet as pq  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import (  # noqa: E402  this folder
    DEMO_CONFIG,
    best_median,
    interleaved,
    ratios,
    start_moto,
)

import recsys_dist  # noqa: F401  sets TF env defaults before TensorFlow loads
from recsys_dist import ops  # noqa: E402
from recsys_dist.config import load_config  # noqa: E402
from recsys_dist.data.input_fn import prepare_input  # noqa: E402
from recsys_dist.data.schema_check import split_read_dtype  # noqa: E402
from recsys_dist.data.synth_files import synthesize  # noqa: E402


def measured(
    sides: dict[str, Callable[[], None]], rows: int, rounds: int
) -> dict[str, dict[str, list[float]]]:
    """Rows/s of each side per round, sides alternating within a round (one warm-up),
    by wall clock and by this process's CPU time (all its threads): on a shared machine
    the CPU-time figure moves less with what else runs."""
    for run in sides.values():
        run()

    def timed(run: Callable[[], None]) -> Callable[[], tuple[float, float]]:
        def measure() -> tuple[float, float]:
            wall, cpu = time.perf_counter(), time.process_time()
            run()
            return rows / (time.perf_counter() - wall), rows / (time.process_time() - cpu)

        return measure

    def show(round_: int, done: dict[str, tuple[float, float]]) -> None:
        if len(done) == len(sides):
            print(
                f"  round {round_}: "
                + " | ".join(
                    f"{name} {wall:>11,.0f} (cpu {cpu:>11,.0f})"
                    for name, (wall, cpu) in done.items()
                )
                + " rows/s",
                flush=True,
            )

    results = interleaved({name: timed(run) for name, run in sides.items()}, rounds, show=show)
    return {
        name: {"wall": [wall for wall, _ in values], "cpu": [cpu for _, cpu in values]}
        for name, values in results.items()
    }


def report(
    title: str, rates: dict[str, dict[str, list[float]]], baseline: str, bar: float | None
) -> float:
    """Prints best and median per side and each ratio to the baseline, by wall clock
    and by CPU time; returns the best wall-clock ratio of the first other side."""
    print(f"{title}:")
    first = None
    for clock in ("wall", "cpu"):
        base = rates[baseline][clock]
        for name, by_clock in rates.items():
            best, median = best_median(by_clock[clock])
            line = f"  {clock:4s} {name:28s} best {best:>11,.0f}  median {median:>11,.0f} rows/s"
            if name != baseline:
                ratio_best, ratio_median = ratios(by_clock[clock], base)
                if clock == "wall" and first is None:
                    first = ratio_best
                line += f"  ratio best {ratio_best:.2f}, median {ratio_median:.2f}"
                if bar is not None:
                    line += f" (bar {bar}: {'met' if ratio_best >= bar else 'NOT met'})"
            print(line)
    return first


def op_reader(
    files: list[str], dtypes: dict, ragged: frozenset, file_rows: list[int]
) -> Callable[[], None]:
    """Reads every file whole through the op (tensors stay in TensorFlow)."""

    @tf.function(input_signature=[tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.int64)])
    def read(path, rows):
        columns = ops.read_rows(path, 0, rows, dtypes, ragged)
        return tf.add_n([tf.cast(tf.size(c.values), tf.int64) for c in columns.values()])

    def run():
        for path, rows in zip(files, file_rows):
            read(tf.constant(path), tf.constant(rows, tf.int64))

    return run


def pyarrow_reader(files: list[str], columns: list[str], filesystem=None) -> Callable[[], None]:
    def run():
        for path in files:
            pq.read_table(path, columns=columns, use_threads=False, filesystem=filesystem)

    return run


def pipeline_reader(pipeline) -> Callable[[], None]:
    """Consumes every batch in-graph, as a worker's training step does (iterating in
    Python would add the cost of handing each batch to Python, which no worker pays)."""
    dataset = pipeline.local_dataset(training=False)

    @tf.function
    def consume():
        return dataset.reduce(
            tf.constant(0, tf.int64), lambda count, batch: count + tf.size(batch["row"], tf.int64)
        )

    def run():
        consume()

    return run


def items_reader(pipeline, items) -> Callable[[], None]:
    """Reads every item with ``item_dataset`` as a training closure does (rows shuffled,
    batches), consuming the batches in-graph."""

    @tf.function(input_signature=[tf.TensorSpec([], tf.int64)] * 4)
    def read(file_index, start, stop, stride):
        dataset = pipeline.item_dataset(file_index, start, stop, training=True, stride=stride)
        return dataset.reduce(
            tf.constant(0, tf.int64), lambda count, batch: count + tf.size(batch["row"], tf.int64)
        )

    arguments = [
        tuple(tf.constant(v, tf.int64) for v in (i.file, i.start, i.stop, i.stride)) for i in items
    ]

    def run():
        for args in arguments:
            read(*args)

    return run


def s3_comparison(files: list[str], dtypes, ragged, file_rows, columns, rows, rounds) -> None:
    import boto3
    import pyarrow.fs

    server, port = start_moto()
    try:
        client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
        client.create_bucket(Bucket="bench")
        keys = []
        for path in files:
            key = "input/" + pathlib.Path(path).name
            client.upload_file(path, "bench", key)
            keys.append(key)
        s3 = pyarrow.fs.S3FileSystem(
            endpoint_override=f"127.0.0.1:{port}",
            scheme="http",
            access_key="bench",
            secret_key="bench",
            region="us-east-1",
        )
        rates = measured(
            {
                "pyarrow S3 read_table": pyarrow_reader([f"bench/{k}" for k in keys], columns, s3),
                "op S3 read": op_reader(
                    [f"s3://bench/{k}" for k in keys], dtypes, ragged, file_rows
                ),
            },
            rows,
            rounds,
        )
        report("3. raw read from moto's S3", rates, "pyarrow S3 read_table", None)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of synthetic data")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--data", help="existing synthetic data (default: generate in a temp dir)")
    parser.add_argument("--no-s3", action="store_true", help="skip the S3 comparison")
    parser.add_argument(
        "--item-steps", type=int, default=2, help="steps per training item in comparison 4"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="input_bench_") as tmp:
        data = args.data
        if data is None:
            data = tmp
            synthesize(tmp, days=1, rows_per_day=args.rows, seed=1)
        config = load_config(DEMO_CONFIG)
        pipeline = prepare_input(config.with_data_path(data), None, num_workers=1)
        plan, columns = pipeline.plan, pipeline.transform.columns
        rows = plan.total_rows
        read = {c: split_read_dtype(pipeline.transform.column_dtypes[c]) for c in columns}
        dtypes = {c: tf.as_dtype(d) for c, (d, _) in read.items()}
        ragged = frozenset(c for c, (_, is_list) in read.items() if is_list)
        files, file_rows = list(plan.files), list(plan.file_rows)
        print(
            f"data: {len(files)} files, {rows:,} rows, {len(plan.units)} row groups, "
            f"{len(columns)} columns read ({len(ragged)} list); input.read_parallelism "
            f"{pipeline.spec.read_parallelism}, batch {pipeline.spec.batch_size}; "
            f"{os.cpu_count()} cores",
            flush=True,
        )
        baseline = "pyarrow read_table"
        raw = measured(
            {
                baseline: pyarrow_reader(files, columns),
                "op raw read": op_reader(files, dtypes, ragged, file_rows),
            },
            rows,
            args.rounds,
        )
        whole = measured(
            {
                baseline: pyarrow_reader(files, columns),
                "whole input pipeline": pipeline_reader(pipeline),
            },
            rows,
            args.rounds,
        )
        if not args.no_s3:
            s3_comparison(files, dtypes, ragged, file_rows, columns, rows, args.rounds)
        strided = pipeline.training_items(args.item_steps)
        contiguous = pipeline.contiguous_training_items(args.item_steps)
        print(
            f"items: {len(strided)} of up to {max(i.rows for i in strided):,} rows, "
            f"stride up to {max(i.stride for i in strided)}",
            flush=True,
        )
        items = measured(
            {
                "contiguous items": items_reader(pipeline, contiguous),
                "strided items": items_reader(pipeline, strided),
            },
            rows,
            args.rounds,
        )
        report("1. raw read, local disk (pyarrow use_threads=False)", raw, baseline, 0.9)
        ratio = report("2. whole worker input pipeline, every transform", whole, baseline, 0.7)
        report("4. training items, strided against contiguous", items, "contiguous items", None)
    print(f"ratio {ratio:.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
