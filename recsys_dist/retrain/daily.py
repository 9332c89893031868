"""``recsys-dist retrain --date D``: one day of scheduled retraining, and ``backfill``.

For run date ``D`` (with ``retrain:`` in the config), :func:`retrain_day` resolves the
training and held-out windows from the date templates, does nothing if ``D`` is already
published or decided (reruns are idempotent), trains into ``ROOT/runs/D`` (resuming its
own checkpoint, else warm-starting from the newest model published before ``D``),
evaluates the new and the previous model on the same held-out rows, and publishes only if
the gate passes: export, config, manifest, then ``_SUCCESS``, then ``CURRENT``. A missing
training partition fails before anything is trained; a held-out partition not there yet
holds the day unless ``retrain.missing_eval: publish``. See docs/retrain.md.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile

import recsys_dist
from recsys_dist import storage_io
from recsys_dist.checkpoint.store import CheckpointManager, find_checkpoint
from recsys_dist.cluster.liveness import ImmediateRestart
from recsys_dist.config import load_config
from recsys_dist.config.experiment import ExperimentConfig, resolved_files
from recsys_dist.data import discovery
from recsys_dist.errors import ConfigError, DataError, RecsysError
from recsys_dist.evaluation.job import run_evaluation
from recsys_dist.retrain.publish import Publications, export_apart, local_config
from recsys_dist.retrain.templates import render
from recsys_dist.train.run import train_run

#: Exit code of a day whose model the gate rejected (the previous one stays current).
GATED_EXIT = 5
DECISION = "decision.json"
WARM_START = "warm_start.json"  # what a fresh day's run started from

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class DayOutcome:
    """How a day ended: ``published``, ``gated``, ``held``, or already done."""

    date: datetime.date
    status: str
    message: str
    exit_code: int = 0


def _windows(config: ExperimentConfig, date: datetime.date):
    spec = config.retrain
    windows = []
    for key in ("train_dates", "eval_dates"):
        try:
            windows.append(render(getattr(spec, key), date))
        except ValueError as exc:
            raise ConfigError(config.file, f"retrain.{key}", str(exc)) from None
    return windows


def _code_version() -> str:
    version = recsys_dist.__version__
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=os.path.dirname(os.path.dirname(recsys_dist.__file__)),
        )
        if commit.returncode == 0:
            version += f"+g{commit.stdout.strip()}"
    except OSError:
        pass
    return version


def _eval_present(config: ExperimentConfig) -> bool:
    try:
        discovery.discover_split(config.data.path, config.data.eval, config.data.partition_key)
    except DataError:
        return False
    return True


def _gate(config: ExperimentConfig, new: dict, old: dict | None) -> tuple[bool, str]:
    gate = config.retrain.gate
    label = gate.label or config.labels[0]
    if label not in new["labels"]:
        raise ConfigError(
            config.file,
            "retrain.gate.label",
            f"unknown label {label!r}; the model predicts {', '.join(config.labels)}",
        )
    mine = new["labels"][label][gate.metric]
    if old is None:
        return True, f"first model: {gate.metric}/{label} {mine:.4f}, nothing to compare with"
    theirs = old["labels"][label][gate.metric]
    worse = theirs - mine if gate.metric == "auc" else mine - theirs
    verdict = worse <= gate.max_drop
    return verdict, (
        f"{gate.metric}/{label} {mine:.4f} vs previous {theirs:.4f}: "
        + ("better" if worse <= 0 else f"worse by {worse:.4f}")
        + f" (max_drop {gate.max_drop})"
    )


def _write_json(path: str, value: dict) -> None:
    storage_io.write_text(path, json.dumps(value, indent=2))


def _read_json(path: str) -> dict:
    try:
        return json.loads(storage_io.read_text(path))
    except ValueError as exc:
        raise RecsysError(f"{path}: not valid JSON ({exc})") from None


def _held(pubs: Publications, date: datetime.date) -> bool:
    """``date`` finished training but was neither published nor gated."""
    run_dir = pubs.run_dir(date)
    return (
        not pubs.is_published(date)
        and storage_io.exists(f"{run_dir}/train_result.json")
        and not storage_io.exists(f"{run_dir}/{DECISION}")
    )


@dataclasses.dataclass(frozen=True)
class _DayPlan:
    """What a day trains on and starts from (see :func:`_plan`)."""

    date: datetime.date
    config: ExperimentConfig  # with the day's windows
    pubs: Publications
    train_range: str
    eval_range: str
    eval_present: bool
    parent: datetime.date | None  # the newest model published before the date
    parent_manifest: dict | None
    restart_now: ImmediateRestart | None = None  # see train_run

    @property
    def run_dir(self) -> str:
        return self.pubs.run_dir(self.date)


def retrain_day(
    config_path: str,
    overrides: list[str],
    date: datetime.date,
    data_path: str | None = None,
    finish_held: bool = True,
    restart_now: ImmediateRestart | None = None,
) -> DayOutcome:
    """Runs (or recognises as done) the retraining of ``date``: plan, train, gate,
    publish; first finishes the day before if it was held for its held-out partition
    (``finish_held``). ``restart_now`` is :func:`train_run`'s.

    Raises:
      ConfigError: no ``retrain`` section, or a bad template.
      DataError: a training partition is missing or empty (nothing is published).
      ClusterLost: a parameter server was lost (rerun to resume).
    """
    base = _check_retrain_config(load_config(config_path, overrides))
    train_range, eval_range = (str(window) for window in _windows(base, date))
    pubs = Publications(base.retrain.root)
    done = _already_done(pubs, date)
    if done is not None:
        return done
    previous = date - datetime.timedelta(days=1)
    if finish_held and _held(pubs, previous):
        # The default schedule holds out the next day, which exists only a day later: a
        # day is trained on its date and gated and published on the next run.
        log.info(f"finish\t{previous} was held for its held-out partition; finishing it first")
        retrain_day(config_path, overrides, previous, data_path, False, restart_now)
    day = {"data.train": {"dates": train_range}, "data.eval": {"dates": eval_range}}
    if data_path is not None:
        day["data.path"] = data_path
    plan = _plan(
        load_config(config_path, overrides, day, source=f"retrain {date}"),
        pubs,
        date,
        train_range,
        eval_range,
        restart_now,
    )
    step, warm = _train(plan)
    if not plan.eval_present and base.retrain.missing_eval == "hold":
        message = (
            f"{date} trained (step {step:,}) but not published: the held-out "
            f"partition {eval_range} is not there yet; rerun the same command once it "
            "lands"
        )
        log.info(f"held\t{message}")
        return DayOutcome(date, "held", message)
    new_metrics, comparison, gate_message = None, None, "ungated"
    if plan.eval_present:
        new_metrics, passed, gate_message = _evaluate_and_gate(plan)
        comparison = new_metrics.get("comparison")
        if not passed:
            return _gated(plan, gate_message, comparison)
    return _publish(plan, new_metrics, comparison, gate_message, warm)


def _check_retrain_config(config: ExperimentConfig) -> ExperimentConfig:
    if config.retrain is None:
        raise ConfigError(
            config.file,
            "retrain",
            "missing; add retrain: {root: DIR} (and "
            "optionally train_dates, eval_dates, gate) to retrain daily",
        )
    if config.data is None:
        raise ConfigError(
            config.file, "data", "missing; retrain needs data.path with date partitions"
        )
    if config.train.early_stopping is not None:
        raise ConfigError(
            config.file,
            "train.early_stopping",
            "retrain does not stop early: "
            "its validation split would have to move with --date. Choose "
            "train.epochs offline (train with early_stopping on past days) and "
            "remove it, or --set train.early_stopping=null",
        )
    label = config.retrain.gate.label
    if label is not None and label not in config.labels:
        raise ConfigError(
            config.file,
            "retrain.gate.label",
            f"unknown label {label!r}; the model predicts {', '.join(config.labels)}",
        )
    return config


def _already_done(pubs: Publications, date: datetime.date) -> DayOutcome | None:
    """The outcome of a day that was published or decided before (reruns are no-ops)."""
    if pubs.is_published(date):
        message = f"{date} is already published in {pubs.directory(date)}; nothing to do"
        log.info(f"done\t{message}")
        return DayOutcome(date, "already_published", message)
    decision_path = f"{pubs.run_dir(date)}/{DECISION}"
    if not storage_io.exists(decision_path):
        return None
    decision = _read_json(decision_path)
    message = f"{date} was already decided: {decision['message']}; nothing to do"
    log.info(f"done\t{message}")
    return DayOutcome(date, "already_" + decision["status"], message, decision.get("exit_code", 0))


def _plan(
    config: ExperimentConfig,
    pubs: Publications,
    date: datetime.date,
    train_range: str,
    eval_range: str,
    restart_now: ImmediateRestart | None,
) -> _DayPlan:
    parent = pubs.latest_before(date)
    plan = _DayPlan(
        date,
        config,
        pubs,
        train_range,
        eval_range,
        _eval_present(config),
        parent,
        pubs.manifest(parent) if parent else None,
        restart_now,
    )
    log.info(
        f"retrain\t{date}: train on {train_range}, hold out {eval_range}"
        + ("" if plan.eval_present else " (not there yet)")
        + f"; previous published model: {parent or 'none'}"
    )
    return plan


def _train(plan: _DayPlan) -> tuple[int, dict | None]:
    """Trains the day (resuming its own run, else warm-starting from the parent); returns
    the final step and what a fresh run started from (``warm_start.json``)."""
    spec, run_dir = plan.config.retrain, plan.run_dir
    parent_checkpoint = None
    if plan.parent_manifest is not None and spec.warm_start:
        parent_checkpoint = find_checkpoint(
            plan.pubs.run_dir(plan.parent), plan.parent_manifest["checkpoint"]
        )
    warm_path = f"{run_dir}/{WARM_START}"
    if parent_checkpoint is not None and CheckpointManager(run_dir).latest() is None:
        storage_io.makedirs(run_dir)  # a fresh run: record what it starts from
        _write_json(
            warm_path,
            {
                "from": parent_checkpoint.directory,
                "parent": str(plan.parent),
                "step": parent_checkpoint.step,
            },
        )
    outcome = train_run(
        plan.config,
        run_dir,
        evaluate=False,
        warm_start_from=parent_checkpoint,
        on_table_resize=spec.on_table_resize,
        restart_now=plan.restart_now,
    )
    return outcome.step, _read_json(warm_path) if storage_io.exists(warm_path) else None


def _evaluate_and_gate(plan: _DayPlan) -> tuple[dict, bool, str]:
    """Scores the new model and the parent on the same held-out rows; the gate's verdict."""
    run_dir, old_metrics, baseline = plan.run_dir, None, None
    if plan.parent_manifest is not None:  # scored with its own config (features may drift)
        scratch = tempfile.mkdtemp(prefix="recsys_dist_parent_config_")
        try:  # (a remote publication's config is copied to local disk to be loaded)
            parent_config = load_config(
                local_config(plan.pubs.directory(plan.parent), scratch),
                values={
                    "data.eval": {"dates": plan.eval_range},
                    "data.path": plan.config.data.path,
                },
                source=f"retrain {plan.date}, previous model {plan.parent}",
            )
            old_metrics = run_evaluation(
                parent_config,
                plan.pubs.run_dir(plan.parent),
                f"{run_dir}/eval_previous",
                checkpoint=plan.parent_manifest["checkpoint"],
            ).metrics
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        baseline = f"{run_dir}/eval_previous/metrics.json"
    new_metrics = run_evaluation(plan.config, run_dir, f"{run_dir}/eval", baseline=baseline).metrics
    passed, message = _gate(plan.config, new_metrics, old_metrics)
    return new_metrics, passed, message


def _gated(plan: _DayPlan, gate_message: str, comparison: dict | None) -> DayOutcome:
    message = (
        f"{plan.date} NOT published: {gate_message}; {plan.parent} stays current "
        f"(report {plan.run_dir}/eval/report.html)"
    )
    _write_json(
        f"{plan.run_dir}/{DECISION}",
        {"status": "gated", "message": message, "exit_code": GATED_EXIT, "comparison": comparison},
    )
    log.info(f"gated\t{message}")
    return DayOutcome(plan.date, "gated", message, GATED_EXIT)


def _publish(
    plan: _DayPlan,
    new_metrics: dict | None,
    comparison: dict | None,
    gate_message: str,
    warm: dict | None,
) -> DayOutcome:
    """Exports the day's model and publishes it (``_SUCCESS`` last, then ``CURRENT``)."""
    config, date = plan.config, plan.date
    saved = find_checkpoint(plan.run_dir)
    directory = plan.pubs.begin(date)
    export_apart(plan.run_dir, f"{directory}/export")
    texts = resolved_files(config)
    manifest = {
        "date": date.isoformat(),
        "published_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "model": config.model.name,
        "labels": config.labels,
        "train_dates": plan.train_range,
        "eval_dates": plan.eval_range,
        "metrics": {
            label: {k: v for k, v in m.items() if k not in ("slices", "calibration")}
            for label, m in (new_metrics or {}).get("labels", {}).items()
        },
        "gate": gate_message,
        "comparison": comparison,
        "parent": plan.parent.isoformat() if plan.parent else None,
        "warm_started_from": warm["from"] if warm else None,
        "checkpoint": saved.directory,
        "step": saved.step,
        "config_sha256": hashlib.sha256("".join(texts.values()).encode()).hexdigest(),
        "code_version": _code_version(),
    }
    plan.pubs.finish(date, manifest, texts)
    message = f"{date} published to {directory} ({gate_message})"
    log.info(f"publish\t{message}")
    return DayOutcome(date, "published", message)


def backfill(
    config_path: str,
    overrides: list[str],
    first: datetime.date,
    last: datetime.date,
    data_path: str | None = None,
    restart_now: ImmediateRestart | None = None,
) -> list[DayOutcome]:
    """Runs ``retrain_day`` for every date from ``first`` to ``last``, in order.

    A gated or held day does not stop the backfill (the next day warm-starts from the
    newest published model); an error does.
    """
    if last < first:
        raise RecsysError(f"--to {last} is before --from {first}")
    outcomes = []
    for offset in range((last - first).days + 1):
        date = first + datetime.timedelta(offset)
        outcomes.append(
            retrain_day(config_path, overrides, date, data_path, restart_now=restart_now)
        )
    return outcomes
