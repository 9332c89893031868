"""The sections of a model and training config: ``data``, ``input``, ``model``,
``cluster``, ``train`` (its optimizers and early stopping), ``evaluation`` and ``retrain``,
one frozen dataclass each, parsed and checked by :func:`~recsys_dist.yaml_schema.parse_dataclass`
(each field's ``metadata`` gives its bounds). ``config/experiment.py`` reads a config file
into them; lower layers take the section they need.
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import field
from typing import Literal


@dataclasses.dataclass(frozen=True)
class DateRange:
    """An inclusive range of daily partitions, written ``FROM..TO`` or a single date."""

    first: datetime.date
    last: datetime.date

    @classmethod
    def parse(cls, text: str) -> "DateRange":
        """Parses ``"2026-01-01..2026-01-06"`` or ``"2026-01-07"``; raises ValueError."""
        parts = str(text).split("..")
        if len(parts) > 2:
            raise ValueError(f"got {text!r}; expected YYYY-MM-DD or YYYY-MM-DD..YYYY-MM-DD")
        try:
            first = datetime.date.fromisoformat(parts[0].strip())
            last = datetime.date.fromisoformat(parts[-1].strip())
        except ValueError:
            raise ValueError(
                f"got {text!r}; expected YYYY-MM-DD or YYYY-MM-DD..YYYY-MM-DD"
            ) from None
        if last < first:
            raise ValueError(f"got {text!r}; the range ends before it starts")
        return cls(first, last)

    def days(self) -> list[datetime.date]:
        """Returns every date in the range, in order."""
        count = (self.last - self.first).days + 1
        return [self.first + datetime.timedelta(days=i) for i in range(count)]

    def __str__(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}..{self.last}"


@dataclasses.dataclass(frozen=True)
class DataSplit:
    """Which files make up a split: a date range of partitions, or a glob; and, when
    ``hash_share`` is set, which of their rows.

    Attributes:
      dates: ``FROM..TO`` (inclusive) or one date, over ``dt=YYYY-MM-DD`` partitions.
      glob: A glob relative to ``data.path`` (e.g. ``"dt=2026-01-0[1-6]/*.parquet"``).
      hash_share: ``[FROM, TO]``: only the rows whose hash falls in that share of the
        hash space, ``0 <= FROM < TO <= 1`` (the hash of the file's name and the row's
        number: ``data/hashed_rows.py``). Two splits of the same files with shares that
        do not overlap hold no row in common.
      start: When a ``glob`` split's partition starts (not a YAML key: a follow run sets
        it to its partition's start), the training window of dynamic tables' last-seen
        stamps and eviction.
    """

    dates: str | None = None
    glob: str | None = None
    hash_share: list[float] | None = None
    start: datetime.datetime | None = field(default=None, metadata={"internal": True})

    def __post_init__(self) -> None:
        share = self.hash_share
        if share is not None and not (len(share) == 2 and 0.0 <= share[0] < share[1] <= 1.0):
            raise ValueError(
                f"hash_share: got {list(share)}; expected [FROM, TO] with "
                "0 <= FROM < TO <= 1 (the share of the rows the split keeps)"
            )

    def date_range(self) -> DateRange | None:
        return DateRange.parse(self.dates) if self.dates is not None else None


@dataclasses.dataclass(frozen=True)
class DataSpec:
    """Where the Parquet data lives and how bad data is handled.

    Attributes:
      path: Root holding ``<partition_key>=YYYY-MM-DD/`` directories; local or ``s3://``.
      train: Files for training.
      eval: Files for held-out evaluation.
      validation: Files scored after every training pass when ``train.early_stopping``
        is set (keep them apart from ``eval``, which then stays untouched by the choice
        of the pass).
      partition_key: Name of the date partition directory key.
      on_bad_file: ``fail`` or ``skip`` a file that is corrupt, truncated or empty.
      on_bad_row: ``fail`` or ``skip`` (weight 0, counted) a row with a non-finite
        numeric value or a label outside {0, 1}.
      path_from_command_line: ``path`` came from ``--data`` (not a YAML key; see
        :meth:`ExperimentConfig.with_data_path`): a split the config does not define
        reads every file under it instead of failing.
      validation_carved: ``validation`` is the end of the config's ``train`` window,
        carved off because the config chose no validation split and no pass count (not
        a YAML key; see ``config/chosen_defaults.py``).

    ``path`` may also name one ``.parquet`` file or a glob: then every file there is read,
    whatever the split's dates.
    """

    path: str
    train: DataSplit | None = None
    eval: DataSplit | None = None
    validation: DataSplit | None = None
    partition_key: str = "dt"
    on_bad_file: Literal["fail", "skip"] = "fail"
    on_bad_row: Literal["fail", "skip"] = "fail"
    path_from_command_line: bool = field(default=False, metadata={"internal": True})
    validation_carved: bool = field(default=False, metadata={"internal": True})

    def carved_note(self) -> str | None:
        """The line saying where a carved validation split came from, or None."""
        if not self.validation_carved or self.validation is None or self.train is None:
            return None
        if self.validation.dates is None:
            low, high = self.validation.hash_share
            return (
                f"validation {high - low:.0%} of the rows of {self.train.glob} (by a hash "
                "of each row's file name and number) chooses the passes (training on the "
                "others); set data.validation, or train.epochs, to choose them yourself"
            )
        return (
            f"validation {self.validation.dates}, the end of the training window, chooses "
            f"the passes (training on {self.train.dates}); set data.validation, or "
            "train.epochs, to choose them yourself"
        )


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """The worker-side tf.data input function.

    Attributes:
      batch_size: Rows per batch on each worker.
      shuffle: Shuffle unit order and rows within each unit (training only).
      seed: Shuffle seed.
      read_parallelism: Units read and transformed at once on each worker.
      max_unit_rows: Row groups larger than this are split into several units.
      prefetch_batches: Batches prefetched on each worker.
    """

    batch_size: int = field(default=512, metadata={"min": 1})
    shuffle: bool = True
    seed: int = 0
    read_parallelism: int = field(default=2, metadata={"min": 1, "max": 64})
    max_unit_rows: int = field(default=131072, metadata={"min": 1})
    prefetch_batches: int = field(default=4, metadata={"min": 1})


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Which model of the zoo to build and which features and labels feed it.

    Attributes:
      name: A registered model (``@register_model`` in ``config/model_params.py``; see
        ``config/model_registry.py``).
      labels: Labels the model predicts; defaults to every label of the feature config.
      inputs: Feature names per input group of the model (``wide``, ``deep``);
        omitted, every feature goes to each of the model's groups.
      params: The model's hyper-parameters (``recsys_dist.config.model_params``); defaults
        for every key left out.
    """

    name: str
    labels: list[str] | None = field(default=None, metadata={"min_items": 1})
    inputs: dict[str, list[str]] | None = None
    params: object = None


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    """The cluster that runs the job.

    Attributes:
      mode: ``local`` starts servers as subprocesses on 127.0.0.1; ``in_process`` runs
        them inside the command's own process (fast to start, no fault isolation);
        ``tf_config`` joins the cluster described by the ``TF_CONFIG`` environment
        variable.
      workers: Worker servers (local and in_process modes); under ``mirrored``, the
        replicas (devices) of the one process; under ``multi_worker_mirrored`` (local
        mode), the worker processes.
      ps: Parameter servers (local and in_process modes); unused under ``mirrored``.
      strategy: ``parameter_server`` (asynchronous; tables sharded over parameter
        servers) or ``mirrored`` (synchronous, one process, a copy of every table on each
        replica; ``config/strategy.py`` checks what it needs) or ``multi_worker_mirrored``
        (synchronous, one process per worker, collective ops between them;
        ``cluster/collective.py``).
      lost_after_seconds: ``tf_config`` mode: a worker or parameter server unreachable
        this long is reported lost; a worker's work goes to the others, training waits
        for a parameter server (``cluster/liveness.py``).
      give_up_after_seconds: ``tf_config`` mode: a task unreachable this long ends the
        run with one line naming it (exit code 4); a rerun resumes from the last
        checkpoint.
    """

    mode: Literal["local", "in_process", "tf_config"] = "local"
    workers: int = field(default=2, metadata={"min": 1, "max": 64})
    ps: int = field(default=1, metadata={"min": 1, "max": 64})
    strategy: Literal["parameter_server", "mirrored", "multi_worker_mirrored"] = "parameter_server"
    lost_after_seconds: float = field(default=5.0, metadata={"min": 1.0})
    give_up_after_seconds: float = field(default=180.0, metadata={"min": 1.0})


@dataclasses.dataclass(frozen=True)
class OptimizerSpec:
    """An optimizer and its settings.

    Attributes:
      name: ``adagrad``, ``ftrl`` or ``sgd`` (embeddings or dense), ``adam`` (dense).
      learning_rate: Learning rate at ``train.base_batch_size``.
      initial_accumulator_value: Adagrad and FTRL accumulator start. The default, 1e-4,
        is far below TensorFlow's 0.1: the loss is a batch mean, so a table row's
        gradient is about 1/batch of an example's, and Adagrad divides it by
        sqrt(accumulator); from 0.1, a row seen a few times barely moves (rare ids and
        linear weights never learn), from 1e-4 each row's steps are set by its own
        gradients, which is what a per-coordinate rate is for.
      l1, l2: FTRL regularisation strengths.
      beta_1, beta_2, epsilon: Adam moments.
    """

    name: Literal["adagrad", "ftrl", "sgd", "adam"]
    learning_rate: float = field(metadata={"min": 0.0})
    initial_accumulator_value: float = field(default=1e-4, metadata={"min": 0.0})
    l1: float = field(default=0.0, metadata={"min": 0.0})
    l2: float = field(default=0.0, metadata={"min": 0.0})
    beta_1: float = field(default=0.9, metadata={"min": 0.0, "max": 1.0})
    beta_2: float = field(default=0.999, metadata={"min": 0.0, "max": 1.0})
    epsilon: float = field(default=1e-7, metadata={"min": 0.0})


@dataclasses.dataclass(frozen=True)
class EarlyStoppingSpec:
    """Stop training when the validation metric stops improving (``train.early_stopping``).

    After every pass the model scores ``data.validation``; when ``patience`` passes in a
    row gain less than ``min_delta`` over the best pass so far, training stops and the
    best pass's weights become the run's final model.

    Attributes:
      patience: Passes without a gain before stopping.
      min_delta: Smallest change of the metric that counts as a gain.
      metric: ``auc`` (higher is better) or ``logloss`` (lower is better).
      label: Label whose metric decides (default: the model's first label).
    """

    patience: int = field(default=2, metadata={"min": 1})
    min_delta: float = field(default=0.0, metadata={"min": 0.0})
    metric: Literal["auc", "logloss"] = "auc"
    label: str | None = None


#: Settings each optimizer reads besides ``name`` and ``learning_rate``.
OPTIMIZER_KEYS = {
    "adagrad": {"initial_accumulator_value"},
    "ftrl": {"initial_accumulator_value", "l1", "l2"},
    "sgd": set(),
    "adam": {"beta_1", "beta_2", "epsilon"},
}


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    """The training loop.

    Attributes:
      embedding_optimizer: Optimizer of the embedding tables (on the parameter servers).
      dense_optimizer: Optimizer of the dense towers.
      linear_optimizer: Optimizer of the per-id weights of linear parts (``lr``, the wide
        part of ``wide_deep``, the first-order part of ``deepfm``). Left out, such a
        model gets Adagrad at ``min(0.5, 1/sqrt(F))`` for its F linear features
        (:func:`~recsys_dist.config.model_params.default_linear_learning_rate`), its
        accumulator from 1e-4; ``null``: the embedding optimizer updates them too. A
        linear weight is a scalar per id and needs a larger step than an embedding row.
      steps_per_call: Training steps packed into each function the coordinator schedules.
      dense_refresh_steps: Read the dense weights from the parameter servers every this
        many steps instead of every step (``train/dense_cache.py``): a step's dense
        weights may then miss up to ``dense_refresh_steps - 1`` earlier steps of its
        worker. ``null``: read them every step, without the cache.
      epochs: Passes over the training split (ignored when ``max_steps`` ends it first).
        Left out: 1, or :data:`~recsys_dist.config.chosen_defaults.EPOCHS_WITH_VALIDATION`
        when ``data.validation`` is set (early stopping then ends the run) and the
        config has no ``retrain`` section. A config that sets neither ``epochs`` nor
        ``data.validation`` and trains on 3 or more days gets the last tenth of them as
        its validation split (``chosen_defaults.carve_validation``).
      early_stopping: Stop before ``epochs`` when the ``data.validation`` metric stops
        improving, and keep the best pass's weights. Left out, it is on (default
        settings) when ``data.validation`` is set, ``epochs`` is at least 2 and the config
        has no ``retrain`` section; ``null``: off.
      max_steps: Stop after this many steps in total (over all workers).
      lr_scaling: Scale learning rates with the per-step batch (``input.batch_size`` times
        the replicas of a worker) relative to ``base_batch_size``: ``linear``, ``sqrt``
        or ``none``.
      base_batch_size: The batch size the learning rates are given for.
      warmup_steps: Raise every optimizer's learning rate linearly over the first this
        many steps (all workers' steps: the optimizers' step counter), from
        ``1/warmup_steps`` of it to all of it, then keep it. Asynchronous workers start
        from the same fresh weights, and Adagrad's first steps on a row are about its
        whole learning rate whatever the gradient; ramping up keeps those steps from
        adding up (docs/training.md#learning-rate-warm-up). ``null``: off.
      lr_decay_per_epoch: Lower every optimizer's learning rate smoothly by this factor
        per pass over the training split: ``rate * factor ** (step / steps_per_pass)``
        (after the warm-up's ramp, which multiplies it). ``null``: off.
      embedding_shard_bytes: Minimum bytes of one embedding shard; a table is split into
        at most one shard per parameter server.
      log_every_seconds: Progress line interval.
      summary_every_seconds: TensorBoard summary interval.
      seed: Seed of the model initialisers.
      checkpoint_every_steps: Save a checkpoint after this many steps (``null``: off).
      checkpoint_every_seconds: Save a checkpoint after this many seconds (``null``:
        off). Whichever comes first triggers; a run always saves at its end.
      keep_checkpoints: Complete checkpoints kept in ``model_dir/checkpoints``.
      max_restarts: Times one ``train`` command restarts itself from its last
        checkpoint after losing a parameter server, before giving up.
      refit: When the validation split was carved from the end of the training window
        (``epochs`` left out): after early stopping chose the passes on it, train a fresh
        model on the whole window for that many passes, which becomes the run's model
        (``train/refit.py``). ``false``: the best pass's model, trained without the
        carved days, is the run's model.
    """

    embedding_optimizer: OptimizerSpec = OptimizerSpec("adagrad", 0.05)
    dense_optimizer: OptimizerSpec = OptimizerSpec("adam", 0.001)
    linear_optimizer: OptimizerSpec | None = None
    steps_per_call: int = field(default=20, metadata={"min": 1})
    dense_refresh_steps: int | None = field(default=None, metadata={"min": 1})
    epochs: int = field(default=1, metadata={"min": 1})
    early_stopping: EarlyStoppingSpec | None = None
    max_steps: int | None = field(default=None, metadata={"min": 1})
    lr_scaling: Literal["none", "linear", "sqrt"] = "none"
    base_batch_size: int = field(default=512, metadata={"min": 1})
    warmup_steps: int | None = field(default=None, metadata={"min": 1})
    lr_decay_per_epoch: float | None = field(default=None, metadata={"min": 0.01, "max": 1.0})
    embedding_shard_bytes: int = field(default=1 << 20, metadata={"min": 1})
    log_every_seconds: float = field(default=5.0, metadata={"min": 0.0})
    summary_every_seconds: float = field(default=10.0, metadata={"min": 0.0})
    seed: int = 0
    checkpoint_every_steps: int | None = field(default=None, metadata={"min": 1})
    checkpoint_every_seconds: float | None = field(default=600.0, metadata={"min": 0.0})
    keep_checkpoints: int = field(default=3, metadata={"min": 1})
    max_restarts: int = field(default=3, metadata={"min": 0})
    refit: bool = True


@dataclasses.dataclass(frozen=True)
class EvaluationSpec:
    """Offline evaluation by ``recsys-dist evaluate`` (and ``retrain``'s gate).

    ``train``'s own held-out evaluation reports the plain metrics only.

    Attributes:
      slice_columns: Columns to break AUC and logloss down by (integer, string or
        boolean), e.g. a country or a device type.
      group_column: Column grouping impressions for GAUC, e.g. ``user_id``.
      calibration_bins: Bins of the reliability curve.
      max_slices: Largest slices reported per column; the rest are merged.
      bootstrap_replicates: Poisson-bootstrap replicates for the AUC delta against
        a baseline.
    """

    slice_columns: list[str] = dataclasses.field(default_factory=list)
    group_column: str | None = None
    calibration_bins: int = field(default=20, metadata={"min": 2, "max": 1000})
    max_slices: int = field(default=20, metadata={"min": 1})
    bootstrap_replicates: int = field(default=200, metadata={"min": 10})


@dataclasses.dataclass(frozen=True)
class GateSpec:
    """When a retrained model may replace the published one.

    Attributes:
      label: Label whose metric decides (default: the model's first label).
      metric: ``auc`` (higher is better) or ``logloss`` (lower is better).
      max_drop: How much worse than the previous model, on the same held-out
        partition, the new one may be and still be published.
    """

    label: str | None = None
    metric: Literal["auc", "logloss"] = "auc"
    max_drop: float = field(default=0.002, metadata={"min": 0.0})


@dataclasses.dataclass(frozen=True)
class RetrainSpec:
    """Scheduled daily retraining (``recsys-dist retrain --date D``).

    Attributes:
      root: Directory holding ``runs/<date>/``, ``published/<date>/`` and ``CURRENT``.
      train_dates: Training window as a date template relative to ``--date``:
        ``"{date}"``, ``"{date-1}"``, ``"{date-6}..{date}"``.
      eval_dates: Held-out partition(s), a template too (default: the next day).
      warm_start: Start from the previous published model (weights, optimizer state).
      on_table_resize: A table whose size changed since the previous model: ``fail``
        (the default) or ``reinitialize`` (start that table fresh).
      missing_eval: When the held-out partition is not there yet: ``hold`` (train,
        publish nothing; rerun once it lands) or ``publish`` (publish ungated).
      gate: The publication gate.
    """

    root: str
    train_dates: str = "{date}"
    eval_dates: str = "{date+1}"
    warm_start: bool = True
    on_table_resize: Literal["fail", "reinitialize"] = "fail"
    missing_eval: Literal["hold", "publish"] = "hold"
    gate: GateSpec = GateSpec()


@dataclasses.dataclass(frozen=True)
class FollowSpec:
    """Training on partitions as they land, with delta publications (``recsys-dist follow``).

    Attributes:
      root: Directory holding ``runs/<partition>/``, ``trained.json`` and ``published/``.
      partition: ``hour`` (``<key>=YYYY-MM-DD/hour=HH/``) or ``day`` (``<key>=YYYY-MM-DD/``).
      marker: The file whose presence marks a partition complete.
      poll_seconds: How often to look for partitions that landed.
      publish_every: Trained partitions per publication.
      base_every: Deltas between two full bases.
      keep_runs: Partition runs whose checkpoints are kept (the newest ones).
    """

    root: str
    partition: Literal["hour", "day"] = "hour"
    marker: str = "_SUCCESS"
    poll_seconds: float = field(default=30.0, metadata={"min": 0.01})
    publish_every: int = field(default=1, metadata={"min": 1})
    base_every: int = field(default=24, metadata={"min": 1})
    keep_runs: int = field(default=2, metadata={"min": 1})
