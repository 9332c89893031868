"""Writes an evaluation's ``metrics.json`` and a self-contained ``report.html``.

The HTML needs no other file and no network: the plots are PNGs embedded as base64
``data:image/png`` URIs and the CSS is inline. Plots are drawn with matplotlib's Agg backend.
Memory and time do not depend on the number of rows: the report reads only the metrics dict
and the downsampled ROC curves (at most a few hundred points each).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from typing import Any, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from recsys_dist import storage_io  # noqa: E402
from recsys_dist.evaluation.metrics import _json_safe  # noqa: E402

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em;
       color: #222; max-width: 1200px; }
h1 { font-size: 1.6em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: right; }
th { background: #f3f3f3; } td.name, th.name { text-align: left; }
.plots { display: flex; flex-wrap: wrap; gap: 1em; }
.plots img { width: 420px; border: 1px solid #eee; }
.note { color: #666; font-size: 0.9em; }
.worse { color: #b00; } .better { color: #070; }
"""

# Metrics where a larger value is better; the others (logloss, NE) are better when smaller.
_HIGHER_IS_BETTER = {"auc": True, "gauc": True, "logloss": False, "normalized_entropy": False}


def write_report(out_dir: str, metrics: Mapping[str, Any], curves: Mapping[str, Any],
                 title: str, comparison: Mapping[str, Any] | None = None) -> str:
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
    storage_io.write_text(storage_io.join(out_dir, "metrics.json"),
                          json.dumps(_json_safe(document), indent=2, allow_nan=False) + "\n")
    return path


# ---- HTML -----------------------------------------------------------------------------------


def render_html(metrics: Mapping[str, Any], curves: Mapping[str, Any], title: str,
                comparison: Mapping[str, Any] | None = None) -> str:
    """The report as one self-contained HTML string (see :func:`write_report`)."""
    labels = metrics["labels"]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="note">{_e(_fmt_int(metrics.get("rows")))} rows, total weight '
        f'{_e(_fmt_general(metrics.get("weight")))}.</p>',
        "<h2>Summary</h2>",
        _summary_table(labels, metrics.get("rows")),
    ]
    if comparison is not None:
        parts += ["<h2>Comparison</h2>", _comparison_table(comparison)]
    for label, entry in labels.items():
        parts.append(f"<h2>Label {_e(label)}</h2>")
        parts.append(_label_plots(label, entry, curves.get(label, {})))
        parts.append("<h3>Calibration bins</h3>")
        parts.append(_calibration_table(entry.get("calibration", {})))
        for column, rows in entry.get("slices", {}).items():
            parts.append(f"<h3>Slices by {_e(column)}</h3>")
            parts.append(_slice_table(rows))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)


def _fmt(value: Any, digits: int = 4) -> str:
    return f"{value:.{digits}f}" if _is_number(value) else "n/a"


def _fmt_general(value: Any) -> str:
    return f"{value:,.8g}" if _is_number(value) else "n/a"


def _fmt_int(value: Any) -> str:
    return f"{int(value):,}" if _is_number(value) else "n/a"


def _fmt_delta(value: Any, metric: str | None = None) -> str:
    if not _is_number(value):
        return "n/a"
    text = _e(f"{value:+.5f}")
    if metric in _HIGHER_IS_BETTER and abs(value) >= 5e-6:  # visible at 5 decimals
        better = (value > 0) == _HIGHER_IS_BETTER[metric]
        return f'<span class="{"better" if better else "worse"}">{text}</span>'
    return text


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], name_columns: int = 1) -> str:
    """An HTML table; cells are already-escaped HTML; the first ``name_columns`` align left."""
    def cells(tag: str, values: Sequence[str]) -> str:
        return "".join(f'<{tag}{" class=name" if i < name_columns else ""}>{v}</{tag}>'
                       for i, v in enumerate(values))
    lines = ["<table>", f"<tr>{cells('th', [_e(h) for h in header])}</tr>"]
    lines += [f"<tr>{cells('td', row)}</tr>" for row in rows]
    lines.append("</table>")
    return "\n".join(lines)


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
        row = [_e(label), _e(_fmt_int(total_rows)), _e(_fmt(entry.get("auc")))]
        if has_gauc:
            gauc = entry.get("gauc") or {}
            row += [_e(_fmt(gauc.get("gauc"))), _e(_fmt_int(gauc.get("groups"))),
                    _e(_fmt_int(gauc.get("skipped_groups"))),
                    _e(_fmt_int(gauc.get("skipped_rows")))]
        row += [_e(_fmt(entry.get("logloss"))), _e(_fmt(entry.get("normalized_entropy"))),
                _e(_fmt(entry.get("ctr"), 5)), _e(_fmt(entry.get("predicted_ctr"), 5)),
                _e(_fmt(calibration.get("ratio")))]
        if has_oracle:
            oracle = entry.get("oracle") or {}
            row += [_e(_fmt(oracle.get("auc"))), _e(_fmt(oracle.get("logloss"))),
                    _e(_fmt(oracle.get("normalized_entropy")))]
        rows.append(row)
    return _table(header, rows)


def _comparison_table(comparison: Mapping[str, Any]) -> str:
    header = ["label", "Δ AUC", "AUC Δ interval", "P(new worse)", "replicates", "Δ GAUC",
              "Δ logloss", "Δ NE", "Δ calibration ratio"]
    rows = []
    for label, entry in (comparison.get("labels") or {}).items():
        delta = entry.get("delta") or {}
        boot = entry.get("bootstrap")
        if boot:
            level = boot.get("confidence")
            interval = (f"[{_fmt(boot.get('low'), 5)}, {_fmt(boot.get('high'), 5)}]"
                        + (f" at {100 * level:g}%" if _is_number(level) else ""))
            boot_cells = [_e(interval), _e(_fmt(boot.get("p_worse"), 3)),
                          _e(_fmt_int(boot.get("replicates")))]
        else:
            boot_cells = ["n/a", "n/a", "n/a"]
        rows.append([_e(label), _fmt_delta(delta.get("auc"), "auc"), *boot_cells,
                     _fmt_delta(delta.get("gauc"), "gauc"),
                     _fmt_delta(delta.get("logloss"), "logloss"),
                     _fmt_delta(delta.get("normalized_entropy"), "normalized_entropy"),
                     _fmt_delta(delta.get("calibration_ratio"))])
    note = (f'<p class="note">New minus baseline ({_e(comparison.get("baseline", "n/a"))}). '
            "The interval is a paired Poisson bootstrap percentile interval of the AUC "
            "difference on the same rows.</p>")
    return note + "\n" + _table(header, rows)


def _calibration_table(calibration: Mapping[str, Any]) -> str:
    header = ["bin", "lower", "upper", "mean predicted", "observed", "predicted/observed",
              "weight", "rows"]
    rows = []
    for index, b in enumerate(calibration.get("bins") or []):
        predicted, observed = b.get("mean_predicted"), b.get("observed")
        ratio = predicted / observed if _is_number(predicted) and _is_number(observed) \
            and observed > 0 else None
        rows.append([_e(index + 1), _e(_fmt(b.get("lower"), 5)), _e(_fmt(b.get("upper"), 5)),
                     _e(_fmt(predicted, 5)), _e(_fmt(observed, 5)), _e(_fmt(ratio, 3)),
                     _e(_fmt(b.get("weight"), 1)), _e(_fmt_int(b.get("rows")))])
    return _table(header, rows)


def _slice_table(slices: Sequence[Mapping[str, Any]]) -> str:
    header = ["value", "rows", "CTR", "predicted CTR", "AUC", "logloss"]
    rows = [[_e(s.get("value")), _e(_fmt_int(s.get("rows"))), _e(_fmt(s.get("ctr"), 5)),
             _e(_fmt(s.get("predicted_ctr"), 5)), _e(_fmt(s.get("auc"))),
             _e(_fmt(s.get("logloss")))] for s in slices]
    return _table(header, rows)


# ---- plots ----------------------------------------------------------------------------------


def _png(figure: Any) -> str:
    """Renders a figure to an ``<img>`` tag with an embedded base64 PNG, and closes it."""
    buffer = io.BytesIO()
    try:
        figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    finally:
        plt.close(figure)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="plot" src="data:image/png;base64,{data}">'


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
        axes.plot(curve["fpr"], curve["tpr"], label=f"{name} (AUC {_fmt(curve.get('auc'))})",
                  linestyle="--" if name == "oracle" else "-")
    axes.plot([0, 1], [0, 1], color="grey", linewidth=0.8, linestyle=":", label="chance")
    axes.set(xlim=(0, 1), ylim=(0, 1), xlabel="false positive rate",
             ylabel="true positive rate", title=f"ROC: {label}")
    axes.legend(loc="lower right")
    axes.grid(alpha=0.3)
    return _png(figure)


def _calibration_plot(label: str, calibration: Mapping[str, Any]) -> str:
    points = [(b["mean_predicted"], b["observed"]) for b in calibration.get("bins") or []
              if _is_number(b.get("mean_predicted")) and _is_number(b.get("observed"))]
    if not points:
        return ""
    predicted, observed = zip(*points)
    top = max(max(predicted), max(observed)) * 1.05 or 1.0
    figure, axes = plt.subplots(figsize=(5, 4.5))
    axes.plot([0, top], [0, top], color="grey", linewidth=0.8, linestyle=":",
              label="perfect calibration")
    axes.plot(predicted, observed, marker="o", label="model")
    axes.set(xlim=(0, top), ylim=(0, top), xlabel="mean predicted probability",
             ylabel="observed rate",
             title=f"Calibration: {label} (ratio {_fmt(calibration.get('ratio'), 3)})")
    axes.legend(loc="upper left")
    axes.grid(alpha=0.3)
    return _png(figure)


def _slice_plot(label: str, column: str, slices: Sequence[Mapping[str, Any]],
                overall: Any) -> str:
    shown = [s for s in slices if _is_number(s.get("auc"))]
    if not shown:
        return ""
    names = [str(s.get("value")) for s in shown][::-1]  # largest slice on top
    values = [s["auc"] for s in shown][::-1]
    figure, axes = plt.subplots(figsize=(5, 0.6 + 0.28 * len(shown)))
    axes.barh(range(len(shown)), values, color="#4a7fb5")
    axes.set_yticks(range(len(shown)), [n if len(n) <= 24 else n[:23] + "…" for n in names])
    if _is_number(overall):
        axes.axvline(overall, color="#b00", linewidth=1, label=f"overall {overall:.4f}")
        axes.legend(loc="lower right", fontsize="small")
    low = min(values + ([overall] if _is_number(overall) else []))
    high = max(values + ([overall] if _is_number(overall) else []))
    axes.set(xlim=(max(0.0, low - 0.05), min(1.0, high + 0.05)), xlabel="AUC",
             title=f"AUC by {column}: {label}")
    axes.grid(axis="x", alpha=0.3)
    return _png(figure)
