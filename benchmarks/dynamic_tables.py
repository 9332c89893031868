"""Dynamic tables against hashed tables: held-out AUC, training speed and memory per id.

Trains the same model twice per round on the same rows, interleaved, with
``recsys-dist train`` on a local cluster (2 workers, 2 parameter servers, one process
each; ``--cluster-mode in_process`` puts them in the command's process) and evaluates it
on the held-out window:

- ``hashed``: the feature config with every table hashed (ids hashed into each table's
  ``rows``; a table the config makes dynamic gets the rows it holds on the config's
  parameter servers);
- ``dynamic``: the tables named by ``--tables`` turned into ``kind: dynamic`` with
  ``capacity_per_shard`` = their ``rows`` (room for twice as many ids as the hashed
  table has rows) or ``--capacity-per-shard``, every other table unchanged.

Each round prints both sides' AUC, logloss, examples/s after warm-up and the dynamic
tables' live ids; then each side's best and median and the ratios. Memory per live id is
measured in this process: the resident-set growth of a ``MutableHashTable`` holding
``--memory-ids`` int64 ids, plus the bytes of one row, its Adagrad slot and its
last-seen day. Before it, the AUC gain of each round (both sides of a round train on the
same rows, one after the other), their mean with its standard error and how many rounds
the dynamic side won. The last line reads ``auc gain X, speed ratio Y`` (dynamic minus
hashed held-out AUC, dynamic over hashed examples/s, medians).

Synthetic data by default (``recsys-dist data synth --users 5000000``, 3 days; train on
2, evaluate on the 3rd): a long tail of users, about 140k distinct a day at 200k rows, so
a hashed user table of the demo's size gives many users a shared row. Give ``--config``
and ``--data`` for other data, e.g. the Criteo sample with ``configs/criteo.yaml``.

Usage: ``python benchmarks/dynamic_tables.py [--rounds 2] [--rows-per-day 200000]
[--users 5000000] [--tables user,c3,c4,c12] [--config FILE --data DIR]
[--capacity-per-shard N] [--cluster-mode local|in_process]``
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import resource
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

SIDES = ("hashed", "dynamic")


def dynamic_features(
    features_file: str,
    tables: list[str],
    out: pathlib.Path,
    admit_after: int = 1,
    capacity: int | None = None,
) -> str:
    """A copy of the feature config with ``tables`` made dynamic, ``capacity`` rows per
    shard each (default: the table's ``rows``)."""
    doc = yaml.safe_load(pathlib.Path(features_file).read_text())
    unknown = [t for t in tables if t not in doc["tables"]]
    if unknown:
        raise SystemExit(
            f"--tables: {unknown} not in {features_file}; it has " + ", ".join(doc["tables"])
        )
    for name in tables:
        spec = doc["tables"][name]
        doc["tables"][name] = {
            "kind": "dynamic",
            "dim": spec["dim"],
            "capacity_per_shard": capacity or spec["rows"],
            "admit_after": admit_after,
        }
    for feature in doc["features"].values():
        if feature.get("table") in tables:
            feature.pop("hash_buckets", None)
    path = out / "features_dynamic.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def train_and_evaluate(
    config: str,
    data: str,
    features: str | None,
    run: pathlib.Path,
    extra: list[str],
    mode: str = "local",
) -> dict:
    shutil.rmtree(run, ignore_errors=True)
    sets = ["--set", f"cluster.mode={mode}", "--set", "train.log_every_seconds=0"]
    for item in extra:
        sets += ["--set", item]
    if features is not None:
        sets += ["--set", f"features={features}"]
    out = cli("train", "--config", config, "--data", data, "--model-dir", str(run), *sets)
    warm = re.search(r"([\d,]+) ex/s after warm-up", out)
    auc = re.search(r"eval     \S+: AUC ([\d.]+), logloss ([\d.]+)", out)
    if warm is None or auc is None:
        raise SystemExit(f"could not read the figures of train:\n{out[-2000:]}")
    result = json.loads((run / "train_result.json").read_text())
    return {
        "auc": float(auc.group(1)),
        "logloss": float(auc.group(2)),
        "ex_per_s": float(warm.group(1).replace(",", "")),
        "dynamic": result.get("dynamic_tables", {}),
    }


def bytes_per_hash_entry(ids: int) -> float:
    """Resident-set growth per entry of a ``MutableHashTable`` int64 -> int64."""
    import numpy as np
    import tensorflow as tf

    table = tf.lookup.experimental.MutableHashTable(tf.int64, tf.int64, default_value=-1)
    keys = tf.constant(np.random.default_rng(0).integers(0, 2**62, ids))
    values = tf.range(ids, dtype=tf.int64)
    table.insert(keys[:1000], values[:1000])  # allocator warm-up
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    table.insert(keys, values)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return (after - before) * 1024 / ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rows-per-day", type=int, default=200_000)
    parser.add_argument(
        "--users",
        type=int,
        default=5_000_000,
        help="synthetic user pool: 5M gives a long tail of new users a day "
        "that collide in a hashed user table of the demo's size",
    )
    parser.add_argument(
        "--tables", default="user,c3,c4,c12", help="comma-separated tables to make dynamic"
    )
    parser.add_argument("--config", default=DEMO_CONFIG)
    parser.add_argument("--data", help="dt= Parquet root (default: synthetic data)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for both sides",
    )
    parser.add_argument(
        "--capacity-per-shard",
        type=int,
        help="capacity_per_shard of every dynamic table (default: the "
        "table's rows), e.g. far above its ids, as a team that does "
        "not know its cardinality would set it",
    )
    parser.add_argument("--memory-ids", type=int, default=2_000_000)
    parser.add_argument(
        "--cluster-mode",
        choices=("local", "in_process"),
        default="local",
        help="local: each server its own process (default); in_process: "
        "the servers inside the train command's process",
    )
    parser.add_argument(
        "--admit-after",
        type=int,
        default=2,
        help="admit_after of the dynamic tables (default 2: an id seen once "
        "gets no row of its own, which measured better on the tail)",
    )
    args = parser.parse_args()
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="dynamic_tables_bench_"))
    try:
        data = args.data
        if data is None:
            data = str(scratch / "data")
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
                "--users",
                str(args.users),
                "--quiet",
            )
        from recsys_dist.config import load_config  # after argparse: --help stays fast

        config = load_config(args.config, [f"data.path={data}", *args.set])
        tables = [t for t in args.tables.split(",") if t]
        # The hashed side: every table hashed (a dynamic table of the config, such as the
        # demo's user table, gets the rows it holds on the config's servers).
        hashed = hashed_features(config.features.file, scratch, config.cluster.ps)
        features = {
            "hashed": hashed,
            "dynamic": dynamic_features(
                hashed, tables, scratch, args.admit_after, args.capacity_per_shard
            ),
        }
        capacity = (
            f", capacity_per_shard {args.capacity_per_shard:,}" if args.capacity_per_shard else ""
        )
        print(
            f"config {args.config}, data {data}; dynamic tables: {', '.join(tables)} "
            f"(admit_after {args.admit_after}{capacity}); cluster.mode {args.cluster_mode}"
        )

        def show(round_: int, done: dict) -> None:
            side, r = list(done.items())[-1]
            live = ", ".join(
                f"{k} {v['live_ids']:,} ids ({v['dropped_full']:,} refused)"
                for k, v in r["dynamic"].items()
                if k.startswith("embeddings_")
            )
            print(
                f"round {round_} {side:8s} AUC {r['auc']:.4f} logloss {r['logloss']:.4f} "
                f"{r['ex_per_s']:,.0f} ex/s" + (f"; {live}" if live else ""),
                flush=True,
            )

        results = interleaved(
            {
                side: (
                    lambda side=side: train_and_evaluate(
                        args.config,
                        data,
                        features[side],
                        scratch / side,
                        args.set,
                        args.cluster_mode,
                    )
                )
                for side in SIDES
            },
            args.rounds,
            alternate=True,
            show=show,
        )
        for side in SIDES:
            best, median = best_median(r["auc"] for r in results[side])
            speed_best, speed_median = best_median(r["ex_per_s"] for r in results[side])
            print(
                f"{side:8s} AUC best {best:.4f} median {median:.4f}; ex/s best "
                f"{speed_best:,.0f} median {speed_median:,.0f}"
            )
        speed_best, speed_median = ratios(
            [r["ex_per_s"] for r in results["dynamic"]], [r["ex_per_s"] for r in results["hashed"]]
        )
        auc_best = max(r["auc"] for r in results["dynamic"]) - max(
            r["auc"] for r in results["hashed"]
        )
        auc_median = (
            best_median(r["auc"] for r in results["dynamic"])[1]
            - best_median(r["auc"] for r in results["hashed"])[1]
        )
        dim = 16
        row = dim * 4 * 2 + 8  # the row, its Adagrad accumulator, its last-seen day
        entry = bytes_per_hash_entry(args.memory_ids)
        print(
            f"memory per live id (dim {dim}): row + slot + day {row} B, id -> row entry "
            f"{entry:.0f} B: {row + entry:.0f} B, {(row + entry) / row:.2f}x the row and "
            "its slot (the capacity's rows are allocated up front)"
        )
        # Both sides of a round train on the same rows one after the other, so the
        # round-by-round difference is less noisy than the two sides' medians.
        paired = [d["auc"] - h["auc"] for d, h in zip(results["dynamic"], results["hashed"])]
        print(
            "auc gain per round (dynamic minus hashed): "
            + ", ".join(f"{g:+.4f}" for g in paired)
            + f"; mean {statistics.mean(paired):+.4f}"
            + (
                f" (standard error {statistics.stdev(paired) / len(paired) ** 0.5:.4f})"
                if len(paired) > 1
                else ""
            )
            + f"; dynamic ahead in {sum(g > 0 for g in paired)} of {len(paired)} rounds"
        )
        print(
            f"speed ratio dynamic/hashed: best {speed_best:.2f}, median {speed_median:.2f}; "
            f"auc gain: best {auc_best:+.4f}, median {auc_median:+.4f}"
        )
        print(f"auc gain {auc_median:+.4f}, speed ratio {speed_median:.2f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
