"""Offline evaluation of published models: each one scored on the same days, side by side.

The daily retraining publishes a model a day under ``ROOT/published/<date>/``. This
module scores several of them (default: every complete publication, i.e. every one with
``_SUCCESS``) on the same held-out dates and writes one comparison:

1. For each model, oldest first: load its own ``config.yaml`` (the resolved config it was
   trained with) with ``data.eval`` set to the requested dates (and ``data.path`` to
   ``data_path`` when given), and run
   :func:`~recsys_dist.evaluation.job.run_evaluation` on the checkpoint its
   ``manifest.json`` names. Output: ``OUT/<date>/`` (``metrics.json``,
   ``predictions.parquet``, ``report.html``).
2. The first (oldest selected) model is the reference; every other model is evaluated
   with ``baseline=OUT/<reference>/metrics.json``, which pairs the rows by row id and
   gives metric deltas and a paired bootstrap interval of the AUC delta.
3. ``OUT/comparison.json`` and a self-contained ``OUT/comparison.html`` (a table of all
   models and a bar chart of AUC per model with those intervals; the PNG is embedded, no
   external resource) sum it up.

Each model is scored with its own config, so models whose feature configs differ (a
feature added one day) are compared on the same rows. A model trained on one of the
evaluation dates is flagged (``trained_on_eval_dates``): its metrics on those dates
are optimistic.

``ROOT`` and ``OUT`` may be local or remote (``s3://``, ``hdfs://``): every file goes
through fsspec (``storage_io``), a remote publication's config is copied to local disk
to be loaded, and a remote checkpoint is downloaded before it is read.
"""

from __future__ import annotations

import datetime
import json
import os
import posixpath
import shutil
import tempfile
from typing import Any, Callable, Sequence

from recsys_dist import storage_io
from recsys_dist.config.experiment import DateRange
from recsys_dist.errors import RecsysError
from recsys_dist.retrain.publish import CURRENT, MANIFEST, SUCCESS, PublishError, local_config

COMPARISON_JSON = "comparison.json"
COMPARISON_HTML = "comparison.html"


class OfflineEvalError(RecsysError):
    """No published model to evaluate, a requested one is not published, or a published
    directory is incomplete (exit code 2)."""


# ---- finding published models ---------------------------------------------------------------


def _join(*parts: str) -> str:
    return posixpath.join(*parts)


def published_dates(root: str) -> tuple[list[str], list[str]]:
    """Dates under ``ROOT/published``: complete ones (with ``_SUCCESS``) and incomplete ones.

    Args:
      root: The retraining root (local or ``s3://``).

    Returns:
      ``(complete, incomplete)``, each a sorted list of ``YYYY-MM-DD`` strings. Entries
      whose name is not a date are ignored.
    """
    complete, incomplete = [], []
    for name in storage_io.listdir(_join(root, "published")):
        try:
            datetime.date.fromisoformat(name)
        except ValueError:
            continue
        if storage_io.exists(_join(root, "published", name, SUCCESS)):
            complete.append(name)
        else:
            incomplete.append(name)
    return sorted(complete), sorted(incomplete)


def _select(root: str, models: Sequence[str] | None, last: int | None = None) -> list[str]:
    complete, incomplete = published_dates(root)
    if not complete:
        extra = (f" ({len(incomplete)} incomplete publication(s) without {SUCCESS}: "
                 f"{', '.join(incomplete)})" if incomplete else "")
        raise OfflineEvalError(f"{_join(root, 'published')}: no published model (a complete "
                               f"one has {SUCCESS}){extra}; run recsys-dist retrain first")
    if not models:
        return complete[-last:] if last else complete
    wanted = sorted({m.strip() for m in models if m.strip()})
    if not wanted:
        raise OfflineEvalError("--models is empty; give dates like 2026-01-05,2026-01-06 or "
                               "leave it out to evaluate every published model")
    missing = [m for m in wanted if m not in complete]
    if missing:
        why = [f"{m} (incomplete: no {SUCCESS})" if m in incomplete else m for m in missing]
        raise OfflineEvalError(f"not published under {_join(root, 'published')}: "
                               f"{', '.join(why)}; published models: {', '.join(complete)}")
    return wanted[-last:] if last else wanted


def _manifest(directory: str) -> dict:
    path = _join(directory, MANIFEST)
    if not storage_io.exists(path):
        raise OfflineEvalError(f"{path}: missing; {directory} is not a complete publication")
    try:
        manifest = json.loads(storage_io.read_text(path))
    except ValueError as exc:
        raise OfflineEvalError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or not manifest.get("checkpoint"):
        raise OfflineEvalError(f"{path}: has no 'checkpoint' (the training checkpoint the "
                               "model was exported from)")
    return manifest


def _checkpoint(root: str, date: str, manifest: dict, manifest_path: str) -> str:
    """The manifest's checkpoint; if it moved with the root, ``ROOT/runs/<d>/checkpoints/...``."""
    path = str(manifest["checkpoint"]).rstrip("/")
    candidates = [path]
    if "://" not in path and not os.path.isabs(path):
        candidates.append(_join(root, path))
    parts = path.split("/")
    if len(parts) >= 4 and parts[-2] == "checkpoints" and parts[-4] == "runs":
        candidates.append(_join(root, "runs", parts[-3], "checkpoints", parts[-1]))
    for candidate in candidates:
        if storage_io.exists(candidate):
            return candidate
    raise OfflineEvalError(f"{manifest_path}: checkpoint {path} of published model {date} does "
                           f"not exist (was its run directory under {_join(root, 'runs')} "
                           "removed?); the offline evaluation scores training checkpoints")


def _local_config(directory: str, scratch: str) -> str:
    try:
        return local_config(directory, scratch)
    except PublishError as exc:
        raise OfflineEvalError(str(exc)) from None


# ---- evaluating -----------------------------------------------------------------------------


def _overlaps(train_dates: Any, evaluated: DateRange) -> bool | None:
    try:
        trained = DateRange.parse(str(train_dates))
    except ValueError:
        return None
    return trained.first <= evaluated.last and evaluated.first <= trained.last


def _model_entry(date: str, manifest: dict, metrics: dict, current: str | None,
                 evaluated: DateRange) -> dict:
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


def evaluate_published(root: str, dates: str, out_dir: str, models: list[str] | None = None,
                       data_path: str | None = None, *, last: int | None = None,
                       log: Callable[[str], None] | None = None) -> dict:
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
    from recsys_dist.config import load_config
    from recsys_dist.evaluation.job import METRICS, run_evaluation

    try:
        evaluated = DateRange.parse(dates)
    except ValueError as exc:
        raise OfflineEvalError(f"--dates {exc}") from None
    if last is not None and last < 1:
        raise OfflineEvalError(f"--last must be at least 1, got {last}")
    selected = _select(root, models, last)
    current_path = _join(root, CURRENT)
    current = (storage_io.read_text(current_path).strip() or None
               if storage_io.exists(current_path) else None)
    overrides = [f"data.eval={{dates: '{evaluated}'}}"]
    if data_path is not None:
        overrides.append(f"data.path={data_path}")
    # Check every publication and config before the first (slow) evaluation starts.
    plans = []
    scratch = tempfile.mkdtemp(prefix="recsys_dist_offline_eval_")
    try:
        for date in selected:
            directory = _join(root, "published", date)
            manifest = _manifest(directory)
            checkpoint = _checkpoint(root, date, manifest, _join(directory, MANIFEST))
            config = load_config(_local_config(directory, scratch), overrides)
            plans.append((date, manifest, checkpoint, config))
        storage_io.check_writable(out_dir, "the offline evaluation")
        reference = selected[0]
        reference_metrics = _join(out_dir, reference, METRICS)
        entries = []
        for index, (date, manifest, checkpoint, config) in enumerate(plans):
            if log is not None:
                log(f"evaluate {date} ({index + 1} of {len(plans)}): step "
                    f"{manifest.get('step', '?')} on {evaluated}"
                    + ("" if index == 0 else f", vs reference {reference}"))
            run_dir = posixpath.dirname(posixpath.dirname(checkpoint))
            result = run_evaluation(config, run_dir, _join(out_dir, date),
                                    checkpoint=checkpoint,
                                    baseline=None if index == 0 else reference_metrics)
            entries.append(_model_entry(date, manifest, result.metrics, current, evaluated))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    labels = list(dict.fromkeys(label for e in entries for label in e["labels"]))
    comparison = {
        "root": root,
        "dates": str(evaluated),
        "reference": reference,
        "current": current,
        "labels": labels,
        "rows": entries[0]["rows"],
        "models": entries,
        "html": _join(out_dir, COMPARISON_HTML),
    }
    write_comparison(out_dir, comparison)
    return comparison


# ---- the comparison report ------------------------------------------------------------------


def write_comparison(out_dir: str, comparison: dict) -> str:
    """Writes ``comparison.json`` and ``comparison.html`` into ``out_dir``; returns the HTML's
    path."""
    from recsys_dist.evaluation.metrics import _json_safe

    storage_io.write_text(_join(out_dir, COMPARISON_JSON),
                          json.dumps(_json_safe(comparison), indent=2, allow_nan=False) + "\n")
    path = _join(out_dir, COMPARISON_HTML)
    storage_io.write_text(path, render_comparison_html(comparison))
    return path


def _fmt_text(value: object, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "n/a"


def comparison_table(comparison: dict) -> list[str]:
    """The comparison as text lines: one per model and label, with its AUC, the delta vs
    the reference and its interval, and its logloss; the current model is starred."""
    lines = [f"{'model':<12} {'step':>8} {'label':<12} {'AUC':>7} {'Δ AUC':>9} "
             f"{'interval':>21} {'logloss':>8}"]
    for model in comparison["models"]:
        name = model["date"] + ("*" if model.get("current") else "")
        for label, entry in model["labels"].items():
            boot = entry.get("bootstrap") or {}
            delta = (entry.get("delta") or {}).get("auc")
            interval = (f"[{_fmt_text(boot.get('low'), '+.4f')}, "
                        f"{_fmt_text(boot.get('high'), '+.4f')}]" if boot else "")
            shown = ("reference" if model["date"] == comparison["reference"]
                     else _fmt_text(delta, "+.4f"))
            lines.append(f"{name:<12} {_fmt_text(model.get('step'), ',d'):>8} {label:<12} "
                         f"{_fmt_text(entry.get('auc'), '.4f'):>7} {shown:>9} {interval:>21} "
                         f"{_fmt_text(entry.get('logloss'), '.4f'):>8}")
    if comparison.get("current"):
        lines.append(f"(* = current: {comparison['current']})")
    return lines


def _interval(boot: dict | None) -> tuple[float, float] | None:
    from recsys_dist.evaluation.report import _is_number

    if not boot or not (_is_number(boot.get("low")) and _is_number(boot.get("high"))):
        return None
    return boot["low"], boot["high"]


def render_comparison_html(comparison: dict) -> str:
    """The comparison as one self-contained HTML page (inline CSS, embedded PNG)."""
    from recsys_dist.evaluation.report import _CSS, _e, _fmt, _fmt_delta, _fmt_int, _table

    labels = comparison["labels"]
    models = comparison["models"]
    title = f"Published models on {comparison['dates']}"
    has = {key: any(key in (m["labels"].get(label) or {}) for m in models for label in labels)
           for key in ("gauc", "oracle_auc")}
    header = ["model", "current", "step", "parent", "trained on"]
    for label in labels:
        prefix = f"{label}: " if len(labels) > 1 else ""
        header += [f"{prefix}{h}" for h in ["AUC", "Δ AUC", "Δ AUC interval", "P(worse)"]]
        header += [f"{prefix}GAUC"] if has["gauc"] else []
        header += [f"{prefix}{h}" for h in ["logloss", "Δ logloss", "NE", "calibration ratio"]]
        header += [f"{prefix}oracle AUC"] if has["oracle_auc"] else []
    rows = []
    for model in models:
        trained = _e(model.get("train_dates") or "n/a")
        if model.get("trained_on_eval_dates"):
            trained += " *"
        row = [f'<a href="{_e(model["report"])}">{_e(model["date"])}</a>',
               "yes" if model.get("current") else "", _e(_fmt_int(model.get("step"))),
               _e(model.get("parent") or "none"), trained]
        is_reference = model["date"] == comparison["reference"]
        for label in labels:
            entry = model["labels"].get(label) or {}
            delta = entry.get("delta") or {}
            boot = entry.get("bootstrap") or {}
            interval = _interval(boot)
            level = boot.get("confidence")
            row += [_e(_fmt(entry.get("auc"))),
                    "reference" if is_reference else _fmt_delta(delta.get("auc"), "auc"),
                    _e(f"[{interval[0]:+.5f}, {interval[1]:+.5f}]"
                       + (f" at {100 * level:g}%" if level else "")) if interval else "n/a",
                    _e(_fmt(boot.get("p_worse"), 3))]
            row += [_e(_fmt(entry.get("gauc")))] if has["gauc"] else []
            row += [_e(_fmt(entry.get("logloss"))),
                    "reference" if is_reference else _fmt_delta(delta.get("logloss"), "logloss"),
                    _e(_fmt(entry.get("normalized_entropy"))),
                    _e(_fmt(entry.get("calibration_ratio"), 3))]
            row += [_e(_fmt(entry.get("oracle_auc")))] if has["oracle_auc"] else []
        rows.append(row)
    notes = [f"{_e(_fmt_int(comparison.get('rows')))} rows of {_e(comparison['dates'])} from "
             f"{_e(comparison.get('root'))}; every model scores the same rows with its own "
             "config. Deltas are model minus the reference "
             f"({_e(comparison['reference'])}, the oldest model). The interval is a paired "
             "Poisson bootstrap percentile interval of the AUC difference on the same rows; "
             "P(worse) is the fraction of replicates where the model's AUC is below the "
             "reference's. In the chart, a model's error bar is that interval shifted onto its "
             "AUC. Each date links to the model's full report."]
    if any(m.get("trained_on_eval_dates") for m in models):
        notes.append("* trained on some of the evaluation dates: its metrics there are "
                     "optimistic.")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        *[f'<p class="note">{note}</p>' for note in notes],
        "<h2>Models</h2>",
        _table(header, rows, name_columns=1),
        "<h2>AUC per model</h2>",
        '<div class="plots">' + _auc_chart(comparison) + "</div>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _auc_chart(comparison: dict) -> str:
    """One bar chart: AUC per model (a bar per label), with the paired interval of the
    difference from the reference drawn around each model's AUC."""
    import numpy as np

    from recsys_dist.evaluation.report import _is_number, _png, plt

    labels, models = comparison["labels"], comparison["models"]
    values = {label: [(m["labels"].get(label) or {}).get("auc") for m in models]
              for label in labels}
    shown = [v for vs in values.values() for v in vs if _is_number(v)]
    if not shown:
        return '<p class="note">No AUC to plot.</p>'
    figure, axes = plt.subplots(figsize=(max(5.0, 1.0 + 1.1 * len(models) * len(labels)), 4))
    width = 0.8 / len(labels)
    levels = [(m["labels"].get(label) or {}).get("bootstrap") or {} for m in models
              for label in labels]
    level = next((f"{100 * b['confidence']:g}%" for b in levels
                  if _is_number(b.get("confidence"))), "bootstrap")
    positions = np.arange(len(models))
    low_edge, high_edge = min(shown), max(shown)
    for index, label in enumerate(labels):
        x = positions + (index - (len(labels) - 1) / 2) * width
        heights = [v if _is_number(v) else np.nan for v in values[label]]
        axes.bar(x, heights, width * 0.9, label=label if len(labels) > 1 else None,
                 color=None if len(labels) > 1 else "#4a7fb5")
        bars = ([], [], [], [])  # x, auc, below, above
        for position, model, auc in zip(x, models, heights):
            entry = model["labels"].get(label) or {}
            interval = _interval(entry.get("bootstrap"))
            delta = (entry.get("delta") or {}).get("auc")
            if interval is None or not _is_number(delta) or not np.isfinite(auc):
                continue
            # The delta's interval shifted onto this model's AUC: reference AUC + [low, high].
            below, above = max(0.0, delta - interval[0]), max(0.0, interval[1] - delta)
            for values_list, value in zip(bars, (position, auc, below, above)):
                values_list.append(value)
            low_edge, high_edge = min(low_edge, auc - below), max(high_edge, auc + above)
        if bars[0]:
            axes.errorbar(bars[0], bars[1], yerr=[bars[2], bars[3]], fmt="none",
                          ecolor="#222", capsize=5, linewidth=1.2,
                          label=f"{level} interval of the difference from the reference"
                          if index == 0 else None)
    reference = values[labels[0]][0]
    if _is_number(reference):
        axes.axhline(reference, color="#b00", linewidth=1, linestyle="--",
                     label=f"reference {models[0]['date']}"
                     + (f" ({labels[0]})" if len(labels) > 1 else ""))
    pad = max(0.01, 0.15 * (high_edge - low_edge))
    axes.set_ylim(max(0.0, low_edge - pad), min(1.0, high_edge + pad))
    axes.set_xticks(positions, [m["date"] + ("\n(current)" if m.get("current") else "")
                                for m in models], rotation=30 if len(models) > 8 else 0)
    axes.set(ylabel="AUC", title=f"AUC on {comparison['dates']}")
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16 if len(models) <= 8 else -0.3),
                ncol=3, fontsize="small", frameon=False)
    axes.grid(axis="y", alpha=0.3)
    # Drawn at its own size: the report's CSS shrinks plots to 420px.
    return _png(figure).replace("<img ", '<img style="width: auto; max-width: 100%" ', 1)
