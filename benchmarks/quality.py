"""Quality of every model of the zoo on synthetic data, next to the oracle.

Writes synthetic data (default 7 days x 500k rows), then trains each model with
``recsys-dist train`` on days 1-6 on a local cluster of 2 workers and 2 parameter servers
and evaluates on day 7. Prints, and writes as a Markdown table, each model's held-out
AUC and logloss next to the oracle's (the true logit stored in the data).

The demo's feature config sizes its dynamic tables for the demo's 400k training rows;
here each dynamic table gets the capacity the training days need (their distinct ids,
counted as ``validate --scan`` counts them, plus a quarter), so no later id reads zeros.

Usage: ``python benchmarks/quality.py [--rows-per-day 500000] [--epochs 1] [--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLI = str(pathlib.Path(sys.executable).parent / "recsys-dist")
PARAMS = {
    "lr": "{}",
    "wide_deep": "{hidden_units: [256, 128]}",
    "deepfm": "{hidden_units: [256, 128]}",
    "dcn_v2": "{cross_layers: 2, low_rank: 32, hidden_units: [256, 128]}",
    "dlrm": "{bottom_units: [64], top_units: [256, 128]}",
    "mmoe": "{num_experts: 4, expert_units: [128, 64], tower_units: [64]}",
}


def wide_deep_inputs() -> str:
    features = yaml.safe_load((ROOT / "features" / "criteo_synth.yaml").read_text())["features"]
    wide = [n for n, f in features.items() if f["kind"] in ("categorical", "cross")]
    return "{wide: [" + ", ".join(wide) + "], deep: [" + ", ".join(features) + "]}"


def training_days() -> list[str]:
    return ["data.train={dates: 2026-01-01..2026-01-06}", "data.eval={dates: 2026-01-07}"]


def sized_features(data: str, out: pathlib.Path) -> pathlib.Path:
    """Writes the demo's feature config to ``out`` with every dynamic table's
    ``capacity_per_shard`` raised to hold the training days' distinct ids (with a quarter
    to spare), and prints each table it raised."""
    from recsys_dist.config import load_config
    from recsys_dist.data.collisions import table_ids
    from recsys_dist.data.input_fn import prepare_input

    config = load_config(ROOT / "configs" / "demo.yaml", training_days()).with_data_path(data)
    doc = yaml.safe_load(pathlib.Path(config.features.file).read_text())
    shards = config.cluster.ps
    for table in table_ids(prepare_input(config, "train", config.cluster.workers), shards):
        spec = doc["tables"][table.table]
        needed = -(-table.distinct_ids * 5 // (4 * shards))
        if table.dynamic and needed > spec["capacity_per_shard"]:
            print(
                f"table {table.table}: {table.distinct_ids:,} distinct ids, "
                f"capacity_per_shard {spec['capacity_per_shard']:,} -> {needed:,}"
            )
            spec["capacity_per_shard"] = needed
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def train(model: str, data: str, model_dir: str, epochs: int, features: str) -> dict:
    overrides = [
        f"features={features}",
        f"model.name={model}",
        f"model.params={PARAMS[model]}",
        *training_days(),
        f"train.epochs={epochs}",
        "train.log_every_seconds=30",
        "model.labels=[click, conversion]" if model == "mmoe" else "model.labels=[click]",
    ]
    if model == "wide_deep":
        overrides.append(f"model.inputs={wide_deep_inputs()}")
    command = [
        CLI,
        "train",
        "--config",
        str(ROOT / "configs" / "demo.yaml"),
        "--data",
        data,
        "--model-dir",
        model_dir,
    ]
    for item in overrides:
        command += ["--set", item]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    result = json.loads((pathlib.Path(model_dir) / "train_result.json").read_text())
    result["wall_seconds"] = time.perf_counter() - start
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows-per-day", type=int, default=500_000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--models", default=",".join(PARAMS))
    parser.add_argument("--data", help="existing 7-day synthetic data (default: generate)")
    parser.add_argument("--out", help="also write the table to this Markdown file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="quality_") as tmp:
        data = args.data or str(pathlib.Path(tmp) / "data")
        if args.data is None:
            subprocess.run(
                [
                    CLI,
                    "data",
                    "synth",
                    "--out",
                    data,
                    "--days",
                    "7",
                    "--rows-per-day",
                    str(args.rows_per_day),
                    "--seed",
                    "11",
                    "--quiet",
                ],
                check=True,
            )
        features = str(sized_features(data, pathlib.Path(tmp) / "features.yaml"))
        rows = []
        for model in args.models.split(","):
            result = train(model, data, str(pathlib.Path(tmp) / model), args.epochs, features)
            ev = result["eval"]
            click = ev["labels"]["click"]
            rows.append(
                (
                    model,
                    click["auc"],
                    click["logloss"],
                    click["oracle"]["auc"],
                    click["oracle"]["logloss"],
                    result["examples_per_second"],
                    result["wall_seconds"],
                )
            )
    header = (
        f"Synthetic data, seed 11, {args.rows_per_day:,} rows/day: train on days 1-6 "
        f"({6 * args.rows_per_day:,} rows, {args.epochs} epoch(s)), evaluate on day 7. "
        "Local cluster: 2 workers + 2 parameter servers on 2 cores.\n\n"
        "| model | AUC | logloss | oracle AUC | oracle logloss | AUC gap to oracle | "
        "train ex/s | wall s |\n|---|---|---|---|---|---|---|---|\n"
    )
    table = header + "".join(
        f"| {m} | {auc:.4f} | {ll:.4f} | {oauc:.4f} | {oll:.4f} | {oauc - auc:.4f} | "
        f"{eps:,.0f} | {wall:.0f} |\n"
        for m, auc, ll, oauc, oll, eps, wall in rows
    )
    print(table)
    if args.out:
        pathlib.Path(args.out).write_text(table)


if __name__ == "__main__":
    main()
