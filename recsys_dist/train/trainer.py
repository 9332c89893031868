"""Coordinator-driven asynchronous training on parameter servers.

Where things live:

- Embedding tables, their optimizer slots, the global step and the streaming metrics
  are variables on the parameter servers. Tables are sharded by the strategy's
  partitioner (see ``cluster/runtime.py``).
- Dense towers are also variables on the parameter servers; each worker reads them
  at the start of a step (or, with ``train.dense_refresh_steps``, every that many steps:
  ``train/dense_cache.py``) and sends gradients back every step (asynchronous: no
  worker waits for another).
- The data of a step never leaves its worker: the closure the coordinator schedules
  carries only an item's address (file, first and last row), and the worker reads
  those rows in-graph with a ``tf.data`` pipeline (``InputPipeline.item_dataset``).

Dynamic sharding: the coordinator hands out work items (row ranges of at most
``steps_per_call * batch_size`` rows) one per closure, to whichever worker is free. An
item is finished when its closure returns, which makes the data position exact (see
``train/data_position.py``): a checkpoint records the finished items, a killed worker's
closure is re-run elsewhere by ``ClusterCoordinator`` (its item is read again from the
start: at least once, at most one item per kill), and a resumed run schedules only
what is left. Training stops when every item has run ``epochs`` times, or after
``max_steps`` steps; there is no end-of-data ``OutOfRangeError`` to handle.

Loss scaling: a replica's loss is the mean over its valid rows divided by the number
of replicas of its worker; ``apply_gradients`` sums the replicas' gradients once, so a
worker step applies the mean gradient over the worker's batch, whatever the number of
replicas (one on a CPU worker, one per GPU otherwise; each replica takes its own
slice of the batch, :func:`replica_slice`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import json
import math
import shutil
import time
from collections.abc import Iterator
from typing import Literal

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from recsys_dist import COMMAND_STARTED_AT, storage_io
from recsys_dist.checkpoint.store import (
    DAMAGED,
    CheckpointError,
    CheckpointManager,
    DamagedCheckpoint,
    SavedCheckpoint,
    check_signature,
    local_prefix,
    model_dir_dynamic_shards,
    model_signature,
    restore,
)
from recsys_dist.checkpoint.warm_start import WarmStartReport, stack_layouts, warm_start
from recsys_dist.cluster.collective import agree, from_chief, scratch_dir
from recsys_dist.cluster.dispatch import InFlight, check_item_rows
from recsys_dist.cluster.failures import cluster_failures_as_cluster_lost
from recsys_dist.cluster.replicas import replica_slice
from recsys_dist.cluster.runtime import Runtime
from recsys_dist.config.experiment import ExperimentConfig, resolved_files
from recsys_dist.data.input_fn import InputPipeline
from recsys_dist.data.read_pass import worker_errors_as_data_errors
from recsys_dist.evaluation.evaluate import evaluate_on_one_device, evaluate_split
from recsys_dist.models.dynamic_table import evict_tables
from recsys_dist.models.embedding import FeatureEmbeddings, TableStack
from recsys_dist.models.zoo import build_from_config, default_dynamic_shards
from recsys_dist.train.data_position import DataPosition
from recsys_dist.train.dense_cache import DenseWeightCache, check_dense_refresh, watched
from recsys_dist.train.early_stopping import EarlyStopping
from recsys_dist.train.optimizers import ModelOptimizers

AUC_THRESHOLDS = 2000
RESULT_FILE = "train_result.json"  # written last by a finished run


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What a training run did.

    Attributes:
      steps: Training steps taken (all workers).
      examples: Rows trained on (valid and skipped).
      skipped_rows: Rows with weight 0 under ``on_bad_row: skip``.
      seconds: Wall time of the training loop.
      loss: Mean loss of the last closures (the last few dozen steps).
      auc: Training AUC per label over the last pass (epoch) of the run.
      warm_examples_per_second: Rate after the first closure came back, which leaves
        out tracing and server warm-up.
      epochs: Per pass this run trained: ``{"epoch": n (from 1), "auc": {label: AUC}}``,
        each AUC over that pass's rows only (a resumed pass: over the rows after the
        resume).
      dynamic_tables: Per dynamic table of each layer (``<layer>_<table>``), its
        :meth:`DynamicTable.stats` at the end: live ids, capacity, ids refused because a
        shard was full, lookups without a row, ids counted but not admitted yet; and ids
        admitted by this run (``admitted_this_run``: live ids now minus when its
        training began, after a warm start and eviction) and ``evicted_at_start``.
      early_stopping: With ``train.early_stopping``: the validation metric of every
        pass (``history``), the ``best`` pass (whose weights the run ends with) and
        whether it ``stopped`` before the last pass.
      first_step_at: Unix time at which this attempt's first training step had its
        gradients (the earliest over the workers, by their clocks); None without a step.
    """

    steps: int
    examples: int
    skipped_rows: int
    seconds: float
    loss: float
    auc: dict[str, float]
    warm_examples_per_second: float = float("nan")
    epochs: list[dict] = dataclasses.field(default_factory=list)
    dynamic_tables: dict[str, dict] = dataclasses.field(default_factory=dict)
    early_stopping: dict | None = None
    first_step_at: float | None = None

    @property
    def examples_per_second(self) -> float:
        return self.examples / self.seconds if self.seconds else float("nan")

    @property
    def seconds_to_first_step(self) -> float | None:
        """Seconds from the command's start to the first step's end (start-up)."""
        return (self.first_step_at - COMMAND_STARTED_AT
                if self.first_step_at is not None else None)


def replica_loss(logits: dict, labels: dict, valid: tf.Tensor, names: list[str],
                 replicas: int, extra_losses: list | None = None
                 ) -> tuple[tf.Tensor, tf.Tensor]:
    """One replica's loss, scaled so the replicas' summed gradients are the step's mean.

    With several replicas every one divides its weighted sum by the weight of the whole
    step's batch (summed over the replicas, as ``tf.nn.compute_average_loss`` divides by
    the global batch), so the gradients ``apply_gradients`` sums once are exactly those of
    the step's mean loss, whatever rows each replica got.

    Args:
      logits, labels: Per label name, ``[B]`` tensors of this replica's rows.
      valid: ``[B]`` example weights (0 for skipped rows).
      names: Labels in the loss (their cross-entropies add up).
      replicas: Replicas in sync; ``apply_gradients`` sums their gradients once.
      extra_losses: Regularisation losses of the model, counted once per step.

    Returns:
      ``(loss, per_example)``: the scalar to differentiate, and the weighted ``[B]``
      cross-entropy (for reporting).
    """
    per_example = tf.add_n([tf.nn.sigmoid_cross_entropy_with_logits(
        labels=labels[name], logits=logits[name]) for name in names]) * valid
    weight = tf.reduce_sum(valid)
    if replicas > 1:
        weight = tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, weight)
    loss = tf.reduce_sum(per_example) / tf.maximum(weight, 1.0)
    if extra_losses:
        loss += tf.add_n(extra_losses) / replicas
    return loss, per_example


@dataclasses.dataclass
class _Progress:
    """Counters of one attempt of a run (the coordinator's view)."""

    steps: int = 0
    rows: int = 0
    skipped: int = 0
    rows_at_checkpoint: int = 0


@dataclasses.dataclass
class _Attempt:
    """The coordinator's running state of one attempt of a run."""

    first_step: int
    keep: int  # losses (and rate samples) the progress line averages over
    progress: _Progress = dataclasses.field(default_factory=_Progress)
    epoch: int | None = None  # the pass being trained
    epochs: list = dataclasses.field(default_factory=list)  # finished passes' AUCs
    pass_start: int = 0  # rows collected before this pass
    first: tuple[float, int] | None = None  # (time, rows) at the first collected item
    first_step_at: float | None = None  # Unix time of the attempt's first step's end
    saved_at: int | None = None  # the step of this attempt's latest checkpoint
    stopped: bool = False  # early stopping ended the run at the end of pass `epoch`

    def __post_init__(self):
        self.recent: collections.deque = collections.deque(maxlen=self.keep)  # (loss, weight)
        self.window: collections.deque = collections.deque(maxlen=self.keep)  # (time, rows)


class _Cadence:
    """When the loop logs, writes summaries and checkpoints (``train.*_every_*``)."""

    def __init__(self, train, first_step: int):
        self.train = train
        self.start = self._last_log = self._last_summary = self._last_save = time.perf_counter()
        self._last_save_step = first_step

    def log_due(self, now: float) -> bool:
        if now - self._last_log < self.train.log_every_seconds:
            return False
        self._last_log = now
        return True

    def summary_due(self, now: float) -> bool:
        if now - self._last_summary < self.train.summary_every_seconds:
            return False
        self._last_summary = now
        return True

    def checkpoint_due(self, now: float, step: int) -> bool:
        train = self.train
        return ((train.checkpoint_every_steps is not None
                 and step - self._last_save_step >= train.checkpoint_every_steps)
                or (train.checkpoint_every_seconds is not None
                    and now - self._last_save >= train.checkpoint_every_seconds))

    def saved(self, now: float, step: int) -> None:
        self._last_save, self._last_save_step = now, step


def training_window(config: ExperimentConfig) -> tuple[datetime.date, datetime.date]:
    """The first and last dates of the training window, or today twice when it is not a
    date range. Dynamic tables' trained rows count as last seen on the last date; eviction
    counts back from the first."""
    split = config.data.train if config.data is not None else None
    dates = split.date_range() if split is not None else None
    today = datetime.date.today()
    return (dates.first, dates.last) if dates is not None else (today, today)


def data_position(config: ExperimentConfig, pipeline: InputPipeline) -> DataPosition:
    """A fresh data position over ``pipeline``'s items (one closure each)."""
    train = config.train
    items = pipeline.work_items(train.steps_per_call * pipeline.spec.batch_size)
    return DataPosition(pipeline.plan.files, items, train.epochs, pipeline.spec.shuffle,
                        train.seed, pipeline.plan.file_bytes)


def _complete(config: ExperimentConfig, position: DataPosition, step: int) -> bool:
    max_steps = config.train.max_steps
    return position.finished or (max_steps is not None and step >= max_steps)


def completed_run(config: ExperimentConfig, pipeline: InputPipeline, model_dir: str
                  ) -> tuple[SavedCheckpoint, DataPosition] | None:
    """The newest checkpoint of ``model_dir`` if it already completes this run, else None.

    Needs no cluster, so a finished run is recognised before any server starts.
    """
    saved = CheckpointManager(model_dir).latest()
    if saved is None or not storage_io.exists(storage_io.join(model_dir, RESULT_FILE)):
        return None  # (a run killed after training but before its evaluation goes on)
    check_signature(saved, config)
    position = data_position(config, pipeline)
    position.restore(saved.state["position"], saved.directory)
    return (saved, position) if _complete(config, position, saved.step) else None


def require_gradients(variables: list, grads: list) -> None:
    """Raises when a variable gets no gradient (checked at tracing): every embedding table
    of a model is read by its loss, so a missing gradient is a bug that would leave the
    table silently at its initial rows (as a gradient lost on the way to the parameter
    servers once did).

    Raises:
      RuntimeError: naming the variables without a gradient.
    """
    untrained = [v.name for v, g in zip(variables, grads) if g is None]
    if untrained:
        raise RuntimeError(f"no gradient reaches the embedding variables {untrained}; "
                           "every table of the model is read by the loss")


class Trainer:
    """Builds a model on the parameter servers and trains it from the coordinator.

    Args:
      config: The experiment config.
      runtime: The connected cluster.
      pipeline: The planned training split.
      model_dir: Where checkpoints, summaries and the resolved config go.
      validation: The planned ``data.validation`` split, scored after every pass when
        ``train.early_stopping`` is set (required then).
    """

    def __init__(self, config: ExperimentConfig, runtime: Runtime, pipeline: InputPipeline,
                 model_dir: str, validation: InputPipeline | None = None):
        self.config = config
        self.runtime = runtime
        self.pipeline = pipeline
        self.model_dir = model_dir
        strategy = runtime.strategy
        self.replicas = strategy.num_replicas_in_sync
        # Under multi_worker_mirrored every worker runs this loop (cluster/collective.py).
        self.lockstep, self.is_chief = runtime.lockstep, runtime.is_chief
        train = config.train
        self.checkpoints = CheckpointManager(model_dir, train.keep_checkpoints)
        with strategy.scope():
            # a model dir keeps the dynamic tables' shard count it started with (placed
            # round-robin on however many servers this run has; a warm start re-shards)
            dynamic = any(t.dynamic for t in config.features.tables.values())
            self.dynamic_shards = ((dynamic and model_dir_dynamic_shards(self.checkpoints))
                                   or default_dynamic_shards(config))
            self.model = build_from_config(config, self.dynamic_shards)
            # Slots exist before any restore (checkpoint/store.py says why).
            self.optimizers = ModelOptimizers(
                self.model, train, pipeline.spec.batch_size,
                steps_per_epoch=math.ceil(pipeline.plan.total_rows / pipeline.spec.batch_size))
            self.auc = {label: tf.keras.metrics.AUC(num_thresholds=AUC_THRESHOLDS,
                                                    from_logits=True, name=f"auc_{label}")
                        for label in config.labels}
            self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False,
                                           name="global_step")
        self.checkpoint = tf.train.Checkpoint(model=self.model, global_step=self.global_step,
                                              **self.optimizers.checkpoint_objects())
        # Workers 1.. of a multi_worker_mirrored job save too (saving takes part in
        # collectives), into a scratch directory nobody reads.
        self._scratch = None if self.is_chief else scratch_dir(model_dir, runtime.task_index)
        self._saves = (self.checkpoints if self._scratch is None
                       else CheckpointManager(self._scratch, 1))
        self.position = data_position(config, pipeline)
        self.items = self.position.items
        self.restored: SavedCheckpoint | None = None
        self.evicted: dict[str, dict] = {}  # per dynamic table, what evict_unseen did
        # per dynamic table, its live ids when this run began training (after a warm
        # start and eviction; kept in checkpoints, so a resumed run counts from there)
        self._live_at_start: dict[str, int] | None = None
        self._rows_before = 0  # rows trained by earlier attempts (from the checkpoint)
        self._train_item = self._make_train_item()
        spec = train.early_stopping
        if spec is not None and validation is None:
            raise ValueError("train.early_stopping needs the validation split's pipeline")
        self.validation = validation
        self.early_stopping = (EarlyStopping(spec, spec.label or config.labels[0])
                               if spec is not None else None)

    # ---- checkpoints --------------------------------------------------------------------
    def resume(self) -> SavedCheckpoint | None:
        """Restores the newest complete checkpoint of ``model_dir`` and its data position.

        A damaged one (its files changed after the save; see ``checkpoint/store.py``) is
        marked so, with a warning, and the previous complete one is restored instead.

        Raises:
          CheckpointError: it was written for another model or feature config, or every
            complete checkpoint is damaged.
          PositionMismatch: its data position counts other data.
        """
        damaged: list[DamagedCheckpoint] = []
        for _, saved in self.checkpoints.newest_first():
            try:
                if isinstance(saved, DamagedCheckpoint):
                    raise saved
                check_signature(saved, self.config)
                restore(self.checkpoint, saved)
            except DamagedCheckpoint as damage:
                print(f"warning  {damage}; trying the previous complete checkpoint",
                      flush=True)
                damaged.append(damage)
                continue
            for damage in damaged if self.is_chief else ():  # once a good one is found
                self.checkpoints.mark_damaged(damage)
                print(f"warning  {damage.directory}: marked {DAMAGED}, resuming from "
                      f"{saved.directory}", flush=True)
            self.position.restore(saved.state["position"], saved.directory)
            self._rows_before = int(saved.state.get("rows_trained", 0))
            self._live_at_start = saved.state.get("dynamic_live_at_start")
            if self.early_stopping is not None:
                self.early_stopping.restore(saved.state.get("early_stopping"))
                self._pin_best()
            self.restored = saved
            return saved
        if damaged:
            raise CheckpointError(f"{self.checkpoints.root}: every complete checkpoint is "
                                  f"damaged ({'; '.join(str(d) for d in damaged)}); train "
                                  "into a new --model-dir, or remove them to start afresh")
        return None

    def warm_start(self, saved: SavedCheckpoint,
                   on_table_resize: Literal["fail", "reinitialize"] = "fail") -> WarmStartReport:
        """Seeds weights, slots and step from another run's checkpoint (not its data
        position); see ``checkpoint/warm_start.py`` for how feature drift is handled."""
        with local_prefix(saved) as prefix:  # downloaded first when remote
            return warm_start(self.checkpoint, prefix, self._stacks(),
                              saved.state.get("embedding_stacks", {}),
                              self.optimizers.all,
                              on_table_resize, source=saved.directory)

    def remove_scratch(self) -> None:
        """Removes what a worker other than the chief wrote (call when the run is over)."""
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def evict_unseen(self) -> dict[str, dict]:
        """Eviction of daily retraining (after the warm start, before any step): every
        dynamic table with ``evict_after_days`` drops the ids last seen more than that many
        days before the training window's first day. Returns, per table of each layer,
        ``{"kept", "evicted", "oldest_day"}`` (also in :meth:`dynamic_table_stats`)."""
        first = training_window(self.config)[0]
        for tables in self.model.dynamic_tables.values():
            days = tables[0].spec.evict_after_days
            if days is not None:
                oldest = first - datetime.timedelta(days=days)
                for name, result in evict_tables(tables, oldest, self.optimizers.all).items():
                    self.evicted[name] = dict(result, oldest_day=str(oldest))
        return self.evicted

    def _stacks(self) -> list[TableStack]:
        return [stack for module in self.model.submodules
                if isinstance(module, FeatureEmbeddings) for stack in module.stacks]

    @property
    def step(self) -> int:
        return int(self.global_step.numpy())

    def is_complete(self) -> bool:
        """Every item ran ``epochs`` times, or the step budget is spent."""
        return _complete(self.config, self.position, self.step)

    def save_checkpoint(self, rows_this_attempt: int = 0) -> SavedCheckpoint:
        """Saves weights, slots, step and data position (call with no closure in flight)."""
        transform = self.pipeline.transform
        label_columns = {self.config.features.column_of(self.config.features.labels[n])
                         for n in self.config.labels}
        state = {"position": self.position.to_json(),
                 "signature": model_signature(self.config, self.dynamic_shards),
                 # where each table sits in its stack (a warm start finds rows by table)
                 "embedding_stacks": stack_layouts(self._stacks()),
                 # the raw columns the features read, as the Parquet files store them
                 # (an export's serving signature takes exactly these)
                 "feature_columns": {c: transform.column_dtypes[c] for c in transform.columns
                                     if c not in label_columns},
                 "rows_trained": self._rows_before + rows_this_attempt,
                 "complete": self.is_complete()}
        if self.early_stopping is not None:
            state["early_stopping"] = self.early_stopping.to_json()
        if self._live_at_start:  # a model with dynamic tables
            state["dynamic_live_at_start"] = self._live_at_start
        return self._saves.save(self.checkpoint, self.step, state)

    # ---- the step -----------------------------------------------------------------------
    # Model code is plain TensorFlow (no Python control flow on tensors), so AutoGraph
    # must not convert it: converting every layer's call (and tf-keras' own __call__
    # wrappers) took most of the first step's tracing time.
    @tf.autograph.experimental.do_not_convert
    def _replica_step(self, batch, dense_copies=()):
        if not self.lockstep:  # a lockstep worker reads its replica's rows only
            batch = replica_slice(batch)
        model, labels = self.model, self.config.labels
        valid = batch["valid"]
        embedding_vars, dense_vars = model.embedding_variables, model.dense_variables
        # With cached dense weights the model reads these copies, not the variables.
        dense_sources = watched(dense_copies) if dense_copies else dense_vars
        with tf.GradientTape() as tape:
            if dense_copies:
                tape.watch(dense_sources)
            logits = model(batch["features"], training=True)
            loss, per_example = replica_loss(logits, batch["labels"], valid, labels,
                                             self.replicas, model.losses)
        grads = tape.gradient(loss, embedding_vars + list(dense_sources))
        require_gradients(embedding_vars, grads[:len(embedding_vars)])
        self.optimizers.apply(grads[:len(embedding_vars)], grads[len(embedding_vars):])
        for name in labels:
            self.auc[name].update_state(batch["labels"][name], logits[name], sample_weight=valid)
        # The sums come after the gradients, so they mark the step's end (first_step_at).
        with tf.control_dependencies([g.values if isinstance(g, tf.IndexedSlices) else g
                                      for g in grads if g is not None]):
            return (tf.reduce_sum(per_example), tf.reduce_sum(valid),
                    tf.cast(tf.size(valid), tf.float32))

    def _make_train_item(self):
        if self.lockstep:
            return self._make_lockstep_item()
        strategy, pipeline = self.runtime.strategy, self.pipeline
        refresh_steps = self.config.train.dense_refresh_steps
        check_dense_refresh(self.config.file, refresh_steps, self.replicas)

        def total(value):
            return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

        @tf.function
        def train_item(file_index, start, stop, max_steps):
            loss_sum, weight, rows = tf.constant(0.0), tf.constant(0.0), tf.constant(0.0)
            steps = tf.constant(0, tf.int64)
            first_step_at = tf.constant(0.0, tf.float64)  # 0: no step
            # An explicit iterator keeps the steps in this function's own while loop; a
            # `for batch in dataset` would run them inside tf.data's reduce (4x slower).
            iterator = iter(pipeline.item_dataset(file_index, start, stop, training=True))
            cache = (DenseWeightCache(self.model.dense_variables, refresh_steps)
                     if refresh_steps is not None else None)
            with cache.scope() if cache else contextlib.nullcontext([]) as dense_copies:
                for step in tf.range(max_steps):
                    if cache:
                        dense_copies = cache.refresh(dense_copies, step)
                    optional = iterator.get_next_as_optional()
                    if not optional.has_value():
                        break
                    step_loss, step_weight, step_rows = strategy.run(
                        self._replica_step, args=(optional.get_value(), dense_copies))
                    loss_sum += total(step_loss)
                    weight += total(step_weight)
                    rows += total(step_rows)
                    steps += 1
                    if step == 0:  # when this worker's first step of the item ended
                        with tf.control_dependencies([loss_sum, weight, rows]):
                            first_step_at = tf.timestamp()
            self.global_step.assign_add(steps)
            return loss_sum, weight, rows, steps, first_step_at

        return train_item

    def _make_lockstep_item(self):
        """``train_item`` of a ``multi_worker_mirrored`` worker, a Python function: all
        workers train each item together, one ``tf.function`` call per step.

        Worker ``w`` of ``W`` reads its share of the item (:func:`worker_rows`) in batches
        of ``batch_size / W``; every worker runs the item's ``ceil(n / batch_size)`` steps
        (cut to the step budget), a worker whose rows run out first on a zero-weight row
        for the steps it lacks. A step's loss and weight are summed over the workers, so
        every worker returns the same figures.
        """
        workers, me = self.runtime.num_workers, self.runtime.task_index
        batch = self.pipeline.spec.batch_size
        share = batch // workers
        check_dense_refresh(self.config.file, self.config.train.dense_refresh_steps,
                            self.replicas)
        step = self._lockstep_step(share)

        def train_item(file_index, start, stop, max_steps):
            file_index, start, stop = int(file_index), int(start), int(stop)
            n = stop - start
            steps = min(-(-n // batch), int(max_steps))
            totals, first_step_at = tf.zeros([2]), 0.0
            for rows in self._lockstep_batches(file_index, start, stop, steps, share, me):
                totals += step(rows)
                first_step_at = first_step_at or time.time()
            self.global_step.assign_add(steps)
            trained = sum(min(b - a, steps * share)
                          for a, b in (worker_rows(start, stop, w, workers)
                                       for w in range(workers)))
            return (totals[0], totals[1], tf.constant(float(trained)),
                    tf.constant(steps, tf.int64), tf.constant(first_step_at, tf.float64))

        return train_item

    def _lockstep_step(self, share: int):
        """``step(rows) -> [loss sum, weight]`` over all workers: one synchronous step."""
        strategy = self.runtime.strategy
        with tf.Graph().as_default():  # the batches' structure
            zero = tf.constant(0, tf.int64)
            spec = self.pipeline.item_dataset(zero, zero, zero, training=True,
                                              batch_size=share).element_spec
        # Batch dimension unknown: one trace for every batch size, so every worker makes
        # the same collectives in the same order.
        spec = tf.nest.map_structure(lambda s: s._unbatch()._batch(None), spec)  # noqa: SLF001

        def replica_totals(rows):
            loss, weight, _ = self._replica_step(rows)
            return tf.stack([loss, weight])

        @tf.function(input_signature=[spec])
        def step(rows):
            return strategy.reduce(tf.distribute.ReduceOp.SUM,
                                   strategy.run(replica_totals, args=(rows,)), axis=None)

        return step

    def _lockstep_batches(self, file_index: int, start: int, stop: int, steps: int,
                          share: int, worker: int) -> Iterator[dict]:
        """``steps`` batches of ``worker``'s share of rows ``[start, stop)``: its own rows,
        then (when they run out first) the item's first row with weight 0."""
        def read(a: int, b: int, batch_size: int) -> tf.data.Dataset:
            return self.pipeline.item_dataset(*(tf.constant(v, tf.int64)
                                                for v in (file_index, a, b)),
                                              training=True, batch_size=batch_size)

        lo, hi = worker_rows(start, stop, worker, self.runtime.num_workers)
        taken = 0
        for rows in (read(lo, hi, share) if hi > lo else ()):
            if taken == steps:
                return
            yield rows
            taken += 1
        if taken < steps:
            padding = next(iter(read(start, start + 1, 1)))
            padding = dict(padding, valid=tf.zeros_like(padding["valid"]))
            for _ in range(steps - taken):
                yield padding

    # ---- the loop -----------------------------------------------------------------------
    def fit(self, show_progress: bool = True) -> TrainResult:
        """Trains what the data position has left, checkpointing on the way and at the end.

        Raises:
          DataError: a worker hit bad data (the message names file, column and row).
          ClusterLost: a parameter server was lost (restart from the last checkpoint).
        """
        if self.is_chief:
            self.write_config_files()  # evaluate and export read it by default, even mid-run
        for tables in self.model.dynamic_tables.values():
            for table in tables:  # rows trained by this run were last seen on its last day
                table.set_day(training_window(self.config)[1])
        if self._live_at_start is None:  # not resumed: this run's training begins now
            self._live_at_start = {name: stats["live_ids"]
                                   for name, stats in self.dynamic_table_stats().items()}
        # TensorFlow writes the summaries locally; for a remote model dir they are staged
        # and uploaded at each checkpoint and at the end.
        with worker_errors_as_data_errors(), cluster_failures_as_cluster_lost(self.lockstep), \
                storage_io.StagedDir(storage_io.join(self._scratch or self.model_dir,
                                                     "train")) as summaries:
            writer = tf.summary.create_file_writer(summaries.local)
            try:
                return self._fit(show_progress, writer, summaries)
            finally:
                writer.close()

    def _fit(self, show_progress: bool, writer, summaries: storage_io.StagedDir
             ) -> TrainResult:
        """The training loop: hands out the data position's items, collects them in
        order, and logs, writes summaries and checkpoints when :class:`_Cadence` says."""
        run = _Attempt(first_step=self.step, keep=max(8, 4 * self.runtime.num_workers))
        cadence = _Cadence(self.config.train, run.first_step)
        in_flight = InFlight(self.runtime.coordinator, self._train_item,
                             2 * self.runtime.num_workers, stalled=self.runtime.worker_lost)
        self._unscored_pass(run, cadence, show_progress)
        # The rate's first point is the loop's start, so the first finished item has a
        # progress line (its rate counts the start-up) and items that finish together
        # early never read as a burst of millions of examples per second.
        run.window.append((time.perf_counter(), 0))
        for epoch, index, budget in self._work():
            if epoch != run.epoch:
                if run.epoch is not None:  # a pass ends: its AUC covers its rows only
                    self._drain(in_flight, run)
                    run.epochs.append(self._end_epoch(run.epoch, show_progress))
                    run.pass_start = run.progress.rows
                    if self._after_pass(run, run.epoch + 1, cadence, show_progress):
                        break
                run.epoch = epoch
                # (nothing in flight: the pass before is drained)
                self.model.count_sightings(epoch == 0)
            item = self.items[index]
            in_flight.put((index, budget), item.file, item.start, item.stop, budget)
            if not in_flight.has_room():
                self._collect_one(in_flight, run, cadence, show_progress, writer, summaries)
        while len(in_flight):
            self._collect_one(in_flight, run, cadence, show_progress, writer, summaries)
        self.runtime.coordinator.join()
        return self._finish(run, cadence, show_progress, writer, summaries)

    def _work(self) -> Iterator[tuple[int, int, int]]:
        """``(epoch, item index, step budget)`` of what is left to train, in order; the
        budget is the item's batches, cut to what ``train.max_steps`` leaves."""
        max_steps, batch = self.config.train.max_steps, self.pipeline.spec.batch_size
        scheduled = self.step
        for epoch, index in self.position.schedule():
            budget = -(-self.items[index].rows // batch)
            if max_steps is not None:
                budget = min(budget, max_steps - scheduled)
            if budget <= 0:
                return
            scheduled += budget
            yield epoch, index, budget

    def _collect(self, tag: tuple[int, int], result, run: _Attempt) -> None:
        """Counts one finished item; marks it done when it was trained whole."""
        (index, budget), item = tag, self.items[tag[0]]
        loss_sum, weight, n_rows, n_steps, first_step_at = (float(v) for v in result)
        if n_steps and (run.first_step_at is None or first_step_at < run.first_step_at):
            run.first_step_at = first_step_at
        if budget >= -(-item.rows // self.pipeline.spec.batch_size):
            check_item_rows(self.pipeline.plan.files, item, int(n_rows), "read")
            self.position.complete(index)
        progress = run.progress
        progress.steps += int(n_steps)
        progress.rows += int(n_rows)
        progress.skipped += int(n_rows - weight)
        if n_steps:
            run.recent.append((loss_sum, weight))

    def _drain(self, in_flight: InFlight, run: _Attempt) -> None:
        while len(in_flight):
            self._collect(*in_flight.pop(), run)

    def _collect_one(self, in_flight: InFlight, run: _Attempt, cadence: _Cadence,
                     show_progress: bool, writer, summaries: storage_io.StagedDir) -> None:
        """Collects the oldest item, then logs, summarizes and checkpoints when due."""
        self._collect(*in_flight.pop(), run)
        now, steps = time.perf_counter(), run.first_step + run.progress.steps
        if run.first is None:
            run.first = (now, run.progress.rows)
        run.window.append((now, run.progress.rows))
        log, summary, save = (cadence.log_due(now), cadence.summary_due(now),
                              cadence.checkpoint_due(now, steps))
        if self.runtime.worker_lost():
            # A checkpoint waits for every closure in flight, one of which may be stuck on
            # the lost worker; a summary's or the log line's ops on this process waited too
            # (seen on tf_config clusters): all three resume when the worker is back.
            log = summary = save = False
        if self.lockstep:  # every worker does what the chief decided (reads are collective)
            log, summary, save = agree(self.runtime.strategy, (log, summary, save),
                                       self.is_chief)
        if show_progress and log:
            self._log(steps, run.window, run.recent, run.epoch,
                      run.progress.rows - run.pass_start)
        if summary:
            self._summaries(writer, steps, run.progress.rows / (now - cadence.start), run.recent)
        if save:
            self._drain(in_flight, run)  # the checkpoint must match the finished items exactly
            self._checkpoint(run.progress, show_progress)
            writer.flush()
            summaries.sync()
            run.saved_at = run.first_step + run.progress.steps
            cadence.saved(time.perf_counter(), run.saved_at)

    def _finish(self, run: _Attempt, cadence: _Cadence, show_progress: bool, writer,
                summaries: storage_io.StagedDir) -> TrainResult:
        """Ends the last pass, writes the final summaries and checkpoint; the figures."""
        progress = run.progress
        if run.epoch is not None and not run.stopped:
            run.epochs.append(self._end_epoch(run.epoch, show_progress, reset=False))
            self._after_pass(run, run.epoch + 1, cadence, show_progress)
        restored_best = self._restore_best(show_progress)
        seconds = time.perf_counter() - cadence.start
        self._summaries(writer, run.first_step + progress.steps,
                        progress.rows / seconds if seconds else 0.0, run.recent)
        writer.flush()
        end = time.perf_counter()  # the rates leave out the final checkpoint
        # Never rewrite the restored checkpoint, nor one this attempt just wrote.
        if restored_best or ((progress.steps or self.restored is None)
                             and run.saved_at != run.first_step + progress.steps):
            self._checkpoint(progress, show_progress)
        summaries.sync()
        warm = ((progress.rows - run.first[1]) / (end - run.first[0])
                if run.first and end > run.first[0] else float("nan"))
        # The last pass's AUC (a stop between passes has already reset the metrics).
        auc = (run.epochs[-1]["auc"] if run.epochs
               else {n: float(m.result()) for n, m in self.auc.items()})
        return TrainResult(progress.steps, progress.rows, progress.skipped, seconds,
                           _mean_loss(run.recent), auc, warm,
                           run.epochs, self.dynamic_table_stats(),
                           self.early_stopping.to_json() if self.early_stopping else None,
                           run.first_step_at)

    # ---- early stopping -----------------------------------------------------------------
    def _after_pass(self, run: _Attempt, epoch: int, cadence: _Cadence,
                    show_progress: bool) -> bool:
        """With ``train.early_stopping``: scores the validation split after pass ``epoch``
        (from 1; call with nothing in flight), checkpoints, and keeps the best pass's
        checkpoint. Returns True when training should stop."""
        stopping = self.early_stopping
        if stopping is None:
            return False
        scores = self._validation_scores(run, show_progress)
        stop = stopping.record(epoch, self.step, scores[stopping.metric])
        for entry in run.epochs:
            if entry["epoch"] == epoch:
                entry["validation"] = {"auc": scores["auc"], "logloss": scores["logloss"]}
        if show_progress:
            print(stopping.describe_last(), flush=True)
        if stop:
            self.position.stopped = run.stopped = True
            if show_progress and epoch < self.position.epochs:
                print(f"early    stop after epoch {epoch} of {self.position.epochs}: "
                      f"{stopping.spec.patience} epoch(s) without a gain of more than "
                      f"{stopping.spec.min_delta} in validation {stopping.metric}", flush=True)
        self._pin_best()
        self._checkpoint(run.progress, show_progress)
        run.saved_at = self.step
        cadence.saved(time.perf_counter(), self.step)
        return stop

    def _validation_scores(self, run: _Attempt, show_progress: bool) -> dict[str, float]:
        """AUC and logloss of early stopping's label on the validation split. Under
        ``multi_worker_mirrored`` the workers checkpoint, the chief scores that checkpoint
        alone on one device, and sends the figures to the others."""
        label = self.early_stopping.label
        if not self.lockstep:
            metrics, _ = evaluate_split(self.runtime, self.model, self.validation,
                                        self.config.labels, {})
            return metrics["labels"][label]
        self._checkpoint(run.progress, show_progress)
        figures = (0.0, 0.0)
        if self.is_chief:
            metrics = evaluate_on_one_device(self.config, self.checkpoints.latest(),
                                             self.validation, self.config.labels, {})
            figures = (metrics["labels"][label]["auc"], metrics["labels"][label]["logloss"])
        auc, logloss = from_chief(self.runtime.strategy, figures, self.is_chief)
        return {"auc": auc, "logloss": logloss}

    def _unscored_pass(self, run: _Attempt, cadence: _Cadence, show_progress: bool) -> None:
        """A resumed run whose checkpoint was written after a pass ended but before it
        was scored scores it now (the weights are that pass's: the next pass had not
        started)."""
        stopping = self.early_stopping
        if (stopping is not None and not self.position.stopped
                and self.position.passes_done > stopping.scored_passes):
            self._after_pass(run, self.position.passes_done, cadence, show_progress)

    def _pin_best(self) -> None:
        best = self.early_stopping.best if self.early_stopping else None
        self.checkpoints.pinned = {best["step"]} if best else set()

    def _restore_best(self, show_progress: bool) -> bool:
        """Loads the best pass's weights when the run ends on a worse one (keeping the
        global step); True when it did."""
        best = self.early_stopping.best if self.early_stopping else None
        if best is None or best["step"] == self.step:
            return False
        saved = self.checkpoints.at_step(best["step"])
        if saved is None:
            raise CheckpointError(f"{self.checkpoints.root}: the checkpoint of the best "
                                  f"epoch ({best['epoch']}, step {best['step']:,}) is gone; "
                                  "it is kept for early stopping, so it was removed by hand")
        step = self.step
        restore(self.checkpoint, saved)
        self.global_step.assign(step)
        if show_progress:
            print(f"best     epoch {best['epoch']} (validation {self.early_stopping.metric} "
                  f"{best['value']:.4f}): its weights, from {saved.directory}, are the "
                  "run's final model", flush=True)
        return True

    def dynamic_table_stats(self) -> dict[str, dict]:
        """:meth:`DynamicTable.stats` of every dynamic table, by ``<layer>_<table>``, with
        ``admitted_this_run`` once training began and ``evicted_at_start`` where
        :meth:`evict_unseen` dropped ids."""
        found = {}
        for tables in self.model.dynamic_tables.values():
            for table in tables:
                stats = found[table.name] = table.stats()
                if self._live_at_start is not None and table.name in self._live_at_start:
                    stats["admitted_this_run"] = max(
                        0, stats["live_ids"] - self._live_at_start[table.name])
                if table.name in self.evicted:
                    stats["evicted_at_start"] = self.evicted[table.name]["evicted"]
        return found

    def _end_epoch(self, epoch: int, show_progress: bool, reset: bool = True) -> dict:
        """The training AUC of pass ``epoch`` (from 0), which has just ended; the AUC
        metrics then start over for the next pass."""
        aucs = {n: float(m.result()) for n, m in self.auc.items()}
        if show_progress and self.position.epochs > 1:
            print(f"epoch {epoch + 1}/{self.position.epochs} done: "
                  + ", ".join(f"train auc/{n} {v:.4f}" for n, v in aucs.items()), flush=True)
        if reset:
            for metric in self.auc.values():
                metric.reset_state()
        return {"epoch": epoch + 1, "auc": aucs}

    def _checkpoint(self, progress: _Progress, show_progress: bool) -> None:
        saved = self.save_checkpoint(progress.rows)
        if show_progress:
            position = self.position
            upload = saved.state.get("upload_seconds")
            print(f"checkpoint step {saved.step:,}: {position.finished_rows:,} of "
                  f"{position.total_rows:,} rows done, saved in "
                  f"{saved.state['save_seconds']:.1f}s"
                  + (f" and uploaded in {upload:.1f}s" if upload is not None else "")
                  + f" to {saved.directory}", flush=True)

    def _log(self, steps, window, recent, epoch, pass_rows: int) -> None:
        (t0, rows0), (t1, rows1) = window[0], window[-1]
        if t1 <= t0 or rows1 <= rows0:
            return  # no rate yet
        rate = (rows1 - rows0) / (t1 - t0)
        done, total = self.position.finished_rows, self.position.total_rows
        eta = (total - done) / rate
        # The AUC's counts live on the parameter servers and are read while workers add
        # to them, so a reading can be off by the rows in flight; early in a pass that is
        # most of what was counted (readings above 1 were seen). So it is shown once the
        # pass has counted 20 times the rows in flight.
        spec = self.pipeline.spec
        in_flight = 2 * self.runtime.num_workers * self.config.train.steps_per_call * (
            spec.batch_size)
        if pass_rows >= 20 * in_flight:
            aucs = " ".join(f"auc/{n} {float(m.result()):.4f}" for n, m in self.auc.items())
        else:
            aucs = " ".join(f"auc/{n} (pass starting)" for n in self.auc)
        passes = self.position.epochs
        if passes > 1 and epoch is not None:
            aucs += f" (epoch {epoch + 1}/{passes})"
        print(f"step {steps:,} | {rate:,.0f} ex/s | loss {_mean_loss(recent):.4f} | {aucs} | "
              f"{100 * done / max(total, 1):.0f}% | ETA {eta:.0f}s", flush=True)

    def _summaries(self, writer, steps, rate, recent) -> None:
        with writer.as_default(step=steps):
            _scalar("loss", _mean_loss(recent))
            _scalar("examples_per_second", rate)
            for name, metric in self.auc.items():
                _scalar(f"auc/{name}", float(metric.result()))
            for table, stats in self.dynamic_table_stats().items():
                for key in ("live_ids", "admitted_this_run", "dropped_full",
                            "lookups_without_row", "counted_not_admitted"):
                    if key in stats:
                        _scalar(f"dynamic/{table}/{key}", stats[key])

    def write_config_files(self) -> None:
        """Writes the resolved config and its feature config into ``model_dir`` (local or
        remote): ``evaluate`` and ``export`` read them when given no ``--config``."""
        for name, text in resolved_files(self.config).items():
            storage_io.write_text(storage_io.join(self.model_dir, name), text)

    def write_run_files(self, result: TrainResult, eval_metrics: dict | None) -> None:
        """Writes the run's figures into ``model_dir``: ``train_result.json``."""
        summary = dataclasses.asdict(result) | {
            "examples_per_second": result.examples_per_second,
            "seconds_to_first_step": result.seconds_to_first_step, "eval": eval_metrics}
        storage_io.write_text(storage_io.join(self.model_dir, RESULT_FILE),
                              json.dumps(summary, indent=2))


def worker_rows(start: int, stop: int, worker: int, workers: int) -> tuple[int, int]:
    """The rows of item ``[start, stop)`` that ``worker`` of ``workers`` reads under
    ``multi_worker_mirrored``: ``[start + w n / W, start + (w + 1) n / W)``, ``n`` its rows."""
    n = stop - start
    return start + worker * n // workers, start + (worker + 1) * n // workers


#: What ``tf.summary.scalar`` attaches to a scalar (TensorBoard's scalars plugin, data
#: version 0, which serializes to no bytes).
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))


def _scalar(name: str, value) -> None:
    """Writes a scalar summary as ``tf.summary.scalar`` does, without importing
    TensorBoard's Python package on first use (0.6 s of every ``train``)."""
    tf.summary.write(name, tf.cast(value, tf.float32), metadata=_SCALAR_METADATA)


def _mean_loss(recent) -> float:
    loss = sum(value for value, _ in recent)
    weight = sum(w for _, w in recent)
    return loss / weight if weight else float("nan")


