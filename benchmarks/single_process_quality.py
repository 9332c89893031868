"""The quality benchmark's DCN-v2, trained in one process with no parameter servers.

Answers one question: does training on the cluster (asynchronous steps, tables on
parameter servers) cost held-out quality? It builds the demo config's model and both of
its optimizers (Adagrad for the tables, Adam for the dense towers) in this process, trains
one pass over the training dates through the same input function (one reader, shuffled
units), and scores the evaluation dates with ``training=False``. Compare the AUC with
``recsys-dist train`` on the same data (``benchmarks/quality.py``).

Usage: ``python benchmarks/single_process_quality.py --data DIR [--set KEY=VALUE ...]``.
``DIR`` is the quality benchmark's data (``recsys-dist data synth --days 7
--rows-per-day 500000 --seed 11``); the defaults train on 2026-01-01..06 and evaluate
2026-01-07, as it does.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

import recsys_dist  # noqa: F401  sets TF env defaults before TensorFlow loads
from recsys_dist.errors import RecsysError

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULTS = ["data.train={dates: 2026-01-01..2026-01-06}", "data.eval={dates: 2026-01-07}",
            "model.labels=[click]"]


def run(data: str, overrides: list[str]) -> None:
    import tensorflow as tf

    from recsys_dist.config import load_config
    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.evaluation.metrics import auc, logloss
    from recsys_dist.models.zoo import build_from_config
    from recsys_dist.train.optimizers import make_optimizer, scaled_learning_rate
    from recsys_dist.train.trainer import replica_loss

    config = load_config(ROOT / "configs" / "demo.yaml",
                         [f"data.path={data}", *DEFAULTS, *overrides])
    label = config.labels[0]
    model = build_from_config(config)
    train_spec, batch_size = config.train, config.input.batch_size
    tables, dense = (make_optimizer(spec, scaled_learning_rate(spec, train_spec, batch_size, 1))
                     for spec in (train_spec.embedding_optimizer, train_spec.dense_optimizer))
    table_vars, dense_vars = model.embedding_variables, model.dense_variables

    @tf.function(autograph=False)
    def step(batch):
        with tf.GradientTape() as tape:  # the trainer's own loss, for one replica
            logits = model(batch["features"], training=True)
            loss, _ = replica_loss(logits, batch["labels"], batch["valid"], config.labels, 1,
                                   model.losses)
        grads = tape.gradient(loss, table_vars + dense_vars)
        tables.apply_gradients(zip(grads[:len(table_vars)], table_vars))
        dense.apply_gradients(zip(grads[len(table_vars):], dense_vars))
        return loss

    started, steps, recent = time.perf_counter(), 0, []
    train = prepare_input(config, "train", 1)
    for batch in train.dataset_fn(training=True, worker_index=0)():
        recent = (recent + [float(step(batch))])[-500:]
        steps += 1
        if steps % 1000 == 0:
            print(f"step {steps:,}: loss of the last 500 steps {np.mean(recent):.4f}", flush=True)
    seconds = time.perf_counter() - started

    predict = tf.function(lambda features: model(features, training=False)[label],
                          autograph=False)
    evaluation = prepare_input(config, "eval", 1, extra_columns=("oracle_logit",))
    labels, logits, oracle = [], [], []
    for batch in evaluation.dataset_fn(training=False, worker_index=0)():
        logits.append(predict(batch["features"]).numpy())
        labels.append(batch["labels"][label].numpy())
        oracle.append(batch["extra"]["oracle_logit"].numpy())
    y, z, o = (np.concatenate(a) for a in (labels, logits, oracle))
    print(f"{config.model.name}, one process, {steps:,} steps in {seconds:.0f} s: "
          f"AUC {auc(y, z):.4f}, logloss {logloss(y, z):.4f} | oracle AUC {auc(y, o):.4f}, "
          f"logloss {logloss(y, o):.4f} ({len(y):,} rows)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="root of the date partitions")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a key of configs/demo.yaml")
    args = parser.parse_args()
    try:
        run(args.data, args.set)
    except RecsysError as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
