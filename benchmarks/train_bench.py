"""Training benchmark: the same model on the same Parquet data, three ways, in one run.

  (a) ``recsys-dist train`` on a local cluster of 2 workers and 2 parameter servers
      (packed steps, in-graph input on the workers, Adagrad tables + Adam towers);
  (b) single-process tf-keras ``model.fit`` on in-memory numpy arrays, no parameter
      servers (the rows are first read through the same input function into memory);
  (c) the TensorFlow tutorial recipe: ``ParameterServerStrategy`` with ``model.fit``
      and a ``DatasetCreator`` over the same in-graph dataset, 2 workers + 2 parameter
      servers, ``steps_per_execution=10`` as in the tutorial. Its servers keep
      TensorFlow's thread defaults, as the tutorial's do (no ``intra_op_threads``; (a)'s
      local cluster splits the cores between its tasks).

Each way trains the demo model (``configs/demo.yaml``: DCN-v2, batch 512) and reports
examples/s after a warm-up (tracing and server start are left out). ``model.fit`` takes
one optimizer, so (b) and (c) use legacy Adagrad for every variable: the sparse-friendly
choice (legacy Adam would rescale every row of its table-sized slots on each step, which
measured about 1.4k examples/s for (c)). (a) uses Adagrad for the tables and Adam for the
small dense towers. Prints every rate
and the ratios a/b (target >= 1.0) and a/c (target >= 1.3).

The host's speed drifts by up to 2x within minutes (measured: (b) at 23.6k and 13.2k
examples/s in two runs 5 minutes apart), so a single a/b from one pass can mislead. The
ways therefore run interleaved, ``--rounds`` times (a, b, c, a, b, c, ...), and the ratios
are taken from each way's median; every round's figures are printed too.

Usage: ``python benchmarks/train_bench.py [--rows 300000] [--rounds 3] [--set KEY=VALUE ...]``;
``--set`` overrides the config of every way; ``--way a|b|c`` runs one way only and prints
its rate as JSON (used internally: each cluster way runs in its own process).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from common import DEMO_CONFIG as CONFIG  # this folder
from common import interleaved

import recsys_dist  # noqa: F401  sets TF env defaults before TensorFlow loads
from recsys_dist.errors import RecsysError

WARMUP_STEPS = 60
# cluster.mode=local: one process per server, as (a) is described and was measured (the demo
# config itself runs its servers in_process since 2026-11-23).
OVERRIDES = ["data.train={dates: 2026-01-01}", "train.log_every_seconds=1000", "cluster.mode=local"]


def _config():
    from recsys_dist.config import load_config

    return load_config(CONFIG, OVERRIDES)


def way_a(data: str) -> float:
    """recsys-dist's own trainer on a local 2-worker / 2-ps cluster."""
    from recsys_dist.cluster.runtime import connect
    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.train.trainer import Trainer

    config = _config()
    pipeline = prepare_input(config.with_data_path(data), "train", config.cluster.workers)
    with (
        tempfile.TemporaryDirectory() as tmp,
        connect(config.cluster, tmp, config.train.embedding_shard_bytes) as runtime,
    ):
        result = Trainer(config, runtime, pipeline, tmp).fit()
    return result.warm_examples_per_second


def _compiled(model, optimizer, steps_per_execution: int = 1):
    import tensorflow as tf

    model.compile(
        optimizer=optimizer,
        steps_per_execution=steps_per_execution,
        loss={"click": tf.keras.losses.BinaryCrossentropy(from_logits=True)},
    )
    return model


def way_b(data: str) -> float:
    """Single-process model.fit on numpy arrays held in memory."""
    import numpy as np
    import tensorflow as tf

    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.models.zoo import build_from_config

    config = _config()
    pipeline = prepare_input(config.with_data_path(data), "train", 1)
    batches = list(pipeline.local_dataset(training=False))
    x = tf.nest.map_structure(
        lambda *parts: np.concatenate([p.numpy() for p in parts]), *[b["features"] for b in batches]
    )
    y = {"click": np.concatenate([b["labels"]["click"].numpy() for b in batches])}
    batch = config.input.batch_size
    model = build_from_config(config)
    _compiled(model, tf.keras.optimizers.legacy.Adagrad(0.05))
    warm = WARMUP_STEPS * batch
    model.fit(
        tf.nest.map_structure(lambda a: a[:warm], x),
        {"click": y["click"][:warm]},
        batch_size=batch,
        epochs=1,
        verbose=0,
    )
    start = time.perf_counter()
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=True)
    return len(y["click"]) / (time.perf_counter() - start)


def way_c(data: str) -> float:
    """The tutorial recipe: PSS + model.fit + DatasetCreator, on a local cluster."""
    import tensorflow as tf

    from recsys_dist.cluster.local import LocalCluster
    from recsys_dist.cluster.placement import placement_for
    from recsys_dist.cluster.runtime import make_strategy
    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.models.zoo import build_from_config

    config = _config()
    pipeline = prepare_input(config.with_data_path(data), "train", config.cluster.workers)

    def creator(input_context):
        # Each worker reads every unit, in its own shuffled order (no static shards).
        return (
            pipeline.local_dataset(training=True)
            .map(lambda e: (e["features"], {"click": e["labels"]["click"]}))
            .repeat()
        )

    steps = pipeline.plan.total_rows // config.input.batch_size
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(config.cluster.workers, config.cluster.ps, tmp, intra_op_threads=0) as cluster,
    ):
        strategy = make_strategy(
            cluster.cluster_resolver(), config.cluster.ps, config.train.embedding_shard_bytes
        )
        with strategy.scope():
            model = build_from_config(config, placement_for(strategy))
            _compiled(model, tf.keras.optimizers.legacy.Adagrad(0.05), steps_per_execution=10)
        data_creator = tf.keras.utils.experimental.DatasetCreator(creator)
        model.fit(data_creator, epochs=1, steps_per_epoch=WARMUP_STEPS, verbose=0)
        start = time.perf_counter()
        model.fit(data_creator, epochs=1, steps_per_epoch=steps, verbose=0)
        rate = steps * config.input.batch_size / (time.perf_counter() - start)
    return rate


WAYS = {"a": way_a, "b": way_b, "c": way_c}


def run_way(way: str, data: str, sets: list[str]) -> float:
    """Runs one way in a process of its own (``--way``) and returns its examples/s."""
    done = subprocess.run(
        [sys.executable, __file__, "--way", way, "--data", data, *sets],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"way {way} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["examples_per_second"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000, help="rows of training data")
    parser.add_argument("--data", help="existing synthetic data with dt=2026-01-01")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="interleaved rounds of the three ways (median is reported)",
    )
    parser.add_argument("--way", choices=sorted(WAYS), help="run one way, print JSON")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for every way, e.g. features=OTHER.yaml",
    )
    args = parser.parse_args()
    OVERRIDES.extend(args.set)  # every way, in this process or the child ones
    try:
        _config()  # a bad --set fails here, with the config's own message
    except RecsysError as exc:
        sys.exit(f"error: {exc}")
    if args.way:
        print(json.dumps({"way": args.way, "examples_per_second": WAYS[args.way](args.data)}))
        sys.stdout.flush()
        os._exit(0)
    with tempfile.TemporaryDirectory(prefix="train_bench_") as tmp:
        data = args.data or tmp
        if args.data is None:
            from recsys_dist.data.synth_files import synthesize

            synthesize(tmp, days=1, rows_per_day=args.rows, seed=2)
        sets = [part for item in args.set for part in ("--set", item)]

        def show(round_: int, done: dict[str, float]) -> None:
            way, rate = list(done.items())[-1]
            print(f"round {round_}/{args.rounds} way {way}: {rate:,.0f} examples/s", flush=True)

        runs = interleaved(
            {way: functools.partial(run_way, way, data, sets) for way in WAYS},
            args.rounds,
            show=show,
        )
    names = {
        "a": "(a) recsys-dist, 2 workers + 2 ps",
        "b": "(b) single-process model.fit on numpy",
        "c": "(c) PSS + model.fit + DatasetCreator, 2w+2ps",
    }
    rates = {way: statistics.median(values) for way, values in runs.items()}
    for way, rate in rates.items():
        each = " / ".join(f"{v:,.0f}" for v in runs[way])
        print(f"{names[way]:48s} {rate:>10,.0f} examples/s (median of {each})")
    print(
        f"a/b = {rates['a'] / rates['b']:.2f} (target >= 1.0), "
        f"a/c = {rates['a'] / rates['c']:.2f} (target >= 1.3); per round: "
        + ", ".join(
            f"a/b {a / b:.2f} a/c {a / c:.2f}" for a, b, c in zip(runs["a"], runs["b"], runs["c"])
        )
    )


if __name__ == "__main__":
    main()
