"""The comparison report of several models scored on the same rows: ``comparison.json`` and a
self-contained ``comparison.html`` (a table of all models and a bar chart of AUC per model with
the paired intervals of their difference from the reference; inline CSS, embedded PNG).

:func:`~recsys_dist.retrain.offline_eval.evaluate_published` builds the comparison dict and
writes it with :func:`write_comparison`.
"""

from __future__ import annotations

import json
import posixpath

import numpy as np

from recsys_dist import storage_io
from recsys_dist.evaluation.html import (
    CSS,
    escape,
    fmt,
    fmt_delta,
    fmt_int,
    is_number,
    plt,
    png,
    table,
)
from recsys_dist.evaluation.metrics import json_safe

COMPARISON_JSON = "comparison.json"
COMPARISON_HTML = "comparison.html"


def write_comparison(out_dir: str, comparison: dict) -> str:
    """Writes ``comparison.json`` and ``comparison.html`` into ``out_dir``; returns the HTML's
    path."""
    storage_io.write_text(
        posixpath.join(out_dir, COMPARISON_JSON),
        json.dumps(json_safe(comparison), indent=2, allow_nan=False) + "\n",
    )
    path = posixpath.join(out_dir, COMPARISON_HTML)
    storage_io.write_text(path, render_comparison_html(comparison))
    return path


def _interval(boot: dict | None) -> tuple[float, float] | None:
    if not boot or not (is_number(boot.get("low")) and is_number(boot.get("high"))):
        return None
    return boot["low"], boot["high"]


def render_comparison_html(comparison: dict) -> str:
    """The comparison as one self-contained HTML page (inline CSS, embedded PNG)."""
    labels = comparison["labels"]
    models = comparison["models"]
    title = f"Published models on {comparison['dates']}"
    has = {
        key: any(key in (m["labels"].get(label) or {}) for m in models for label in labels)
        for key in ("gauc", "oracle_auc")
    }
    header = ["model", "current", "step", "parent", "trained on"]
    for label in labels:
        prefix = f"{label}: " if len(labels) > 1 else ""
        header += [f"{prefix}{h}" for h in ["AUC", "Δ AUC", "Δ AUC interval", "P(worse)"]]
        header += [f"{prefix}GAUC"] if has["gauc"] else []
        header += [f"{prefix}{h}" for h in ["logloss", "Δ logloss", "NE", "calibration ratio"]]
        header += [f"{prefix}oracle AUC"] if has["oracle_auc"] else []
    rows = [_model_row(model, comparison, has) for model in models]
    notes = [
        f"{escape(fmt_int(comparison.get('rows')))} rows of "
        f"{escape(comparison['dates'])} from "
        f"{escape(comparison.get('root'))}; every model scores the same rows with its own "
        "config. Deltas are model minus the reference "
        f"({escape(comparison['reference'])}, the oldest model). The interval is a paired "
        "Poisson bootstrap percentile interval of the AUC difference on the same rows; "
        "P(worse) is the fraction of replicates where the model's AUC is below the "
        "reference's. In the chart, a model's error bar is that interval shifted onto its "
        "AUC. Each date links to the model's full report."
    ]
    if any(m.get("trained_on_eval_dates") for m in models):
        notes.append("* trained on some of the evaluation dates: its metrics there are optimistic.")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        *[f'<p class="note">{note}</p>' for note in notes],
        "<h2>Models</h2>",
        table(header, rows, name_columns=1),
        "<h2>AUC per model</h2>",
        '<div class="plots">' + _auc_chart(comparison) + "</div>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _model_row(model: dict, comparison: dict, has: dict[str, bool]) -> list[str]:
    """One model's row of the comparison table (cells are HTML)."""
    trained = escape(model.get("train_dates") or "n/a")
    if model.get("trained_on_eval_dates"):
        trained += " *"
    row = [
        f'<a href="{escape(model["report"])}">{escape(model["date"])}</a>',
        "yes" if model.get("current") else "",
        escape(fmt_int(model.get("step"))),
        escape(model.get("parent") or "none"),
        trained,
    ]
    is_reference = model["date"] == comparison["reference"]
    for label in comparison["labels"]:
        entry = model["labels"].get(label) or {}
        delta = entry.get("delta") or {}
        boot = entry.get("bootstrap") or {}
        interval = _interval(boot)
        level = boot.get("confidence")
        row += [
            escape(fmt(entry.get("auc"))),
            "reference" if is_reference else fmt_delta(delta.get("auc"), "auc"),
            escape(
                f"[{interval[0]:+.5f}, {interval[1]:+.5f}]"
                + (f" at {100 * level:g}%" if level else "")
            )
            if interval
            else "n/a",
            escape(fmt(boot.get("p_worse"), 3)),
        ]
        row += [escape(fmt(entry.get("gauc")))] if has["gauc"] else []
        row += [
            escape(fmt(entry.get("logloss"))),
            "reference" if is_reference else fmt_delta(delta.get("logloss"), "logloss"),
            escape(fmt(entry.get("normalized_entropy"))),
            escape(fmt(entry.get("calibration_ratio"), 3)),
        ]
        row += [escape(fmt(entry.get("oracle_auc")))] if has["oracle_auc"] else []
    return row


def _auc_chart(comparison: dict) -> str:
    """One bar chart: AUC per model (a bar per label), with the paired interval of the
    difference from the reference drawn around each model's AUC."""
    labels, models = comparison["labels"], comparison["models"]
    values = {
        label: [(m["labels"].get(label) or {}).get("auc") for m in models] for label in labels
    }
    shown = [v for vs in values.values() for v in vs if is_number(v)]
    if not shown:
        return '<p class="note">No AUC to plot.</p>'
    figure, axes = plt.subplots(figsize=(max(5.0, 1.0 + 1.1 * len(models) * len(labels)), 4))
    width = 0.8 / len(labels)
    levels = [
        (m["labels"].get(label) or {}).get("bootstrap") or {} for m in models for label in labels
    ]
    level = next(
        (f"{100 * b['confidence']:g}%" for b in levels if is_number(b.get("confidence"))),
        "bootstrap",
    )
    positions = np.arange(len(models))
    low_edge, high_edge = min(shown), max(shown)
    for index, label in enumerate(labels):
        x = positions + (index - (len(labels) - 1) / 2) * width
        heights = [v if is_number(v) else np.nan for v in values[label]]
        axes.bar(
            x,
            heights,
            width * 0.9,
            label=label if len(labels) > 1 else None,
            color=None if len(labels) > 1 else "#4a7fb5",
        )
        bars = ([], [], [], [])  # x, auc, below, above
        for position, model, auc in zip(x, models, heights):
            entry = model["labels"].get(label) or {}
            interval = _interval(entry.get("bootstrap"))
            delta = (entry.get("delta") or {}).get("auc")
            if interval is None or not is_number(delta) or not np.isfinite(auc):
                continue
            # The delta's interval shifted onto this model's AUC: reference AUC + [low, high].
            below, above = max(0.0, delta - interval[0]), max(0.0, interval[1] - delta)
            for values_list, value in zip(bars, (position, auc, below, above)):
                values_list.append(value)
            low_edge, high_edge = min(low_edge, auc - below), max(high_edge, auc + above)
        if bars[0]:
            axes.errorbar(
                bars[0],
                bars[1],
                yerr=[bars[2], bars[3]],
                fmt="none",
                ecolor="#222",
                capsize=5,
                linewidth=1.2,
                label=f"{level} interval of the difference from the reference"
                if index == 0
                else None,
            )
    reference = values[labels[0]][0]
    if is_number(reference):
        axes.axhline(
            reference,
            color="#b00",
            linewidth=1,
            linestyle="--",
            label=f"reference {models[0]['date']}" + (f" ({labels[0]})" if len(labels) > 1 else ""),
        )
    pad = max(0.01, 0.15 * (high_edge - low_edge))
    axes.set_ylim(max(0.0, low_edge - pad), min(1.0, high_edge + pad))
    axes.set_xticks(
        positions,
        [m["date"] + ("\n(current)" if m.get("current") else "") for m in models],
        rotation=30 if len(models) > 8 else 0,
    )
    axes.set(ylabel="AUC", title=f"AUC on {comparison['dates']}")
    axes.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16 if len(models) <= 8 else -0.3),
        ncol=3,
        fontsize="small",
        frameon=False,
    )
    axes.grid(axis="y", alpha=0.3)
    # Drawn at its own size: the report's CSS shrinks plots to 420px.
    return png(figure).replace("<img ", '<img style="width: auto; max-width: 100%" ', 1)


def _fmt_text(value: object, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "n/a"


def comparison_text(comparison: dict) -> list[str]:
    """The comparison as text lines: one per model and label, with its AUC, the delta vs
    the reference and its interval, and its logloss; the current model is starred."""
    lines = [
        f"{'model':<12} {'step':>8} {'label':<12} {'AUC':>7} {'Δ AUC':>9} "
        f"{'interval':>21} {'logloss':>8}"
    ]
    for model in comparison["models"]:
        name = model["date"] + ("*" if model.get("current") else "")
        for label, entry in model["labels"].items():
            boot = entry.get("bootstrap") or {}
            delta = (entry.get("delta") or {}).get("auc")
            interval = (
                f"[{_fmt_text(boot.get('low'), '+.4f')}, {_fmt_text(boot.get('high'), '+.4f')}]"
                if boot
                else ""
            )
            shown = (
                "reference"
                if model["date"] == comparison["reference"]
                else _fmt_text(delta, "+.4f")
            )
            lines.append(
                f"{name:<12} {_fmt_text(model.get('step'), ',d'):>8} {label:<12} "
                f"{_fmt_text(entry.get('auc'), '.4f'):>7} {shown:>9} {interval:>21} "
                f"{_fmt_text(entry.get('logloss'), '.4f'):>8}"
            )
    if comparison.get("current"):
        lines.append(f"(* = current: {comparison['current']})")
    return lines
