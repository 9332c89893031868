"""What a training run did (:class:`TrainResult`) and the files a finished run leaves in
its model dir: the resolved configs (read by ``evaluate`` and ``export`` when given no
``--config``) and ``train_result.json``, written last."""

from __future__ import annotations

import dataclasses
import json

from recsys_dist import COMMAND_STARTED_AT, storage_io
from recsys_dist.config.experiment import ExperimentConfig, resolved_files

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
        return self.first_step_at - COMMAND_STARTED_AT if self.first_step_at is not None else None


def write_config_files(config: ExperimentConfig, model_dir: str) -> None:
    """Writes the resolved config and its feature config into ``model_dir`` (local or
    remote): ``evaluate`` and ``export`` read them when given no ``--config``."""
    for name, text in resolved_files(config).items():
        storage_io.write_text(storage_io.join(model_dir, name), text)


def write_result_file(model_dir: str, result: TrainResult, eval_metrics: dict | None) -> None:
    """Writes the run's figures into ``model_dir``: ``train_result.json``."""
    summary = dataclasses.asdict(result) | {
        "examples_per_second": result.examples_per_second,
        "seconds_to_first_step": result.seconds_to_first_step,
        "eval": eval_metrics,
    }
    storage_io.write_text(storage_io.join(model_dir, RESULT_FILE), json.dumps(summary, indent=2))


def finished(model_dir: str) -> bool:
    """Whether ``model_dir`` holds a run's result file (the run trained to its end)."""
    return storage_io.exists(storage_io.join(model_dir, RESULT_FILE))
