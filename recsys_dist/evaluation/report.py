"""Writes an evaluation's ``metrics.json`` and a self-contained ``report.html``.

The HTML needs no other file and no network: the plots are PNGs embedded as base64
``data:image/png`` URIs and the CSS is inline. Plots are drawn with matplotlib's Agg backend.
Memory and time do not depend on the number of rows: the report reads only the metrics dict
and the downsampled ROC curves (at most a few hundred points each).
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

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


def write_report(
    out_dir: str,
    metrics: Mapping[str, Any],
    curves: Mapping[str, Any],
    title: str,
    comparison: Mapping[str, Any] | None = None,
) -> str:
    """Writes ``metrics.json`` and ``report.html`` into ``out_dir``.

    Args:
      out_dir: Directory, local or remote (``s3://``); created if missing.
      metrics: A :func:`~recsys_dist.evaluation.metrics.compute_metrics` result.
      curves: A :func:`~recsys_dist.evaluation.metrics.curves` result (plots only; not
        written to ``metrics.json``).
      title: Report title.
      comparison: Optional ``{"baseline": str, "labels": {label: {"delta": {...},
        "bootstrap": {...}}}}`` (see
        :func:`~recsys_dist.evaluation.metrics.build_comparison`); stored in
        ``metrics.json`` under ``"comparison"`` and shown as a table.

    Returns:
      The path of ``report.html``.

    Raises:
      ValueError: When ``metrics`` has no ``labels`` dict.
    """
    if not isinstance(metrics, Mapping) or not isinstance(metrics.get("labels"), Mapping):
        raise ValueError("metrics must be a dict from compute_metrics with a 'labels' key")
    document = dict(metrics)
    if comparison is not None:
        document["comparison"] = comparison
    path = storage_io.join(out_dir, "report.html")
    storage_io.write_text(path, render_html(metrics, curves, title, comparison))
    # metrics.json last: a baseline or a gate reading it finds the report complete.
    storage_io.write_text(
        storage_io.join(out_dir, "metrics.json"),
        json.dumps(json_safe(document), indent=2, allow_nan=False) + "\n",
    )
    return path


# ---- HTML -----------------------------------------------------------------------------------


def render_html(
    metrics: Mapping[str, Any],
    curves: Mapping[str, Any],
    title: str,
    comparison: Mapping[str, Any] | None = None,
) -> str:
    """The report as one self-contained HTML string (see :func:`write_report`)."""
    labels = metrics["labels"]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="note">{escape(fmt_int(metrics.get("rows")))} rows, total weight '
        f"{escape(_fmt_general(metrics.get('weight')))}.</p>",
        "<h2>Summary</h2>",
        _summary_table(labels, metrics.get("rows")),
    ]
    if comparison is not None:
        parts += ["<h2>Comparison</h2>", _comparison_table(comparison)]
    for label, entry in labels.items():
        parts.append(f"<h2>Label {escape(label)}</h2>")
        parts.append(_label_plots(label, entry, curves.get(label, {})))
        parts.append("<h3>Calibration bins</h3>")
        parts.append(_calibration_table(entry.get("calibration", {})))
        for column, rows in entry.get("slices", {}).items():
            parts.append(f"<h3>Slices by {escape(column)}</h3>")
            parts.append(_slice_table(rows))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _fmt_general(value: Any) -> str:
    return f"{value:,.8g}" if is_number(value) else "n/a"


def _summary_table(labels: Mapping[str, Any], total_rows: Any) -> str:
    has_gauc = any("gauc" in entry for entry in labels.values())
    has_oracle = any("oracle" in entry for entry in labels.values())
    header = ["label", "rows", "AUC"]
    header += ["GAUC", "groups used", "skipped groups", "skipped rows"] if has_gauc else []
    header += ["logloss", "NE", "CTR", "predicted CTR", "calibration ratio"]
    header += ["oracle AUC", "oracle logloss", "oracle NE"] if has_oracle else []
    rows = []
    for label, entry in labels.items():
        calibration = entry.get("calibration", {})
        row = [escape(label), escape(fmt_int(total_rows)), escape(fmt(entry.get("auc")))]
        if has_gauc:
            gauc = entry.get("gauc") or {}
            row += [
                escape(fmt(gauc.get("gauc"))),
                escape(fmt_int(gauc.get("groups"))),
                escape(fmt_int(gauc.get("skipped_groups"))),
                escape(fmt_int(gauc.get("skipped_rows"))),
            ]
        row += [
            escape(fmt(entry.get("logloss"))),
            escape(fmt(entry.get("normalized_entropy"))),
            escape(fmt(entry.get("ctr"), 5)),
            escape(fmt(entry.get("predicted_ctr"), 5)),
            escape(fmt(calibration.get("ratio"))),
        ]
        if has_oracle:
            oracle = entry.get("oracle") or {}
            row += [
                escape(fmt(oracle.get("auc"))),
                escape(fmt(oracle.get("logloss"))),
                escape(fmt(oracle.get("normalized_entropy"))),
            ]
        rows.append(row)
    return table(header, rows)


def _comparison_table(comparison: Mapping[str, Any]) -> str:
    header = [
        "label",
        "Δ AUC",
        "AUC Δ interval",
        "P(new worse)",
        "replicates",
        "Δ GAUC",
        "Δ logloss",
        "Δ NE",
        "Δ calibration ratio",
    ]
    rows = []
    for label, entry in (comparison.get("labels") or {}).items():
        delta = entry.get("delta") or {}
        boot = entry.get("bootstrap")
        if boot:
            level = boot.get("confidence")
            interval = f"[{fmt(boot.get('low'), 5)}, {fmt(boot.get('high'), 5)}]" + (
                f" at {100 * level:g}%" if is_number(level) else ""
            )
            boot_cells = [
                escape(interval),
                escape(fmt(boot.get("p_worse"), 3)),
                escape(fmt_int(boot.get("replicates"))),
            ]
        else:
            boot_cells = ["n/a", "n/a", "n/a"]
        rows.append(
            [
                escape(label),
                fmt_delta(delta.get("auc"), "auc"),
                *boot_cells,
                fmt_delta(delta.get("gauc"), "gauc"),
                fmt_delta(delta.get("logloss"), "logloss"),
                fmt_delta(delta.get("normalized_entropy"), "normalized_entropy"),
                fmt_delta(delta.get("calibration_ratio")),
            ]
        )
    note = (
        f'<p class="note">New minus baseline ({escape(comparison.get("baseline", "n/a"))}). '
        "The interval is a paired Poisson bootstrap percentile interval of the AUC "
        "difference on the same rows.</p>"
    )
    return note + "\n" + table(header, rows)


def _calibration_table(calibration: Mapping[str, Any]) -> str:
    header = [
        "bin",
        "lower",
        "upper",
        "mean predicted",
        "observed",
        "predicted/observed",
        "weight",
        "rows",
    ]
    rows = []
    for index, b in enumerate(calibration.get("bins") or []):
        predicted, observed = b.get("mean_predicted"), b.get("observed")
        ratio = (
            predicted / observed
            if is_number(predicted) and is_number(observed) and observed > 0
            else None
        )
        rows.append(
            [
                escape(index + 1),
                escape(fmt(b.get("lower"), 5)),
                escape(fmt(b.get("upper"), 5)),
                escape(fmt(predicted, 5)),
                escape(fmt(observed, 5)),
                escape(fmt(ratio, 3)),
                escape(fmt(b.get("weight"), 1)),
                escape(fmt_int(b.get("rows"))),
            ]
        )
    return table(header, rows)


def _slice_table(slices: Sequence[Mapping[str, Any]]) -> str:
    header = ["value", "rows", "CTR", "predicted CTR", "AUC", "logloss"]
    rows = [
        [
            escape(s.get("value")),
            escape(fmt_int(s.get("rows"))),
            escape(fmt(s.get("ctr"), 5)),
            escape(fmt(s.get("predicted_ctr"), 5)),
            escape(fmt(s.get("auc"))),
            escape(fmt(s.get("logloss"))),
        ]
        for s in slices
    ]
    return table(header, rows)


# ---- plots ----------------------------------------------------------------------------------


def _label_plots(label: str, entry: Mapping[str, Any], curves: Mapping[str, Any]) -> str:
    images = [_roc_plot(label, curves), _calibration_plot(label, entry.get("calibration", {}))]
    overall = entry.get("auc")
    for column, slices in entry.get("slices", {}).items():
        images.append(_slice_plot(label, column, slices, overall))
    return '<div class="plots">' + "\n".join(i for i in images if i) + "</div>"


def _roc_plot(label: str, curves: Mapping[str, Any]) -> str:
    drawn = {name: c for name, c in curves.items() if c and len(c.get("fpr") or []) >= 2}
    if not drawn:
        return ""
    figure, axes = plt.subplots(figsize=(5, 4.5))
    for name, curve in drawn.items():
        axes.plot(
            curve["fpr"],
            curve["tpr"],
            label=f"{name} (AUC {fmt(curve.get('auc'))})",
            linestyle="--" if name == "oracle" else "-",
        )
    axes.plot([0, 1], [0, 1], color="grey", linewidth=0.8, linestyle=":", label="chance")
    axes.set(
        xlim=(0, 1),
        ylim=(0, 1),
        xlabel="false positive rate",
        ylabel="true positive rate",
        title=f"ROC: {label}",
    )
    axes.legend(loc="lower right")
    axes.grid(alpha=0.3)
    return png(figure)


def _calibration_plot(label: str, calibration: Mapping[str, Any]) -> str:
    points = [
        (b["mean_predicted"], b["observed"])
        for b in calibration.get("bins") or []
        if is_number(b.get("mean_predicted")) and is_number(b.get("observed"))
    ]
    if not points:
        return ""
    predicted, observed = zip(*points)
    top = max(max(predicted), max(observed)) * 1.05 or 1.0
    figure, axes = plt.subplots(figsize=(5, 4.5))
    axes.plot(
        [0, top], [0, top], color="grey", linewidth=0.8, linestyle=":", label="perfect calibration"
    )
    axes.plot(predicted, observed, marker="o", label="model")
    axes.set(
        xlim=(0, top),
        ylim=(0, top),
        xlabel="mean predicted probability",
        ylabel="observed rate",
        title=f"Calibration: {label} (ratio {fmt(calibration.get('ratio'), 3)})",
    )
    axes.legend(loc="upper left")
    axes.grid(alpha=0.3)
    return png(figure)


def _slice_plot(label: str, column: str, slices: Sequence[Mapping[str, Any]], overall: Any) -> str:
    shown = [s for s in slices if is_number(s.get("auc"))]
    if not shown:
        return ""
    names = [str(s.get("value")) for s in shown][::-1]  # largest slice on top
    values = [s["auc"] for s in shown][::-1]
    figure, axes = plt.subplots(figsize=(5, 0.6 + 0.28 * len(shown)))
    axes.barh(range(len(shown)), values, color="#4a7fb5")
    axes.set_yticks(range(len(shown)), [n if len(n) <= 24 else n[:23] + "…" for n in names])
    if is_number(overall):
        axes.axvline(overall, color="#b00", linewidth=1, label=f"overall {overall:.4f}")
        axes.legend(loc="lower right", fontsize="small")
    low = min(values + ([overall] if is_number(overall) else []))
    high = max(values + ([overall] if is_number(overall) else []))
    axes.set(
        xlim=(max(0.0, low - 0.05), min(1.0, high + 0.05)),
        xlabel="AUC",
        title=f"AUC by {column}: {label}",
    )
    axes.grid(axis="x", alpha=0.3)
    return png(figure)
