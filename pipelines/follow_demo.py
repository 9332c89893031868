"""``make demo-follow``: hourly partitions land, ``recsys-dist follow`` trains each one and
publishes it as a delta, and a serving directory follows the publications.

1. Writes ``--hours`` hourly partitions of the demo's synthetic data into a staging
   directory (``data/demo-follow-staging``).
2. Starts ``recsys-dist follow --config configs/demo.yaml`` on an empty data root
   (``data/demo-follow``), publishing into ``runs/demo-follow/published``.
3. Lands the partitions one at a time, files first and ``_SUCCESS`` last. After each
   publication it writes the newest version, base and deltas applied, with
   ``recsys-dist export --base runs/demo-follow/published --out
   runs/demo-follow/serving/N`` (as a loader beside TensorFlow Serving would), loads it
   and scores the rows of the hour that lands next, which no version has seen.

Usage: ``python pipelines/follow_demo.py [--hours 4] [--rows-per-hour 100000]``
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np
import pyarrow.parquet as pq

from recsys_dist.data.partitions import copy_partition

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLI = str(pathlib.Path(sys.executable).parent / "recsys-dist")
STAGING, DATA = ROOT / "data" / "demo-follow-staging", ROOT / "data" / "demo-follow"
RUN = ROOT / "runs" / "demo-follow"


def run(*args: str) -> str:
    done = subprocess.run([CLI, *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"recsys-dist {args[0]} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout


def request(table, inputs: dict[str, str]) -> dict[str, np.ndarray]:
    """The serving request of ``table``'s rows for an export's ``inputs`` (docs/export.md)."""
    out = {}
    for column, dtype in inputs.items():
        values = table[column].to_pylist()
        if dtype.startswith("list<"):
            width = max(1, max(len(v) for v in values))
            pad = "" if "string" in dtype else 0
            out[column] = np.array([v + [pad] * (width - len(v)) for v in values])
            out[column + "_lengths"] = np.array([len(v) for v in values], np.int64)
        else:
            out[column] = np.array(values, dtype=object if dtype == "string" else dtype)
    return out


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    positives = labels.sum()
    return (ranks[labels == 1].sum() - positives * (positives + 1) / 2) / (
        positives * (len(labels) - positives)
    )


def score(export: pathlib.Path, hour_dir: pathlib.Path) -> float:
    import tensorflow as tf

    inputs = json.loads((export / "assets.extra" / "export.json").read_text())["inputs"]
    table = pq.read_table(sorted(hour_dir.glob("*.parquet"))[0]).slice(0, 20_000)
    serve = tf.saved_model.load(str(export)).signatures["serving_default"]
    arrays = {k: tf.constant(v) for k, v in request(table, inputs).items()}
    return auc(table["click"].to_numpy(), serve(**arrays)["click"].numpy())


def wait_for_version(version: str, process: subprocess.Popen) -> None:
    latest = RUN / "published" / "LATEST"
    while not (latest.exists() and latest.read_text().strip() == version):
        if process.poll() is not None:
            sys.exit(f"recsys-dist follow ended with exit code {process.returncode}")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=int, default=4)
    parser.add_argument("--rows-per-hour", type=int, default=100_000)
    args = parser.parse_args()
    for directory in (STAGING, DATA, RUN):
        shutil.rmtree(directory, ignore_errors=True)
    run(
        "data",
        "synth",
        "--out",
        str(STAGING),
        "--days",
        str(args.hours + 1),
        "--hourly",
        "--rows-per-day",
        str(args.rows_per_hour),
        "--seed",
        "7",
        "--quiet",
    )
    hours = sorted(p.parent.relative_to(STAGING) for p in STAGING.glob("dt=*/hour=*/_SUCCESS"))
    DATA.mkdir(parents=True)
    follow = subprocess.Popen(
        [CLI, "follow", "--config", str(ROOT / "configs" / "demo.yaml"), "--data", str(DATA)]
        + ["--set", f"follow.root={RUN}", "--set", "follow.poll_seconds=1"]
    )
    try:
        for number, hour in enumerate(hours[:-1], start=1):
            copy_partition(str(STAGING), str(DATA), str(hour))
            wait_for_version(f"{number:06d}", follow)
            serving = RUN / "serving" / str(number)
            run("export", "--base", str(RUN / "published"), "--out", str(serving))
            manifest = json.loads(
                (RUN / "published" / f"{number:06d}" / "manifest.json").read_text()
            )
            quality = score(serving, STAGING / hours[number])
            print(
                f"demo-follow  version {number} ({manifest['kind']}, "
                f"{manifest['bytes'] / 1e6:.1f} MB of a full {manifest['full_bytes'] / 1e6:.1f} "
                f"MB) served from {serving.relative_to(ROOT)}: AUC {quality:.4f} on "
                f"{hours[number]}, not trained yet",
                flush=True,
            )
    finally:
        follow.terminate()
        follow.wait(timeout=60)
    print(
        f"demo-follow done (follow stopped by SIGTERM, as a scheduler stops it): publications "
        f"in {RUN / 'published'}, served versions in {RUN / 'serving'}"
    )


if __name__ == "__main__":
    main()
