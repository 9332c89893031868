"""The sparse-update kernels every training step runs, against their plain-op equivalents.

TensorFlow 2.20 and 2.21 made two CPU kernels 3 to 15 times slower (docs/stack.md):
``ResourceSparseApplyAdagradV2``, which updates the embedding rows a batch touched, and
``UnsortedSegmentSum``, which sums duplicate ids and multi-valued features. This prints
each kernel's time next to the same computation written with gathers, scatters and
sorted segment sums, in interleaved rounds (every round, then best and median). A fused
kernel should beat its plain-op form: a ratio above 1 on a new TensorFlow release means
the slowdown is back, and that release should not be pinned.

The last line is ``ratio X``: the worse of the two kernels' median ratios (bar: at most 1;
docs/stack.md cites 0.69 on TensorFlow 2.19.1 and 1.56 on 2.20.0, 3 rounds each).

Usage: ``python benchmarks/sparse_kernels.py [--rounds 5] [--threads 1]``
(``--threads``: intra-op threads; the local cluster gives each of its tasks 1 on 2 cores)
"""

from __future__ import annotations

import argparse
import functools
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402
from common import best_median, interleaved, ratios  # noqa: E402  this folder

ROWS, DIM, TOUCHED, CALLS = 200_000, 16, 13_000, 200


def _per_call_us(function) -> float:
    start = time.perf_counter()
    for _ in range(CALLS):
        function()
    return 1e6 * (time.perf_counter() - start) / CALLS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads")
    args = parser.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    table = tf.Variable(tf.random.normal([ROWS, DIM]))
    accum = tf.Variable(tf.fill([ROWS, DIM], 0.1))
    ids = tf.unique(tf.random.uniform([TOUCHED], 0, ROWS, tf.int64, seed=1))[0]
    grad = tf.random.normal([tf.shape(ids)[0], DIM], seed=2)
    values = tf.random.normal([TOUCHED, DIM], seed=3)
    segments = tf.random.uniform([TOUCHED], 0, 6_000, tf.int64, seed=4)

    @tf.function
    def adagrad_fused():
        tf.raw_ops.ResourceSparseApplyAdagradV2(
            var=table.handle, accum=accum.handle, lr=0.01, epsilon=1e-7, grad=grad, indices=ids
        )

    @tf.function
    def adagrad_plain():
        summed = tf.gather(accum, ids) + grad * grad
        accum.scatter_update(tf.IndexedSlices(summed, ids))
        table.scatter_sub(tf.IndexedSlices(0.01 * grad / (tf.sqrt(summed) + 1e-7), ids))

    @tf.function
    def segment_sum_unsorted():
        return tf.math.unsorted_segment_sum(values, segments, 6_000)

    @tf.function
    def segment_sum_sorted():
        order = tf.argsort(segments)
        return tf.math.segment_sum(tf.gather(values, order), tf.gather(segments, order))

    pairs = {
        "sparse Adagrad update": (adagrad_fused, adagrad_plain),
        "unsorted segment sum": (segment_sum_unsorted, segment_sum_sorted),
    }
    for fused, plain in pairs.values():
        fused(), plain()  # trace
    print(
        f"TensorFlow {tf.__version__}, {args.threads} intra-op thread(s), {TOUCHED:,} ids "
        f"into a {ROWS:,} x {DIM} table; microseconds per call",
        flush=True,
    )

    def show(round_: int, done: dict[tuple[str, str], float]) -> None:
        (name, side), plain_us = list(done.items())[-1]
        if side == "plain":
            print(
                f"  round {round_}: {name:22s} kernel {done[(name, 'kernel')]:8.0f}  plain ops "
                f"{plain_us:8.0f}",
                flush=True,
            )

    sides = {
        (name, side): functools.partial(_per_call_us, function)
        for name, functions in pairs.items()
        for side, function in zip(("kernel", "plain"), functions)
    }
    times = interleaved(sides, args.rounds, show=show)
    worst = 0.0
    for name in pairs:
        fused, plain = times[(name, "kernel")], times[(name, "plain")]
        (fused_best, fused_median), (plain_best, plain_median) = (
            best_median(fused, min),
            best_median(plain, min),
        )
        best, median = ratios(fused, plain, min)
        worst = max(worst, median)
        print(
            f"{name:22s} kernel best {fused_best:6.0f} median {fused_median:6.0f}"
            f" | plain ops best {plain_best:6.0f} median {plain_median:6.0f}"
            f" | ratio kernel/plain best {best:.2f}, median {median:.2f}"
        )
    print(
        f"ratio {worst:.2f} (kernel / plain ops, the worse of the two; above 1: the "
        "TensorFlow 2.20 slowdown)"
    )


if __name__ == "__main__":
    main()
