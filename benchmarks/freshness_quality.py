"""Following the data against daily retraining, on data whose click model drifts by the hour.

For each seed, ``data synth --hourly --drift RATE`` writes two days of hourly partitions
(the demo's data and feature config, ``--rows-per-hour`` rows each). Two models of
``configs/demo.yaml`` score every hour of the second day:

- **daily**: trained on the whole first day in one run (as ``retrain`` would, at
  midnight), then serving the second day unchanged;
- **follow**: ``recsys-dist follow`` started with ``--until-idle 0`` after each hour lands
  (as a scheduler starts it), so hour ``h`` is scored by the model trained through hour
  ``h - 1``.

Each hour's held-out AUC is printed for both, then per seed the mean over the day and the
gain of following; the last line is the mean gain over seeds with its standard error.

Usage: ``python benchmarks/freshness_quality.py [--seeds 3] [--rows-per-hour 20000]
[--drift 0.05]``
"""

from __future__ import annotations

import argparse
import math
import pathlib
import shutil
import statistics
import tempfile

import pyarrow.parquet as pq
from common import DEMO_CONFIG, cli

from recsys_dist.data.partitions import copy_partition

HOURS = 48


def scorer(config_path: str, data: str):
    """A function ``(run_dir, hour_dir) -> AUC`` that loads the run's newest checkpoint
    into a model without a strategy and scores the hour's rows."""
    import tensorflow as tf

    from recsys_dist.checkpoint.store import find_checkpoint
    from recsys_dist.config import load_config
    from recsys_dist.evaluation.metrics.ranking import auc
    from recsys_dist.export.saved_model import load_model
    from recsys_dist.features.transforms import FeatureTransform

    config = load_config(config_path).with_data_path(data)
    names = list(dict.fromkeys(n for group in config.inputs.values() for n in group))

    def score(run_dir: str, hour_dir: pathlib.Path) -> float:
        saved = find_checkpoint(run_dir)
        model = load_model(config, saved)
        dtypes = dict(saved.state["feature_columns"], click="int64")
        transform = FeatureTransform(config.features, ["click"], dtypes, "fail", names)
        table = pq.read_table(sorted(hour_dir.glob("*.parquet")), columns=list(dtypes))
        raw = {
            c: tf.ragged.constant(
                table[c].to_pylist(), tf.as_dtype(d[5:-1]), row_splits_dtype=tf.int64
            )
            if d.startswith("list<")
            else tf.constant(
                table[c].to_numpy(zero_copy_only=False).astype(object if d == "string" else d),
                tf.as_dtype(d),
            )
            for c, d in dtypes.items()
        }
        features, labels, _ = transform(raw, tf.constant("bench"), tf.constant(0, tf.int64), {})
        logits = model(features, training=False)["click"]
        return float(auc(labels["click"].numpy(), tf.sigmoid(logits).numpy()))

    return score


def one_seed(work: pathlib.Path, seed: int, rows: int, drift: float) -> tuple[list, list]:
    source, data = work / "source", work / "data"
    cli(
        "data",
        "synth",
        "--out",
        str(source),
        "--days",
        str(HOURS),
        "--hourly",
        "--rows-per-day",
        str(rows),
        "--seed",
        str(seed),
        "--drift",
        str(drift),
        "--quiet",
    )
    names = sorted(str(p.parent.relative_to(source)) for p in source.glob("dt=*/hour=*/_SUCCESS"))
    cli(
        "train",
        "--config",
        DEMO_CONFIG,
        "--data",
        str(source),
        "--model-dir",
        str(work / "daily"),
        "--no-eval",
        "--set",
        "data.train={glob: dt=2026-01-01}",
        "--set",
        "data.eval=null",
        "--set",
        "data.validation=null",
        "--set",
        "train.epochs=1",
    )
    score = scorer(DEMO_CONFIG, str(source))
    data.mkdir()
    follow = ["follow", "--config", DEMO_CONFIG, "--data", str(data), "--until-idle", "0"]
    follow += ["--set", f"follow.root={work / 'follow'}", "--set", "follow.publish_every=1000"]
    daily_aucs, follow_aucs = [], []
    for hour in range(HOURS - 1):
        copy_partition(str(source), str(data), names[hour])
        cli(*follow)
        if hour + 1 < HOURS // 2:
            continue
        target = source / names[hour + 1]
        run = sorted((work / "follow" / "runs").iterdir())[-1]
        daily_aucs.append(score(str(work / "daily"), target))
        follow_aucs.append(score(str(run), target))
        print(
            f"  seed {seed} {names[hour + 1]}: daily {daily_aucs[-1]:.4f}, follow "
            f"{follow_aucs[-1]:.4f} (trained through {run.name})",
            flush=True,
        )
    return daily_aucs, follow_aucs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rows-per-hour", type=int, default=20_000)
    parser.add_argument("--drift", type=float, default=0.05)
    args = parser.parse_args()
    gains = []
    for seed in range(args.seeds):
        work = pathlib.Path(tempfile.mkdtemp(prefix="freshness_quality_"))
        try:
            daily, followed = one_seed(work, seed, args.rows_per_hour, args.drift)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        gain = statistics.mean(followed) - statistics.mean(daily)
        gains.append(gain)
        print(
            f"seed {seed}: mean AUC over the second day: daily {statistics.mean(daily):.4f}, "
            f"follow {statistics.mean(followed):.4f}, gain {gain:+.4f}",
            flush=True,
        )
    error = statistics.stdev(gains) / math.sqrt(len(gains)) if len(gains) > 1 else float("nan")
    print(
        f"following the data gains {statistics.mean(gains):+.4f} AUC over daily retraining "
        f"(standard error {error:.4f}, {len(gains)} seeds, drift {args.drift} a partition)"
    )


if __name__ == "__main__":
    main()
