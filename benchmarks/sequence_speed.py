"""Training speed of the sequence models against the same networks in plain PyTorch, on
the same rows, in one run.

Sides, per model of ``--models`` (``pooled``: DIN's network with each history mean-pooled;
``din``; ``bst``):

- ``ours``: ``recsys-dist train`` of the model, one pass over the training rows, with the
  config's cluster (2 workers and 2 parameter servers in the command's process), no
  evaluation; its examples/s after warm-up;
- ``torch``: ``benchmarks/torch_sequence_peer.py``, the same network in plain PyTorch (one
  process, ``--threads`` threads, the same tables, widths, optimizers and, for ``din``,
  position embeddings when the config's ``attention_positions`` is on), run with
  ``--torch-python`` (``make bench-torch`` builds ``.venv-torch`` with PyTorch). It trains
  one pass over the same rows, read here from the Parquet files into an ``.npz`` (each
  table's ids numbered from 1, each history its ``max_length`` newest ids).

Data (``--data``): ``amazon`` (default; the Amazon Video Games set of
``benchmarks/amazon_sequences.py``) or ``synthetic`` (``data synth --dataset behaviour``:
histories of items and their categories), as in ``sequence_quality.py``.

Every round runs each model's two sides, interleaved, and prints both rates; the end
gives per model and side the best and median examples/s and the ratio ours / torch of
the medians (and of the bests), the figure the targets are set on.

Usage: ``python benchmarks/sequence_speed.py [--data amazon|synthetic] [--models
pooled,din,bst] [--rounds 3] [--amazon DIR] [--torch-python PATH] [--set KEY=VALUE ...]``
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from common import ROOT, best_median, cli, interleaved, ratios  # this folder
from sequence_quality import prepare_data, side_settings

MODELS = ("pooled", "din", "bst")
PEER = ROOT / "benchmarks" / "torch_sequence_peer.py"


def training_files(config, data: str) -> list[str]:
    """The Parquet files of the config's training split under ``data``."""
    from recsys_dist.data.input_fn import prepare_input

    return list(prepare_input(config, "train", 1).plan.files)


def newest_first(column: pa.ChunkedArray, length: int, newest_last: bool) -> np.ndarray:
    """``[N, length]`` int64: each row's ``length`` most recent ids, newest first, 0 after."""
    lists = pa.concat_arrays(column.chunks) if column.num_chunks else pa.array([], column.type)
    offsets = np.asarray(lists.offsets)
    values = np.asarray(lists.values)
    sizes = np.minimum(np.diff(offsets), length)
    rows = np.repeat(np.arange(len(sizes)), sizes)
    position = np.arange(len(rows)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    source = offsets[rows + 1] - 1 - position if newest_last else offsets[rows] + position
    out = np.zeros((len(sizes), length), np.int64)
    out[rows, position] = values[source]
    return out


def export_rows(config, files: list[str], out: pathlib.Path) -> dict:
    """Writes the training rows as the peer reads them; returns their description."""
    features = config.features
    names = config.inputs["deep"]
    sequences = [n for n in names if features.features[n].kind == "sequence"]
    main = [n for n in sequences if not getattr(features.features[n], "side_of", None)]
    if len(main) != 1:
        raise SystemExit(f"the peer reads one history; the config has {main}")
    history = [main[0]] + [n for n in sequences if n != main[0]]
    others = [n for n in names if n not in sequences]
    table = pa.concat_tables(pq.read_table(f) for f in files)
    raw: dict[str, np.ndarray] = {}
    length = features.features[main[0]].max_length
    for name in names:
        spec = features.features[name]
        column = table.column(spec.column or name)
        if name in sequences:
            raw[name] = newest_first(column, length, spec.newest == "last")
        else:
            raw[name] = pc.fill_null(column, 0).to_numpy()
    tables: dict[str, int] = {}
    columns: dict[str, np.ndarray] = {}
    for t in sorted({features.features[n].table_name for n in names}):
        reading = [n for n in names if features.features[n].table_name == t]
        ids = np.unique(np.concatenate([raw[n][raw[n] != 0].ravel() for n in reading]))
        tables[t] = len(ids) + 1  # row 0: padding
        for n in reading:
            rows = np.searchsorted(ids, raw[n]) + 1
            columns[n] = np.where(raw[n] != 0, rows, 0) if n in sequences else rows
    spec = {
        "columns": list(columns),
        "tables": tables,
        "others": [[n, features.features[n].table_name] for n in others],
        "history": [
            [n, features.features[n].target, features.features[n].table_name] for n in history
        ],
        "length": length,
    }
    label = table.column(config.labels[0]).to_numpy().astype(np.float32)
    np.savez(out, spec=json.dumps(spec), label=label, **columns)
    return {"rows": len(label), **spec}


def ours(config: str, data: str, run: pathlib.Path, settings: list[str]) -> float:
    shutil.rmtree(run, ignore_errors=True)
    sets = []
    for item in [*settings, "train.epochs=1", "data.validation=null", "train.log_every_seconds=0"]:
        sets += ["--set", item]
    cli("train", "--config", config, "--data", data, "--model-dir", str(run), "--no-eval", *sets)
    result = json.loads((run / "train_result.json").read_text())
    return result.get("warm_examples_per_second") or result["examples_per_second"]


def peer(
    python: str, rows: pathlib.Path, model: str, batch: int, threads: int, positions: bool
) -> float:
    done = subprocess.run(
        [
            python,
            str(PEER),
            "--rows",
            str(rows),
            "--model",
            model,
            "--batch-size",
            str(batch),
            "--threads",
            str(threads),
            *(["--positions"] if positions else []),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])["ex_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=("amazon", "synthetic"), default="amazon")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--amazon", help="the converted Amazon set (amazon_sequences.py --out)")
    parser.add_argument("--source", help="Video.txt for the converter when --amazon is not built")
    parser.add_argument("--rows-per-day", type=int, default=200_000)
    parser.add_argument("--threads", type=int, default=2, help="the peer's threads (default 2)")
    parser.add_argument("--torch-python", default=str(ROOT / ".venv-torch" / "bin" / "python"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise SystemExit(f"--models: {unknown} unknown; choose from {', '.join(MODELS)}")
    if not pathlib.Path(args.torch_python).exists():
        raise SystemExit(f"{args.torch_python} not found: run `make bench-torch` first")
    from recsys_dist.config import load_config

    scratch = pathlib.Path(tempfile.mkdtemp(prefix="sequence_speed_"))
    try:
        data, config_file, extra = prepare_data(
            args.data, scratch, args.amazon, args.source, args.rows_per_day
        )
        config = load_config(config_file, [f"data.path={data}", *extra, *args.set])
        rows = scratch / "rows.npz"
        shape = export_rows(config, training_files(config, data), rows)
        print(
            f"data {args.data} ({data}): {shape['rows']:,} training rows, tables "
            + ", ".join(f"{t} {n - 1:,} ids" for t, n in shape["tables"].items())
            + f"; history {', '.join(h[0] for h in shape['history'])} of {shape['length']}; "
            f"batch {config.input.batch_size}; peer threads {args.threads}"
        )
        sides = {}
        for model in models:
            settings = [*extra, *side_settings("pooled" if model == "pooled" else model), *args.set]
            sides[(model, "ours")] = lambda s=settings, m=model: ours(
                config_file, data, scratch / f"run_{m}", s
            )
            positions = (
                model == "din"
                and load_config(
                    config_file, [f"data.path={data}", *settings]
                ).model.params.attention_positions
            )
            sides[(model, "torch")] = lambda m=model, p=positions: peer(
                args.torch_python, rows, m, config.input.batch_size, args.threads, p
            )

        def show(round_: int, done: dict) -> None:
            (model, side), rate = list(done.items())[-1]
            print(f"round {round_} {model:7s} {side:6s} {rate:>9,.0f} ex/s", flush=True)

        results = interleaved(sides, args.rounds, show=show)
        print()
        for model in models:
            ours_rates, torch_rates = results[(model, "ours")], results[(model, "torch")]
            best_o, median_o = best_median(ours_rates)
            best_t, median_t = best_median(torch_rates)
            ratio_best, ratio_median = ratios(ours_rates, torch_rates)
            print(
                f"{model:7s} ours best {best_o:,.0f} median {median_o:,.0f}; torch best "
                f"{best_t:,.0f} median {median_t:,.0f}; ours/torch median "
                f"{ratio_median:.2f}, best {ratio_best:.2f}"
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
