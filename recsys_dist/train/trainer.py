"""Coordinator-driven asynchronous training on parameter servers.

Where things live:

- Embedding tables, their optimizer slots, the global step and the streaming metrics
  are variables on the parameter servers. Tables are sharded by the strategy's
  partitioner (see ``cluster/runtime.py``).
- Dense towers are also variables on the parameter servers; each worker reads them
  at the start of a step and sends gradients back (asynchronous: no worker waits for
  another).
- The data of a step never leaves its worker: the worker reads its own units of the
  shard plan in-graph (``data/input_fn.py``).

The coordinator schedules closures of ``steps_per_call`` steps each. A closure pulls
batches with ``get_next_as_optional``, so a worker whose shard is finished returns
``steps = 0`` instead of raising ``OutOfRangeError``. Training stops after the planned
rows of ``epochs`` passes have come back, or after ``max_steps`` steps.

Loss scaling: a replica's loss is the mean over its valid rows divided by the number
of replicas of its worker; ``apply_gradients`` sums the replicas' gradients once, so a
worker step applies the mean gradient over the worker's batch, whatever the number of
replicas (one on a CPU worker, one per GPU otherwise).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import time

import tensorflow as tf
import yaml

from recsys_dist.cluster.runtime import Runtime
from recsys_dist.config.experiment import ExperimentConfig
from recsys_dist.data.input_fn import InputPipeline
from recsys_dist.data.read_pass import worker_errors_as_data_errors
from recsys_dist.errors import DataError
from recsys_dist.models.zoo import build_model
from recsys_dist.train.optimizers import make_optimizer, scaled_learning_rate

AUC_THRESHOLDS = 2000


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What a training run did.

    Attributes:
      steps: Training steps taken (all workers).
      examples: Rows trained on (valid and skipped).
      skipped_rows: Rows with weight 0 under ``on_bad_row: skip``.
      seconds: Wall time of the training loop.
      loss: Mean loss of the last closures (the last few dozen steps).
      auc: Streaming training AUC per label.
      warm_examples_per_second: Rate after the first closure came back, which leaves
        out tracing and server warm-up.
    """

    steps: int
    examples: int
    skipped_rows: int
    seconds: float
    loss: float
    auc: dict[str, float]
    warm_examples_per_second: float = float("nan")

    @property
    def examples_per_second(self) -> float:
        return self.examples / self.seconds if self.seconds else float("nan")


def replica_loss(logits: dict, labels: dict, valid: tf.Tensor, names: list[str],
                 replicas: int, extra_losses: list | None = None
                 ) -> tuple[tf.Tensor, tf.Tensor]:
    """One replica's loss, scaled so the replicas' summed gradients are the batch mean.

    Args:
      logits, labels: Per label name, ``[B]`` tensors of this replica's rows.
      valid: ``[B]`` example weights (0 for skipped rows).
      names: Labels in the loss (their cross-entropies add up).
      replicas: Replicas of the worker; ``apply_gradients`` sums their gradients once.
      extra_losses: Regularisation losses of the model, counted once per worker step.

    Returns:
      ``(loss, per_example)``: the scalar to differentiate, and the weighted ``[B]``
      cross-entropy (for reporting).
    """
    per_example = tf.add_n([tf.nn.sigmoid_cross_entropy_with_logits(
        labels=labels[name], logits=logits[name]) for name in names]) * valid
    loss = tf.reduce_sum(per_example) / tf.maximum(tf.reduce_sum(valid), 1.0)
    if extra_losses:
        loss += tf.add_n(extra_losses)
    return loss / replicas, per_example


class Trainer:
    """Builds a model on the parameter servers and trains it from the coordinator.

    Args:
      config: The experiment config.
      runtime: The connected cluster.
      pipeline: The planned training split (for ``runtime.num_workers`` workers).
      model_dir: Where summaries and the resolved config go.
    """

    def __init__(self, config: ExperimentConfig, runtime: Runtime, pipeline: InputPipeline,
                 model_dir: str):
        self.config = config
        self.runtime = runtime
        self.pipeline = pipeline
        self.model_dir = model_dir
        strategy = runtime.strategy
        self.replicas = strategy.num_replicas_in_sync
        train = config.train
        with strategy.scope():
            self.model = build_model(config.model.name, config.features, config.inputs,
                                     config.labels, config.model.params, seed=train.seed)
            self.model.create_variables()
            batch = pipeline.spec.batch_size
            self.embedding_optimizer, self.dense_optimizer = (
                make_optimizer(spec, scaled_learning_rate(spec, train, batch, self.replicas))
                for spec in (train.embedding_optimizer, train.dense_optimizer))
            self.auc = {label: tf.keras.metrics.AUC(num_thresholds=AUC_THRESHOLDS,
                                                    from_logits=True, name=f"auc_{label}")
                        for label in config.labels}
            self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False,
                                           name="global_step")
        self._train_call = self._make_train_call()

    # ---- the step -----------------------------------------------------------------------
    def _replica_step(self, batch):
        model, labels = self.model, self.config.labels
        valid = batch["valid"]
        with tf.GradientTape() as tape:
            logits = model(batch["features"], training=True)
            loss, per_example = replica_loss(logits, batch["labels"], valid, labels,
                                             self.replicas, model.losses)
        embedding_vars, dense_vars = model.embedding_variables, model.dense_variables
        grads = tape.gradient(loss, embedding_vars + dense_vars)
        self.embedding_optimizer.apply_gradients(zip(grads[:len(embedding_vars)],
                                                     embedding_vars))
        self.dense_optimizer.apply_gradients(zip(grads[len(embedding_vars):], dense_vars))
        for name in labels:
            self.auc[name].update_state(batch["labels"][name], logits[name], sample_weight=valid)
        return (tf.reduce_sum(per_example), tf.reduce_sum(valid),
                tf.cast(tf.size(valid), tf.float32))

    def _make_train_call(self):
        strategy = self.runtime.strategy

        def total(value):
            return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

        @tf.function
        def train_call(iterator, max_steps):
            loss_sum, weight, rows = tf.constant(0.0), tf.constant(0.0), tf.constant(0.0)
            steps = tf.constant(0, tf.int64)
            for _ in tf.range(max_steps):
                optional = iterator.get_next_as_optional()
                if not optional.has_value():
                    break
                step_loss, step_weight, step_rows = strategy.run(
                    self._replica_step, args=(optional.get_value(),))
                loss_sum += total(step_loss)
                weight += total(step_weight)
                rows += total(step_rows)
                steps += 1
            self.global_step.assign_add(steps)
            return loss_sum, weight, rows, steps

        return train_call

    # ---- the loop -----------------------------------------------------------------------
    def fit(self, show_progress: bool = True) -> TrainResult:
        """Trains until the planned rows of ``train.epochs`` passes or ``max_steps``.

        Raises:
          DataError: a worker hit bad data (the message names file, column and row).
        """
        with worker_errors_as_data_errors():
            return self._fit(show_progress)

    def _fit(self, show_progress: bool) -> TrainResult:
        train = self.config.train
        coordinator, strategy = self.runtime.coordinator, self.runtime.strategy
        iterator = self.pipeline.per_worker_iterator(strategy, coordinator, training=True,
                                                     epochs=train.epochs)
        total_rows = self.pipeline.plan.total_rows * train.epochs
        writer = tf.summary.create_file_writer(os.path.join(self.model_dir, "train"))
        pending: collections.deque = collections.deque()
        recent: collections.deque = collections.deque(maxlen=max(8, 4 * self.runtime.num_workers))
        window: collections.deque = collections.deque(maxlen=recent.maxlen)  # (time, rows)
        scheduled = steps = rows = skipped = 0
        stop, idle_results, first = False, 0, None
        last_summary = last_log = start = time.perf_counter()
        while pending or not stop:
            while not stop and len(pending) < 2 * self.runtime.num_workers:
                budget = train.steps_per_call
                if train.max_steps is not None:
                    budget = min(budget, train.max_steps - scheduled)
                if budget <= 0:
                    stop = True
                    break
                pending.append(coordinator.schedule(
                    self._train_call, args=(iterator, tf.constant(budget, tf.int64))))
                scheduled += budget
            if not pending:
                break
            loss_sum, weight, n_rows, n_steps = (float(v) for v in pending.popleft().fetch())
            if first is None:
                first = (time.perf_counter(), rows + int(n_rows))
            steps, rows = steps + int(n_steps), rows + int(n_rows)
            skipped += int(n_rows - weight)
            if n_steps:
                recent.append((loss_sum, weight))
                idle_results = 0
            else:
                idle_results += 1
                if idle_results > 4 * self.runtime.num_workers and rows < total_rows:
                    raise DataError(f"the workers ran out of data after {rows:,} of "
                                    f"{total_rows:,} planned rows")
            if rows >= total_rows:
                stop = True
            now = time.perf_counter()
            window.append((now, rows))
            if show_progress and now - last_log >= train.log_every_seconds:
                last_log = now
                self._log(steps, rows, total_rows, window, recent)
            if now - last_summary >= train.summary_every_seconds:
                last_summary = now
                self._summaries(writer, steps, rows / (now - start), recent)
        coordinator.join()
        seconds = time.perf_counter() - start
        self._summaries(writer, steps, rows / seconds if seconds else 0.0, recent)
        writer.flush()
        end = time.perf_counter()
        warm = (rows - first[1]) / (end - first[0]) if first and end > first[0] else float("nan")
        return TrainResult(steps, rows, skipped, seconds, _mean_loss(recent),
                           {n: float(m.result()) for n, m in self.auc.items()}, warm)

    def _log(self, steps, rows, total_rows, window, recent) -> None:
        (t0, rows0), (t1, rows1) = window[0], window[-1]
        if t1 <= t0 or rows1 <= rows0:
            return  # no rate yet
        rate = (rows1 - rows0) / (t1 - t0)
        eta = (total_rows - rows) / rate
        aucs = " ".join(f"auc/{n} {float(m.result()):.4f}" for n, m in self.auc.items())
        print(f"step {steps:,} | {rate:,.0f} ex/s | loss {_mean_loss(recent):.4f} | {aucs} | "
              f"{100 * rows / max(total_rows, 1):.0f}% | ETA {eta:.0f}s", flush=True)

    def _summaries(self, writer, steps, rate, recent) -> None:
        with writer.as_default(step=steps):
            tf.summary.scalar("loss", _mean_loss(recent))
            tf.summary.scalar("examples_per_second", rate)
            for name, metric in self.auc.items():
                tf.summary.scalar(f"auc/{name}", float(metric.result()))

    # ---- evaluation ---------------------------------------------------------------------
    def evaluate(self, pipeline: InputPipeline, oracle_columns: dict[str, str]) -> dict:
        """Held-out AUC and logloss per label, next to the oracle's when its logit is there.

        AUC is the streaming estimate of ``tf.keras.metrics.AUC`` with
        ``AUC_THRESHOLDS`` thresholds, for the model and the oracle alike.

        Args:
          pipeline: The planned evaluation split, with the oracle columns as extras.
          oracle_columns: Label name -> column holding the true logit.
        """
        strategy, coordinator = self.runtime.strategy, self.runtime.coordinator
        labels = self.config.labels
        with strategy.scope():
            aucs = {f"{kind}{n}": tf.keras.metrics.AUC(num_thresholds=AUC_THRESHOLDS,
                                                      from_logits=True)
                    for n in labels for kind in ("", "oracle/")
                    if kind == "" or n in oracle_columns}
        iterator = pipeline.per_worker_iterator(strategy, coordinator, training=False)

        def replica_eval(batch):
            logits = self.model(batch["features"], training=False)
            valid = batch["valid"]
            out = {}
            for name in labels:
                y = batch["labels"][name]
                scored = {"": logits[name]}
                if name in oracle_columns:
                    scored["oracle/"] = batch["extra"][oracle_columns[name]]
                for kind, z in scored.items():
                    aucs[f"{kind}{name}"].update_state(y, z, sample_weight=valid)
                    out[f"{kind}{name}"] = tf.reduce_sum(
                        tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=z) * valid)
            out["_weight"] = tf.reduce_sum(valid)
            out["_rows"] = tf.cast(tf.size(valid), tf.float32)
            return out

        @tf.function
        def eval_call(iterator):
            sums = {k: tf.constant(0.0) for k in list(aucs) + ["_weight", "_rows"]}
            for _ in tf.range(self.config.train.steps_per_call):
                optional = iterator.get_next_as_optional()
                if not optional.has_value():
                    break
                result = strategy.run(replica_eval, args=(optional.get_value(),))
                sums = {k: sums[k] + strategy.reduce(tf.distribute.ReduceOp.SUM, result[k],
                                                     axis=None) for k in sums}
            return sums

        with worker_errors_as_data_errors():
            return self._evaluate_waves(aucs, eval_call, iterator, pipeline.plan.total_rows)

    def _evaluate_waves(self, aucs, eval_call, iterator, planned_rows: int) -> dict:
        coordinator = self.runtime.coordinator
        total: collections.Counter = collections.Counter()
        while total["_rows"] < planned_rows:
            wave = [coordinator.schedule(eval_call, args=(iterator,))
                    for _ in range(2 * self.runtime.num_workers)]
            got = [{k: float(v) for k, v in r.fetch().items()} for r in wave]
            for g in got:
                total.update(g)
            if all(g["_rows"] == 0 for g in got) and total["_rows"] < planned_rows:
                raise DataError(f"the workers ran out of evaluation data after "
                                f"{int(total['_rows']):,} of {planned_rows:,} planned rows")
        coordinator.join()
        weight = total["_weight"]
        if weight == 0:
            raise DataError("the evaluation split has no valid rows")
        metrics: dict = {"rows": int(weight)}
        for key, metric in aucs.items():
            prefix = "oracle_" if key.startswith("oracle/") else ""
            name = key.removeprefix("oracle/")
            metrics[f"{prefix}auc/{name}"] = float(metric.result())
            metrics[f"{prefix}logloss/{name}"] = total[key] / weight
        return metrics

    def write_run_files(self, result: TrainResult, eval_metrics: dict | None) -> None:
        """Writes the resolved config and the run's figures into ``model_dir`` (any
        filesystem ``tf.io.gfile`` knows, e.g. local or ``s3://``)."""
        gfile = tf.io.gfile
        gfile.makedirs(self.model_dir)
        with open(self.config.features.file, encoding="utf-8") as handle:
            features_text = handle.read()
        resolved = dict(self.config.raw, features="features.yaml")
        summary = dataclasses.asdict(result) | {"examples_per_second": result.examples_per_second,
                                                "eval": eval_metrics}
        for name, text in (("features.yaml", features_text),
                           ("config.yaml", yaml.safe_dump(resolved, sort_keys=False)),
                           ("train_result.json", json.dumps(summary, indent=2))):
            with gfile.GFile(os.path.join(self.model_dir, name), "w") as out:
                out.write(text)


def _mean_loss(recent) -> float:
    loss = sum(l for l, _ in recent)
    weight = sum(w for _, w in recent)
    return loss / weight if weight else float("nan")


