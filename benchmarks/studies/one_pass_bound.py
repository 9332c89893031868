"""What one pass of SGD can reach on the synthetic data with a model of the label's exact form.

The quality target asks DCN-v2 to come within 0.01 AUC of the oracle. The oracle knows
every effect; ``learnable_ceiling.py`` (this folder) estimates what ideal per-id estimates
from the training days would reach. Neither says what *training* reaches. This script
trains a model that is given the label model's form, so only the estimation of its
parameters is left, in the quality benchmark's regime: days ``1..D-1`` once, batch 512,
rows shuffled, Adagrad with its accumulator starting at 1e-4 (as ``configs/demo.yaml``),
single process.

The well-specified model (``synth.RowGenerator``'s docstring)::

    logit = b + sum_f bias_f[c_f] + bias_user[user] + sum_j bias_j[bucket(x_j)]
              + mean_{t in tags} bias_tag[t]  (bias_no_tag without tags)
              + sum_{(k, w) in topics} w * bias_topic[k]
              + sum_{(f, g) in P} <U_fg[c_f], V_fg[c_g]>      # rank 8, true rank 4

with one 1-d table per id field (all 26, so it must learn that 10 have no effect), and
numeric fields in buckets of width 0.25 of ``sign(x) log1p(|x|)``. It regenerates the
rows with the generator of ``recsys-dist data synth`` (same seed, no files), so its day
``D`` is the same rows and click labels the quality benchmark evaluates on.

A deep model must also find this form, so its AUC after one pass is bounded by about this
figure. It prints, per learning rate, the day-``D`` AUC and logloss next to the oracle's.

Answered: docs/quality.md (point 4 of "Where DCN-v2's gap comes from") and the README:
0.7927 at its best learning rate, so the quality target (0.7925) is blocked on this data.
``one_pass_bound(...)`` returns the figures as a :class:`Bound`.

Usage: ``python benchmarks/studies/one_pass_bound.py [--days 7] [--rows-per-day 500000]
[--seed 11] [--learning-rates 0.05,0.1,0.2] [--epochs 1]`` (the defaults are the quality
benchmark's data).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable, Sequence

import numpy as np

import recsys_dist  # noqa: F401  sets TF env defaults before TensorFlow loads
from recsys_dist.data import synth, synth_files, synth_schema
from recsys_dist.evaluation.metrics import auc, logloss

BATCH = 512
RANK = 8
MAX_TAGS, MAX_TOPICS = 8, 3
PAIRS = list(synth.CLICK_PAIR_SIGMAS)
ID_FIELDS = synth_schema.CATEGORICAL_FIELDS + ["user_id"]


def _padded(rows: np.ndarray, values: np.ndarray, n: int, width: int, fill) -> np.ndarray:
    """Row-sorted flat ``(rows, values)`` as an ``[n, width]`` array padded with ``fill``."""
    out = np.full((n, width), fill, dtype=values.dtype)
    first = np.searchsorted(rows, np.arange(n))
    position = np.arange(len(rows)) - first[rows]
    keep = position < width
    out[rows[keep], position[keep]] = values[keep]
    return out


def numeric_bucket(x: np.ndarray) -> np.ndarray:
    """0 for NaN, else 1 + the 0.25-wide bin of sign(x) log1p(|x|), clipped to [1, 81]."""
    signed = np.sign(x) * np.log1p(np.abs(np.nan_to_num(x)))
    return np.where(np.isnan(x), 0, 1 + np.clip(np.floor(signed * 4) + 8, 0, 80)).astype(np.int64)


def generate(
    days: int, rows_per_day: int, seed: int, log: Callable[[str], None] = print
) -> dict[str, np.ndarray]:
    """Every row of days 1..``days`` as arrays, in day order, with ``day`` and ``oracle``."""
    generator = synth.RowGenerator(seed)
    parts: dict[str, list[np.ndarray]] = {}
    for day in range(days):
        for index, n in enumerate(synth_files.rows_per_file_of_day(rows_per_day)):
            batch, logit, click, _ = generator.clicks(day, index, n)
            columns = {f: batch.categorical[f] for f in synth_schema.CATEGORICAL_FIELDS}
            columns |= {f: numeric_bucket(batch.numeric[f]) for f in synth_schema.NUMERIC_FIELDS}
            columns["user_id"] = batch.user_id
            columns["tags"] = _padded(batch.tag_rows, batch.tag_ids, n, MAX_TAGS, -1)
            columns["topics"] = _padded(batch.topic_rows, batch.topic_ids, n, MAX_TOPICS, 0)
            columns["topic_weights"] = _padded(
                batch.topic_rows, batch.topic_cents / 100, n, MAX_TOPICS, 0.0
            ).astype(np.float32)
            columns |= {
                "click": click.astype(np.float32),
                "oracle": logit,
                "day": np.full(n, day + 1, np.int64),
            }
            for name, values in columns.items():
                parts.setdefault(name, []).append(values)
        log(f"generated day {day + 1} of {days}")
    data = {name: np.concatenate(values) for name, values in parts.items()}
    data["tag_valid"] = (data["tags"] >= 0).astype(np.float32)  # before renumbering
    # Dense row numbers per id field (over all days: ids first seen on day D keep their
    # initial row, as a hashed table row that training never touched).
    for f in ID_FIELDS + ["tags"]:
        _, data[f] = np.unique(data[f], return_inverse=True)
        data[f] = data[f].reshape(-1, MAX_TAGS) if f == "tags" else data[f]
    return data


class WellSpecified:
    """The label model's form with free parameters (see the module docstring)."""

    def __init__(self, data: dict[str, np.ndarray], seed: int):
        import tensorflow as tf

        rows = {
            f: int(data[f].max()) + 1 for f in ID_FIELDS + synth_schema.NUMERIC_FIELDS + ["tags"]
        }
        rows["topics"] = int(data["topics"].max()) + 1
        self.biases = {f: tf.Variable(tf.zeros([n, 1]), name=f"bias_{f}") for f, n in rows.items()}
        self.no_tag = tf.Variable(0.0, name="no_tag")
        self.intercept = tf.Variable(0.0, name="intercept")
        init = tf.keras.initializers.RandomUniform(-0.05, 0.05, seed=seed)
        self.factors = {
            (f, g): (
                tf.Variable(init([rows[f], RANK]), name=f"u_{f}_{g}"),
                tf.Variable(init([rows[g], RANK]), name=f"v_{f}_{g}"),
            )
            for f, g in PAIRS
        }
        self.variables = [
            *self.biases.values(),
            self.no_tag,
            self.intercept,
            *(v for pair in self.factors.values() for v in pair),
        ]

    def __call__(self, rows: dict):
        import tensorflow as tf

        def bias(name, ids):
            return tf.squeeze(tf.gather(self.biases[name], ids), -1)

        logit = self.intercept + tf.add_n(
            [bias(f, rows[f]) for f in ID_FIELDS + synth_schema.NUMERIC_FIELDS]
        )
        tag_count = tf.reduce_sum(rows["tag_valid"], 1)
        tag_sum = tf.reduce_sum(bias("tags", rows["tags"]) * rows["tag_valid"], 1)
        logit += tf.where(tag_count > 0, tag_sum / tf.maximum(tag_count, 1.0), self.no_tag)
        logit += tf.reduce_sum(bias("topics", rows["topics"]) * rows["topic_weights"], 1)
        for (f, g), (u, v) in self.factors.items():
            logit += tf.reduce_sum(tf.gather(u, rows[f]) * tf.gather(v, rows[g]), 1)
        return logit


def train_and_score(
    data: dict[str, np.ndarray], eval_day: int, learning_rate: float, epochs: int, seed: int
) -> tuple[float, float, float]:
    """Trains on days before ``eval_day`` and returns day-``eval_day`` (AUC, logloss, s)."""
    import tensorflow as tf

    tf.random.set_seed(seed)
    model = WellSpecified(data, seed)
    optimizer = tf.keras.optimizers.legacy.Adagrad(learning_rate, initial_accumulator_value=1e-4)
    inputs = [k for k in data if k not in ("click", "oracle", "day")]

    @tf.function(autograph=False)
    def step(rows, labels):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels, model(rows)))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.variables), model.variables))
        return loss

    train_rows = np.flatnonzero(data["day"] < eval_day)
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    for _ in range(epochs):
        order = rng.permutation(train_rows)
        for start in range(0, len(order), BATCH):
            chosen = order[start : start + BATCH]
            step({k: data[k][chosen] for k in inputs}, data["click"][chosen])
    seconds = time.perf_counter() - started
    test_rows = np.flatnonzero(data["day"] == eval_day)
    predict = tf.function(model.__call__, autograph=False)
    logits = np.concatenate(
        [
            predict({k: data[k][test_rows[s : s + 50_000]] for k in inputs}).numpy()
            for s in range(0, len(test_rows), 50_000)
        ]
    )
    labels = data["click"][test_rows]
    return auc(labels, logits), logloss(labels, logits), seconds


@dataclasses.dataclass(frozen=True)
class Run:
    """One learning rate's day-``D`` figures."""

    learning_rate: float
    auc: float
    logloss: float
    train_seconds: float


@dataclasses.dataclass(frozen=True)
class Bound:
    """What :func:`one_pass_bound` measured on day ``day``: the oracle and one run per rate."""

    day: int
    oracle_auc: float
    oracle_logloss: float
    runs: list[Run]


def one_pass_bound(
    days: int = 7,
    rows_per_day: int = 500_000,
    seed: int = 11,
    learning_rates: Sequence[float] = (0.05, 0.1, 0.2),
    epochs: int = 1,
    log: Callable[[str], None] = print,
) -> Bound:
    """Trains the well-specified model on days ``1..days-1`` of ``recsys-dist data synth
    --seed SEED --rows-per-day ROWS`` once per learning rate and scores day ``days``;
    ``log`` gets a progress line per generated day and per finished run."""
    if days < 2:
        raise ValueError(f"days must be at least 2 (train on 1..days-1), got {days}")
    data = generate(days, rows_per_day, seed, log)
    last = data["day"] == days
    runs = []
    for rate in learning_rates:
        score, loss, seconds = train_and_score(data, days, rate, epochs, seed)
        runs.append(Run(rate, score, loss, seconds))
        log(f"learning rate {rate:g}: AUC {score:.4f}, trained in {seconds:.0f} s")
    return Bound(
        days,
        auc(data["click"][last], data["oracle"][last]),
        logloss(data["click"][last], data["oracle"][last]),
        runs,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7, help="train on 1..days-1, score the last")
    parser.add_argument("--rows-per-day", type=int, default=500_000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--learning-rates",
        default="0.05,0.1,0.2",
        help="comma-separated Adagrad learning rates, one run each",
    )
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    if args.days < 2:
        parser.error(f"--days must be at least 2 (train on 1..days-1), got {args.days}")
    try:
        rates = [float(r) for r in args.learning_rates.split(",")]
    except ValueError:
        parser.error(
            f"--learning-rates must be comma-separated numbers, got {args.learning_rates!r}"
        )
    bound = one_pass_bound(
        args.days,
        args.rows_per_day,
        args.seed,
        rates,
        args.epochs,
        log=lambda line: print(line, flush=True),
    )
    print(f"day {bound.day}: oracle AUC {bound.oracle_auc:.4f}, logloss {bound.oracle_logloss:.4f}")
    print(f"{'learning rate':>13s} {'AUC':>7s} {'logloss':>8s} {'AUC gap':>8s} {'train s':>8s}")
    for run in bound.runs:
        print(
            f"{run.learning_rate:13g} {run.auc:7.4f} {run.logloss:8.4f} "
            f"{bound.oracle_auc - run.auc:8.4f} {run.train_seconds:8.0f}"
        )


if __name__ == "__main__":
    main()
