"""Offline evaluation of published models: each one scored on the same days, side by side.

Daily retraining publishes a model a day under ``ROOT/published/<date>/``.
:func:`evaluate_published` scores several of them on the same held-out dates, each with
its own ``config.yaml`` and checkpoint, so models whose feature configs differ are
compared on the same rows. The oldest is the reference: the others get metric deltas and
a paired bootstrap interval of the AUC delta against it (rows paired by row id), summed
up in ``OUT/comparison.json`` and a self-contained ``OUT/comparison.html``. A model
trained on an evaluation date is flagged (``trained_on_eval_dates``). ``ROOT`` and ``OUT``
may be local or remote (``storage_io``). See
docs/scheduling.md#offline-evaluation-of-the-published-models.
"""

from __future__ import annotations

import datetime
import posixpath
import shutil
import tempfile
from typing import Any, Callable, Sequence

from recsys_dist import storage_io
from recsys_dist.config import load_config
from recsys_dist.config.sections import DateRange
from recsys_dist.errors import RecsysError
from recsys_dist.evaluation.comparison_report import COMPARISON_HTML, write_comparison
from recsys_dist.evaluation.job import METRICS, run_evaluation
from recsys_dist.retrain.publish import SUCCESS, Publications, PublishError, local_config


class OfflineEvalError(RecsysError):
    """No published model to evaluate, a requested one is not published, or a published
    directory is incomplete (exit code 2)."""


# ---- finding published models ---------------------------------------------------------------


def _join(*parts: str) -> str:
    return posixpath.join(*parts)


def _select(pubs: Publications, models: Sequence[str] | None, last: int | None = None) -> list[str]:
    complete, incomplete = ([d.isoformat() for d in dates] for dates in pubs.scan())
    if not complete:
        extra = (
            f" ({len(incomplete)} incomplete publication(s) without {SUCCESS}: "
            f"{', '.join(incomplete)})"
            if incomplete
            else ""
        )
        raise OfflineEvalError(
            f"{pubs.published}: no published model (a complete "
            f"one has {SUCCESS}){extra}; run recsys-dist retrain first"
        )
    if not models:
        return complete[-last:] if last else complete
    wanted = sorted({m.strip() for m in models if m.strip()})
    if not wanted:
        raise OfflineEvalError(
            "--models is empty; give dates like 2026-01-05,2026-01-06 or "
            "leave it out to evaluate every published model"
        )
    missing = [m for m in wanted if m not in complete]
    if missing:
        why = [f"{m} (incomplete: no {SUCCESS})" if m in incomplete else m for m in missing]
        raise OfflineEvalError(
            f"not published under {pubs.published}: "
            f"{', '.join(why)}; published models: {', '.join(complete)}"
        )
    return wanted[-last:] if last else wanted


def _publication(pubs: Publications, date: str, scratch: str) -> tuple[dict, str, str]:
    """``(manifest, checkpoint, local config path)`` of a complete publication."""
    day = datetime.date.fromisoformat(date)
    try:
        manifest = pubs.manifest(day)
        return (
            manifest,
            pubs.checkpoint(day, manifest),
            local_config(pubs.directory(day), scratch),
        )
    except PublishError as exc:
        raise OfflineEvalError(str(exc)) from None


# ---- evaluating -----------------------------------------------------------------------------


def _overlaps(train_dates: Any, evaluated: DateRange) -> bool | None:
    try:
        trained = DateRange.parse(str(train_dates))
    except ValueError:
        return None
    return trained.first <= evaluated.last and evaluated.first <= trained.last


def _model_entry(
    date: str, manifest: dict, metrics: dict, current: str | None, evaluated: DateRange
) -> dict:
    labels = {}
    comparison = (metrics.get("comparison") or {}).get("labels") or {}
    for label, entry in metrics["labels"].items():
        summary = {
            "auc": entry.get("auc"),
            "logloss": entry.get("logloss"),
            "normalized_entropy": entry.get("normalized_entropy"),
            "calibration_ratio": (entry.get("calibration") or {}).get("ratio"),
            "ctr": entry.get("ctr"),
            "predicted_ctr": entry.get("predicted_ctr"),
        }
        if entry.get("gauc"):
            summary["gauc"] = entry["gauc"].get("gauc")
        if entry.get("oracle"):
            summary["oracle_auc"] = entry["oracle"].get("auc")
        versus = comparison.get(label)
        summary["delta"] = versus.get("delta") if versus else None
        summary["bootstrap"] = versus.get("bootstrap") if versus else None
        labels[label] = summary
    train_dates = manifest.get("train_dates")
    return {
        "date": date,
        "current": date == current,
        "step": metrics.get("step", manifest.get("step")),
        "parent": manifest.get("parent"),
        "train_dates": train_dates,
        "trained_on_eval_dates": _overlaps(train_dates, evaluated) if train_dates else None,
        "checkpoint": metrics.get("checkpoint"),
        "rows": metrics.get("rows"),
        "report": f"{date}/report.html",
        "labels": labels,
    }


def _plan(pubs: Publications, date: str, scratch: str, values: dict, evaluated: DateRange) -> tuple:
    """``(date, manifest, checkpoint, config)`` of one publication, its config loaded with
    the evaluation ``values``."""
    manifest, checkpoint, config_path = _publication(pubs, date, scratch)
    config = load_config(config_path, values=values, source=f"offline-eval of {evaluated}")
    return date, manifest, checkpoint, config


def _evaluate_plans(
    plans: list[tuple],
    out_dir: str,
    current: str | None,
    evaluated: DateRange,
    log: Callable[[str], None] | None,
) -> list[dict]:
    """Scores each planned publication into ``out_dir/<date>/``; the first is the
    reference the others are compared with."""
    reference = plans[0][0]
    reference_metrics = _join(out_dir, reference, METRICS)
    entries = []
    for index, (date, manifest, checkpoint, config) in enumerate(plans):
        if log is not None:
            log(
                f"evaluate {date} ({index + 1} of {len(plans)}): step "
                f"{manifest.get('step', '?')} on {evaluated}"
                + ("" if index == 0 else f", vs reference {reference}")
            )
        run_dir = posixpath.dirname(posixpath.dirname(checkpoint))
        result = run_evaluation(
            config,
            run_dir,
            _join(out_dir, date),
            checkpoint=checkpoint,
            baseline=None if index == 0 else reference_metrics,
        )
        entries.append(_model_entry(date, manifest, result.metrics, current, evaluated))
    return entries


def _comparison(
    root: str,
    evaluated: DateRange,
    reference: str,
    current: str | None,
    entries: list[dict],
    out_dir: str,
) -> dict:
    """What ``comparison.json`` holds (see :func:`evaluate_published`)."""
    return {
        "root": root,
        "dates": str(evaluated),
        "reference": reference,
        "current": current,
        "labels": list(dict.fromkeys(label for e in entries for label in e["labels"])),
        "rows": entries[0]["rows"],
        "models": entries,
        "html": _join(out_dir, COMPARISON_HTML),
    }


def evaluate_published(
    root: str,
    dates: str,
    out_dir: str,
    models: list[str] | None = None,
    data_path: str | None = None,
    *,
    last: int | None = None,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Scores published models on the same dates and writes one comparison report.

    Args:
      root: The retraining root holding ``published/<date>/`` (local or ``s3://``).
      dates: Evaluation dates, ``FROM..TO`` or one date (partitions under ``data.path``).
      out_dir: Output directory (local or remote): ``<date>/`` per model,
        ``comparison.json`` and ``comparison.html``.
      models: Dates of the published models to evaluate (default: every complete one).
        They are evaluated oldest first; the oldest is the reference.
      data_path: Data root overriding each model's ``data.path``.
      last: Keep only the newest ``last`` of the selected models (e.g. the last week's).
      log: Called with one line before each model is evaluated.

    Returns:
      The comparison (what ``comparison.json`` holds): ``{"root", "dates", "reference",
      "current", "labels", "rows", "models": [{"date", "current", "step", "parent",
      "train_dates", "trained_on_eval_dates", "checkpoint", "rows", "report", "labels":
      {label: {"auc", "logloss", "normalized_entropy", "calibration_ratio", "ctr",
      "predicted_ctr", "gauc" (with a group column), "oracle_auc" (with oracle logits),
      "delta", "bootstrap"}}}], "html"}``. ``delta`` and ``bootstrap`` (the paired
      interval of the AUC delta) are vs the reference, None for the reference itself.

    Raises:
      OfflineEvalError: No published model under ``root``, a requested date is not
        published, a publication lacks its manifest, config or checkpoint, or bad
        ``dates``.
      StorageError: ``out_dir`` cannot be written.
      ConfigError, DataError, CheckpointError: from loading a model's config or scoring it
        (e.g. an evaluation date with no partition).
    """
    try:
        evaluated = DateRange.parse(dates)
    except ValueError as exc:
        raise OfflineEvalError(f"--dates {exc}") from None
    if last is not None and last < 1:
        raise OfflineEvalError(f"--last must be at least 1, got {last}")
    pubs = Publications(root)
    selected, current = _select(pubs, models, last), pubs.current()
    values: dict = {"data.eval": {"dates": str(evaluated)}}
    if data_path is not None:
        values["data.path"] = data_path
    scratch = tempfile.mkdtemp(prefix="recsys_dist_offline_eval_")
    try:
        # Check every publication and config before the first (slow) evaluation starts.
        plans = [_plan(pubs, date, scratch, values, evaluated) for date in selected]
        storage_io.check_writable(out_dir, "the offline evaluation")
        entries = _evaluate_plans(plans, out_dir, current, evaluated, log)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    comparison = _comparison(root, evaluated, selected[0], current, entries, out_dir)
    write_comparison(out_dir, comparison)
    return comparison
