"""The trainer: a model on the parameter servers, its optimizers, metrics and checkpoints,
trained from the coordinator by a small loop (``train/loop.py``).

Where things live:

- Embedding tables, their optimizer slots, the global step and the streaming metrics
  are variables on the parameter servers. Tables are sharded by the strategy's
  partitioner (see ``cluster/runtime.py``).
- Dense towers are also variables on the parameter servers; each worker reads them
  when its step needs them (``train/async_runner.py``).

The parts: one replica's step (``train/step.py``), a runner per strategy family that
turns a work item into steps (``train/async_runner.py``: the coordinator's closures;
``train/lockstep_runner.py``: ``multi_worker_mirrored``), the loop that hands out items
(``train/loop.py``), and hooks for dynamic-table bookkeeping
(``train/table_bookkeeping.py``) and early stopping (``train/validation.py``). The
trainer owns the state they share: the model, the data position and the checkpoints.
"""

from __future__ import annotations

import contextlib
import logging
import math
import shutil
from typing import Literal

import tensorflow as tf

from recsys_dist import storage_io
from recsys_dist.checkpoint.restore import restore
from recsys_dist.checkpoint.signature import (
    check_signature,
    model_dir_dynamic_shards,
    model_signature,
)
from recsys_dist.checkpoint.store import (
    DAMAGED,
    CheckpointError,
    CheckpointManager,
    DamagedCheckpoint,
    SavedCheckpoint,
    local_prefix,
)
from recsys_dist.checkpoint.warm_start import WarmStartReport, stack_layouts, warm_start
from recsys_dist.cluster.collective import scratch_dir
from recsys_dist.cluster.failures import cluster_failures_as_cluster_lost
from recsys_dist.cluster.placement import new_run_dynamic_shards, placement_for
from recsys_dist.cluster.runtime import RECENTLY_AWAY_SECONDS, Runtime
from recsys_dist.config.experiment import ExperimentConfig
from recsys_dist.data.input_fn import InputPipeline
from recsys_dist.data.read_pass import worker_errors_as_data_errors
from recsys_dist.errors import ClusterLost
from recsys_dist.models.table_stack import TableStack
from recsys_dist.models.zoo import build_from_config
from recsys_dist.train.async_runner import async_train_item
from recsys_dist.train.attempt import Attempt
from recsys_dist.train.auc_reading import AucReader
from recsys_dist.train.data_position import DataPosition
from recsys_dist.train.dense_cache import check_dense_refresh
from recsys_dist.train.hooks import Hook
from recsys_dist.train.lockstep_runner import LockstepRunner
from recsys_dist.train.loop import LoopParts, TrainingLoop
from recsys_dist.train.optimizers import ModelOptimizers
from recsys_dist.train.reporting import log_checkpoint
from recsys_dist.train.result import (
    TrainResult,
    finished,
    write_config_files,
    write_result_file,
)
from recsys_dist.train.step import ReplicaStep, training_auc
from recsys_dist.train.table_bookkeeping import TableBookkeeping
from recsys_dist.train.validation import EarlyStoppingHook

log = logging.getLogger(__name__)


def data_position(config: ExperimentConfig, pipeline: InputPipeline) -> DataPosition:
    """A fresh data position over ``pipeline``'s items (one closure each)."""
    train = config.train
    items = pipeline.training_items(train.steps_per_call)
    return DataPosition(
        pipeline.plan.files,
        items,
        train.epochs,
        pipeline.spec.shuffle,
        train.seed,
        pipeline.plan.file_bytes,
        pipeline.contiguous_training_items(train.steps_per_call),
    )


def _complete(config: ExperimentConfig, position: DataPosition, step: int) -> bool:
    max_steps = config.train.max_steps
    return position.finished or (max_steps is not None and step >= max_steps)


def completed_run(
    config: ExperimentConfig, pipeline: InputPipeline, model_dir: str
) -> tuple[SavedCheckpoint, DataPosition] | None:
    """The newest checkpoint of ``model_dir`` if it already completes this run, else None.

    Needs no cluster, so a finished run is recognised before any server starts.
    """
    saved = CheckpointManager(model_dir).latest()
    if saved is None or not finished(model_dir):
        return None  # (a run killed after training but before its evaluation goes on)
    check_signature(saved, config)
    position = data_position(config, pipeline)
    position.restore(saved.state["position"], saved.directory)
    return (saved, position) if _complete(config, position, saved.step) else None


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

    def __init__(
        self,
        config: ExperimentConfig,
        runtime: Runtime,
        pipeline: InputPipeline,
        model_dir: str,
        validation: InputPipeline | None = None,
    ):
        self.config, self.runtime, self.pipeline, self.model_dir = (
            config,
            runtime,
            pipeline,
            model_dir,
        )
        train = config.train
        self.checkpoints = CheckpointManager(model_dir, train.keep_checkpoints)
        self._build(pipeline)
        self.checkpoint_object = tf.train.Checkpoint(
            model=self.model, global_step=self.global_step, **self.optimizers.checkpoint_objects()
        )
        # Workers 1.. of a multi_worker_mirrored job save too (saving takes part in
        # collectives), into a scratch directory nobody reads.
        self._scratch = None if runtime.is_chief else scratch_dir(model_dir, runtime.task_index)
        self._saves = (
            self.checkpoints if self._scratch is None else CheckpointManager(self._scratch, 1)
        )
        self.position = data_position(config, pipeline)
        self.restored: SavedCheckpoint | None = None
        self._rows_before = 0  # rows trained by earlier attempts (from the checkpoint)
        self.train_item = self._runner()
        self.bookkeeping = TableBookkeeping(self.model, config.data, self.optimizers.all)
        if train.early_stopping is not None and validation is None:
            raise ValueError("train.early_stopping needs the validation split's pipeline")
        self.early_stopping = (
            EarlyStoppingHook(self, validation) if train.early_stopping is not None else None
        )
        self.hooks: list[Hook] = [self.bookkeeping] + (
            [self.early_stopping] if self.early_stopping else []
        )

    def _build(self, pipeline: InputPipeline) -> None:
        """The model, its optimizers, the training AUCs and the global step, on the
        strategy's variables."""
        config = self.config
        strategy = self.runtime.strategy
        placement = placement_for(strategy)
        # a model dir keeps the dynamic tables' shard count it started with (placed
        # round-robin on however many servers this run has; a warm start re-shards)
        dynamic = any(t.dynamic for t in config.features.tables.values())
        self.dynamic_shards = (
            dynamic and model_dir_dynamic_shards(self.checkpoints)
        ) or new_run_dynamic_shards(placement, config.cluster.ps)
        with strategy.scope():
            self.model = build_from_config(
                config, placement.with_dynamic_shards(self.dynamic_shards)
            )
            # Slots exist before any restore (checkpoint/store.py says why).
            self.optimizers = ModelOptimizers(
                self.model,
                config.train,
                pipeline.spec.batch_size,
                steps_per_epoch=math.ceil(pipeline.total_rows / pipeline.spec.batch_size),
            )
            self.auc = training_auc(config.labels)
            self.auc_reader = AucReader(self.auc, self.runtime)
            self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")

    def _runner(self):
        """``train_item(file_index, start, stop, stride, max_steps)`` of the strategy's
        family."""
        runtime = self.runtime
        replicas = runtime.strategy.num_replicas_in_sync
        refresh_steps = self.config.train.dense_refresh_steps
        check_dense_refresh(self.config.file, refresh_steps, replicas)
        # Under multi_worker_mirrored every worker runs the loop (cluster/collective.py)
        # and reads its replica's rows only.
        replica = ReplicaStep(
            self.model,
            self.optimizers,
            self.auc,
            self.config.labels,
            replicas,
            slice_batch=not runtime.lockstep,
        )
        if runtime.lockstep:
            return LockstepRunner(
                runtime.strategy,
                self.pipeline,
                replica,
                self.global_step,
                runtime.num_workers,
                runtime.task_index,
            ).train_item
        return async_train_item(
            runtime.strategy, self.pipeline, replica, self.global_step, refresh_steps
        )

    @property
    def rows_in_flight(self) -> int:
        """Rows the closures in flight can hold at most."""
        return (
            2
            * self.runtime.num_workers
            * self.config.train.steps_per_call
            * self.pipeline.spec.batch_size
        )

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
                restore(self.checkpoint_object, saved)
            except DamagedCheckpoint as damage:
                log.warning("%s; trying the previous complete checkpoint", damage)
                damaged.append(damage)
                continue
            for damage in damaged if self.runtime.is_chief else ():  # once a good one is found
                self.checkpoints.mark_damaged(damage)
                log.warning(
                    "%s: marked %s, resuming from %s", damage.directory, DAMAGED, saved.directory
                )
            self._take_state(saved)
            return saved
        if damaged:
            raise CheckpointError(
                f"{self.checkpoints.root}: every complete checkpoint is "
                f"damaged ({'; '.join(str(d) for d in damaged)}); train "
                "into a new --model-dir, or remove them to start afresh"
            )
        return None

    def _take_state(self, saved: SavedCheckpoint) -> None:
        """The data position, rows trained and the hooks' state of a restored checkpoint."""
        self.position.restore(saved.state["position"], saved.directory)
        self._rows_before = int(saved.state.get("rows_trained", 0))
        for hook in self.hooks:
            hook.restore(saved.state.get(hook.state_key))
        self.restored = saved

    def warm_start(
        self, saved: SavedCheckpoint, on_table_resize: Literal["fail", "reinitialize"] = "fail"
    ) -> WarmStartReport:
        """Seeds weights, slots and step from another run's checkpoint (not its data
        position); see ``checkpoint/warm_start.py`` for how feature drift is handled."""
        with local_prefix(saved) as prefix:  # downloaded first when remote
            return warm_start(
                self.checkpoint_object,
                prefix,
                self._stacks(),
                saved.state.get("embedding_stacks", {}),
                self.optimizers.all,
                on_table_resize,
                source=saved.directory,
            )

    def evict_unseen(self) -> dict[str, dict]:
        """Eviction of daily retraining (after the warm start, before any step); see
        :meth:`TableBookkeeping.evict_unseen`."""
        return self.bookkeeping.evict_unseen()

    def remove_scratch(self) -> None:
        """Removes what a worker other than the chief wrote (call when the run is over)."""
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _stacks(self) -> list[TableStack]:
        return self.model.embedding_collection.stacks

    @property
    def step(self) -> int:
        return int(self.global_step.numpy())

    def is_complete(self) -> bool:
        """Every item ran ``epochs`` times, or the step budget is spent."""
        return _complete(self.config, self.position, self.step)

    def save_checkpoint(self, rows_this_attempt: int = 0) -> SavedCheckpoint:
        """Saves weights, slots, step and data position (call with no closure in flight)."""
        transform, features = self.pipeline.transform, self.config.features
        label_columns = {features.column_of(features.labels[n]) for n in self.config.labels}
        state = {
            "position": self.position.to_json(),
            "signature": model_signature(self.config, self.dynamic_shards),
            # where each table sits in its stack (a warm start finds rows by table)
            "embedding_stacks": stack_layouts(self._stacks()),
            # the raw columns the features read, as the Parquet files store them
            # (an export's serving signature takes exactly these)
            "feature_columns": {
                c: transform.column_dtypes[c] for c in transform.columns if c not in label_columns
            },
            "rows_trained": self._rows_before + rows_this_attempt,
            "complete": self.is_complete(),
        }
        for hook in self.hooks:
            kept = hook.state()
            if kept:
                state[hook.state_key] = kept
        return self._saves.save(self.checkpoint_object, self.step, state)

    def checkpoint(self, attempt: Attempt) -> SavedCheckpoint:
        """Saves a checkpoint of ``attempt`` (nothing in flight) and says so."""
        saved = self.save_checkpoint(attempt.counters.rows)
        log_checkpoint(saved, self.position)
        return saved

    # ---- training -----------------------------------------------------------------------
    def loop_parts(self) -> LoopParts:
        """What the training loop of the next attempt works with."""
        return LoopParts(
            runtime=self.runtime,
            train=self.config.train,
            first_step=self.step,
            batch_size=self.pipeline.spec.batch_size,
            position=self.position,
            train_item=self.train_item,
            hooks=self.hooks,
            count_sightings=self.model.count_sightings,
            labels=list(self.auc),
            auc_reader=self.auc_reader,
            rows_in_flight=self.rows_in_flight,
            checkpoint=self.checkpoint,
            table_stats=self.bookkeeping.stats,
            resumed=self.restored is not None,
            early_stopping=self.early_stopping.record if self.early_stopping else None,
        )

    def fit(self) -> TrainResult:
        """Trains what the data position has left, checkpointing on the way and at the end.

        Raises:
          DataError: a worker hit bad data (the message names file, column and row).
          ClusterLost: a parameter server was lost (restart from the last checkpoint).
        """
        if self.runtime.is_chief:  # evaluate and export read it by default, even mid-run
            write_config_files(self.config, self.model_dir)
        # TensorFlow writes the summaries locally; for a remote model dir they are staged
        # and uploaded at each checkpoint and at the end.
        with (
            self._storage_failures_of_unreachable_workers_as_cluster_lost(),
            worker_errors_as_data_errors(),
            cluster_failures_as_cluster_lost(self.runtime.lockstep),
            storage_io.StagedDir(
                storage_io.join(self._scratch or self.model_dir, "train")
            ) as summaries,
        ):
            writer = tf.summary.create_file_writer(summaries.local)
            try:
                result = TrainingLoop(self.loop_parts(), writer, summaries.sync).run()
            except ClusterLost:
                # Left open: closing it runs an op that, with a task lost, can wait for
                # ever on the task's dead connection; the run restarts from its last
                # checkpoint, whose summaries were written then.
                raise
            except BaseException:
                writer.close()
                raise
            writer.close()
            return result

    @contextlib.contextmanager
    def _storage_failures_of_unreachable_workers_as_cluster_lost(self):
        """A worker whose link was down could not reach storage either: its read failed
        after every retry, and the failure comes back when the link returns (a copy of
        the item may have trained elsewhere meanwhile, but ``ClusterCoordinator`` fails
        the run on any closure's error). That is a lost task, not a storage failure: the
        run restarts from its last checkpoint."""
        try:
            yield
        except storage_io.StorageError as exc:
            away = self.runtime.workers_unreachable_within(RECENTLY_AWAY_SECONDS)
            if not away:
                raise
            raise ClusterLost(
                f"worker {', '.join(map(str, away))} was unreachable while a read of it "
                f"failed ({exc})"
            ) from None

    def write_run_files(self, result: TrainResult, eval_metrics: dict | None) -> None:
        """Writes the run's figures into ``model_dir``: ``train_result.json``."""
        write_result_file(self.model_dir, result, eval_metrics)
