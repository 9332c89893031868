"""The quality benchmark's DCN-v2 (or any zoo model), trained in one process, no parameter
servers.

Answers one question: does training on the cluster (asynchronous steps, tables on
parameter servers) cost held-out quality? It builds the demo config's model and both of
its optimizers (Adagrad for the tables, Adam for the dense towers) in this process, trains
one pass over the training dates through the same input function (one reader, shuffled
units), and scores the evaluation dates with ``training=False``. Compare the AUC with
``recsys-dist train`` on the same data (``benchmarks/quality.py``).

The training and scoring code is :func:`peer_quality.single_process_reference`, which
``benchmarks/peer_quality.py`` runs for every deep model next to the zoo and the peers.

Usage: ``python benchmarks/single_process_quality.py --data DIR [--set KEY=VALUE ...]``
(``--set model.name=deepfm`` for another model). ``DIR`` is the quality benchmark's data
(``recsys-dist data synth --days 7 --rows-per-day 500000 --seed 11``); the defaults train
on 2026-01-01..06 and evaluate 2026-01-07, as it does.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import recsys_dist  # noqa: F401  sets TF env defaults before TensorFlow loads
from recsys_dist.errors import RecsysError

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from peer_quality import DEFAULT_CONFIG, single_process_reference  # noqa: E402

DEFAULTS = [
    "data.train={dates: 2026-01-01..2026-01-06}",
    "data.eval={dates: 2026-01-07}",
    "data.validation=null",  # one pass, as the figures it reproduces were trained
    "model.labels=[click]",
]


def run(data: str, overrides: list[str]) -> None:
    from recsys_dist.config import load_config

    config = load_config(DEFAULT_CONFIG, [f"data.path={data}", *DEFAULTS, *overrides])
    result = single_process_reference(config, log=lambda line: print(line, flush=True))
    m = result["eval"]
    oracle = (
        f" | oracle AUC {m['oracle_auc']:.4f}, logloss {m['oracle_logloss']:.4f}"
        if "oracle_auc" in m
        else ""
    )
    print(
        f"{config.model.name}, one process, {result['steps']:,} steps in "
        f"{result['train_seconds']:.0f} s: AUC {m['auc']:.4f}, logloss {m['logloss']:.4f}"
        f"{oracle} ({m['rows']:,} rows)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="root of the date partitions")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key of configs/demo.yaml",
    )
    args = parser.parse_args()
    try:
        run(args.data, args.set)
    except RecsysError as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
