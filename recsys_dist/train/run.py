"""One training run end to end: plan, resume or warm start, train, evaluate, record.

``recsys-dist train`` and the daily ``retrain`` both run this. A lost parameter server
surfaces as :class:`~recsys_dist.errors.ClusterLost`; the command decides whether to
restart (the CLI starts itself again, which resumes from the last checkpoint).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Literal

from recsys_dist import storage_io
from recsys_dist.checkpoint.store import CheckpointManager, SavedCheckpoint
from recsys_dist.cluster.collective import CollectiveRun, agree, collective_task, launch
from recsys_dist.cluster.failures import cluster_failures_as_cluster_lost
from recsys_dist.cluster.liveness import ImmediateRestart
from recsys_dist.cluster.runtime import connect, log_dir_for, prepare_devices
from recsys_dist.cluster.server import ClusterError
from recsys_dist.config.experiment import CONFIG_FILE, ExperimentConfig, resolved_files
from recsys_dist.data.collisions import SAMPLE_ROWS, collision_warnings
from recsys_dist.data.input_fn import prepare_input
from recsys_dist.data.oracle import oracle_candidates, oracle_columns
from recsys_dist.evaluation.evaluate import evaluate_on_one_device, evaluate_split
from recsys_dist.train.trainer import Trainer, completed_run

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RunOutcome:
    """How a run ended.

    Attributes:
      already_complete: The model dir held a finished run; nothing was done.
      step: Global step of the run's final checkpoint.
      resumed_from: Checkpoint directory it resumed from (a crashed run), if any.
      warm_started_from: Checkpoint directory it was seeded from, if any.
      metrics: Held-out metrics, when evaluated.
    """

    already_complete: bool
    step: int
    resumed_from: str | None = None
    warm_started_from: str | None = None
    metrics: dict | None = None


def log_eval(labels: list[str], metrics: dict) -> None:
    for label in labels:
        m = metrics["labels"][label]
        line = f"eval\t{label}: AUC {m['auc']:.4f}, logloss {m['logloss']:.4f}"
        if "oracle" in m:
            line += f" | oracle AUC {m['oracle']['auc']:.4f}, logloss {m['oracle']['logloss']:.4f}"
        log.info("%s (%s rows)", line, f"{metrics['rows']:,}")


def _plan_inputs(config: ExperimentConfig, model_dir: str, evaluate: bool):
    """``(train input, eval input or None, oracle columns)``, planned and printed."""
    workers = config.cluster.workers
    train_input = prepare_input(config, "train", workers)
    log.info(
        f"train\t{len(train_input.plan.files)} files, {train_input.describe_rows()} "
        f"x {config.train.epochs} epoch(s), model {config.model.name}, labels "
        f"{', '.join(config.labels)}, model_dir {model_dir}"
    )
    eval_input, oracle = None, {}
    if evaluate and config.data is not None and config.data.eval is not None:
        eval_input = prepare_input(
            config, "eval", workers, optional_extra_columns=oracle_candidates(config.labels)
        )
        oracle = oracle_columns(config.labels, eval_input.extra_columns)
        log.info(
            f"eval\t{len(eval_input.plan.files)} files, {eval_input.describe_rows()}"
            + (f"; oracle logits: {', '.join(oracle.values())}" if oracle else "")
        )
    return train_input, eval_input, oracle


def _warn_collisions_on_first_run(config: ExperimentConfig, model_dir: str, train_input) -> None:
    """On a model dir's first run (no checkpoint yet), logs the warnings of
    :func:`~recsys_dist.data.collisions.collision_warnings` (a line for the hashed tables
    a sample of ``train_input``'s rows shows too small, one for the dynamic tables it
    would fill), before the first step. A restart after a lost server (``train`` started
    again before its first checkpoint) said them already. It reads in this process, so it
    runs once the strategy has set the process's devices up (``mirrored`` needs them
    before TensorFlow starts)."""
    if os.environ.get("RECSYS_DIST_RESTART"):  # set by the restart (commands.py)
        return
    if CheckpointManager(model_dir).latest() is not None:
        return
    started = time.perf_counter()
    lines = collision_warnings(train_input, config.cluster.ps)
    log_lines(lines)
    if lines:
        log.info(
            "tables\tchecked on the first %s training rows in %.1fs (only on a model "
            "dir's first run)",
            f"{SAMPLE_ROWS:,}",
            time.perf_counter() - started,
        )


def _plan_validation(config: ExperimentConfig):
    """The ``data.validation`` input early stopping scores after each pass, or None."""
    if config.train.early_stopping is None:
        return None
    validation = prepare_input(config, "validation", config.cluster.workers)
    spec = config.train.early_stopping
    carved = config.data.carved_note() if config.data is not None else None
    if carved:
        log.info("validate\t%s", carved)
    log.info(
        f"validate\t{len(validation.plan.files)} files, {validation.describe_rows()} "
        f"after every epoch; stop after {spec.patience} epoch(s) without a gain in "
        f"{spec.metric}"
    )
    return validation


def result_lines(result) -> list[str]:
    """What ``train`` prints of a :class:`~recsys_dist.train.trainer.TrainResult`."""
    lines = [
        f"trained  {result.steps:,} steps, {result.examples:,} examples in "
        f"{result.seconds:.1f}s ({result.examples_per_second:,.0f} ex/s, "
        f"{result.warm_examples_per_second:,.0f} ex/s after warm-up); final loss "
        f"{result.loss:.4f}; " + ", ".join(f"train auc/{k} {v:.4f}" for k, v in result.auc.items())
    ]
    if result.seconds_to_first_step is not None:
        lines.append(
            f"start-up first step {result.seconds_to_first_step:.1f}s after the command started"
        )
    stopping = result.early_stopping
    if stopping and stopping["best"]:
        best, last = stopping["best"], stopping["history"][-1]
        lines.append(
            f"best     epoch {best['epoch']} of {last['epoch']} trained: validation "
            f"{stopping['metric']}/{stopping['label']} {best['value']:.4f}"
            + ("; stopped early" if stopping["stopped"] else "")
        )
    lines.extend(dynamic_table_lines(result.dynamic_tables))
    return lines


def log_lines(lines: list[str]) -> None:
    """Logs :func:`result_lines`: a line that starts with ``warning`` as a warning."""
    for line in lines:
        word, _, rest = line.partition(" ")
        if word == "warning":
            log.warning("%s", rest.lstrip())
        else:
            log.info("%s\t%s", word, rest.lstrip())


#: A dynamic table whose fullest shard uses this share of its capacity gets a warning.
NEARLY_FULL = 0.9
#: What raising a dynamic table's capacity takes, said in those warnings.
RAISING = (
    " (a resumed run, an evaluation, an export or a warm start takes the new capacity; "
    "checkpoints and exports hold the live rows only, so room costs memory on the "
    "servers alone)"
)


def dynamic_table_lines(stats: dict[str, dict]) -> list[str]:
    """One line per dynamic table, and a warning for each that refused ids when full, or
    whose fullest shard is :data:`NEARLY_FULL`."""
    lines = []
    for name, s in stats.items():
        admitted = (
            f", {s['admitted_this_run']:,} admitted by this run" if "admitted_this_run" in s else ""
        )
        lines.append(
            f"table    {name}: {s['live_ids']:,} ids of capacity {s['capacity']:,} "
            f"({s['shards']} shards){admitted}; {s['counted_not_admitted']:,} ids "
            f"seen but not admitted yet; {s['lookups_without_row']:,} lookups read "
            "zeros"
            + (
                f"; {s['evicted_at_start']:,} evicted before training"
                if "evicted_at_start" in s
                else ""
            )
        )
        if s["dropped_full"]:
            lines.append(
                f"warning  dynamic table {name} is full: {s['dropped_full']:,} ids "
                f"were refused a row and read zeros; raise its capacity_per_shard"
                f"{RAISING}"
            )
        elif s.get("fullest_shard", 0) >= NEARLY_FULL:
            lines.append(
                f"warning  dynamic table {name} is nearly full: its fullest shard "
                f"uses {s['fullest_shard']:.0%} of capacity_per_shard; raise it "
                f"before new ids are refused{RAISING}"
            )
    return lines


def train_run(
    config: ExperimentConfig,
    model_dir: str,
    *,
    evaluate: bool = True,
    warm_start_from: SavedCheckpoint | None = None,
    on_table_resize: Literal["fail", "reinitialize"] = "fail",
    restart_now: ImmediateRestart | None = None,
    check_tables: bool = True,
) -> RunOutcome:
    """Trains ``config`` into ``model_dir``: resumes its own checkpoint if it has one,
    else starts from ``warm_start_from`` (if given), else from scratch. ``restart_now``
    starts the command again at once when a worker of a ``tf_config`` cluster is lost
    before the first step (``cluster.runtime.connect``). ``check_tables: False`` skips
    the first run's collision check (a command that checked the same tables already).

    Raises:
      ClusterLost: a parameter server was lost (restart to resume).
      DataError, ConfigError, CheckpointError, WarmStartError: bad input.
    """
    if config.cluster.strategy == "multi_worker_mirrored" and collective_task() is None:
        return _launch_workers(config, model_dir, evaluate, warm_start_from, on_table_resize)
    prepare_devices(config.cluster)
    train_input, eval_input, oracle = _plan_inputs(config, model_dir, evaluate)
    validation = _plan_validation(config)
    done = completed_run(config, train_input, model_dir)
    if done is not None:
        saved, position = done
        log.info(
            f"done\t{model_dir} already holds a complete run (checkpoint step "
            f"{saved.step:,}, {position.finished_rows:,} of {position.total_rows:,} rows); "
            "nothing to do. Train into a new --model-dir, or raise train.epochs or "
            "train.max_steps to go on"
        )
        return RunOutcome(True, saved.step)
    # Fail now, naming the path, rather than at the first checkpoint.
    storage_io.check_writable(model_dir, "the run's checkpoints")
    synchronous = config.cluster.strategy == "multi_worker_mirrored"
    with (
        cluster_failures_as_cluster_lost(synchronous),
        connect(
            config.cluster,
            log_dir_for(model_dir),
            config.train.embedding_shard_bytes,
            restart_now=restart_now,
        ) as runtime,
    ):
        log.info(f"cluster\t{runtime.describe()}")
        if runtime.is_chief and check_tables:  # after the strategy set the devices up
            _warn_collisions_on_first_run(config, model_dir, train_input)
        started = time.perf_counter()
        trainer = Trainer(config, runtime, train_input, model_dir, validation)
        log.info(
            f"model\t{config.model.name}: variables created in "
            f"{time.perf_counter() - started:.1f}s; the first step is traced next"
        )
        resumed = trainer.resume()
        warm = None
        if resumed is not None:
            position = trainer.position
            log.info(
                f"resume\tfrom {resumed.directory}: step {resumed.step:,}, "
                f"{position.finished_rows:,} of {position.total_rows:,} rows done"
            )
            if warm_start_from is not None:
                log.info(
                    f"warm\tstart from {warm_start_from.directory} skipped: this model "
                    "dir's own checkpoint goes on"
                )
        elif warm_start_from is not None:
            report = trainer.warm_start(warm_start_from, on_table_resize)
            warm = warm_start_from.directory
            log.info(
                f"warm\tstart from {warm}: step {trainer.step:,}, "
                f"{len(report.restored)} variables restored"
            )
            for line in report.warnings():
                log.warning("%s", line)
            for name, done in trainer.evict_unseen().items():
                log.info(
                    f"evict\ttable {name}: {done['evicted']:,} ids last seen before "
                    f"{done['oldest_seen']} dropped, {done['kept']:,} kept"
                )
        result = trainer.fit()
        log_lines(result_lines(result))
        metrics = _finish(config, runtime, trainer, result, eval_input, oracle)
        return RunOutcome(
            False, trainer.step, resumed.directory if resumed else None, warm, metrics
        )


def _finish(config: ExperimentConfig, runtime, trainer, result, eval_input, oracle) -> dict | None:
    """Evaluates (on the chief) and writes the run's files; the held-out metrics."""
    metrics = None
    if eval_input is not None and runtime.is_chief:
        metrics = _evaluate(config, runtime, trainer, eval_input, oracle)
        log_eval(config.labels, metrics)
    if runtime.is_chief:
        trainer.write_run_files(result, metrics)
    if runtime.lockstep:  # the other workers wait for the chief's evaluation
        agree(runtime.strategy, (True,), runtime.is_chief)
        trainer.remove_scratch()
    return metrics


def _evaluate(config: ExperimentConfig, runtime, trainer, eval_input, oracle) -> dict:
    """The held-out metrics of the trained model. A ``multi_worker_mirrored`` chief scores
    its final checkpoint alone, on one device of its own."""
    if runtime.lockstep:
        return evaluate_on_one_device(
            config, trainer.checkpoints.latest(), eval_input, config.labels, oracle
        )
    return evaluate_split(runtime, trainer.model, eval_input, config.labels, oracle)[0]


def _launch_workers(
    config: ExperimentConfig,
    model_dir: str,
    evaluate: bool,
    warm_start_from: SavedCheckpoint | None,
    on_table_resize: str,
) -> RunOutcome:
    """A local ``multi_worker_mirrored`` run: starts ``cluster.workers`` worker processes
    that each run :func:`train_run` (``cluster/collective.py``) and waits for them."""

    cluster = config.cluster
    if cluster.mode != "local":
        raise ClusterError(
            f"cluster.strategy: multi_worker_mirrored with cluster.mode: "
            f"{cluster.mode} needs TF_CONFIG with task.type 'worker' in every "
            "process (run recsys-dist train on each machine); TF_CONFIG is not "
            "set"
        )
    storage_io.check_writable(model_dir, "the run's checkpoints")
    log_dir = log_dir_for(model_dir)
    config_dir = os.path.join(log_dir, "collective_config")
    os.makedirs(config_dir, exist_ok=True)
    for name, text in resolved_files(config).items():
        with open(os.path.join(config_dir, name), "w", encoding="utf-8") as handle:
            handle.write(text)
    log.info(
        f"cluster\t{cluster.workers} worker processes (multi_worker_mirrored, synchronous); "
        f"worker 0's output follows, the others log in {log_dir}"
    )
    data = config.data
    run = CollectiveRun(
        os.path.join(config_dir, CONFIG_FILE),
        data.path if data is not None and data.path_from_command_line else None,
        model_dir,
        evaluate,
        warm_start_from.directory if warm_start_from else None,
        on_table_resize,
    )
    return RunOutcome(**launch(run, cluster.workers, log_dir, "recsys_dist.collective_worker"))
