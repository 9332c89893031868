"""HTML and plot helpers of the evaluation reports: inline CSS, escaping, number formatting,
tables, and matplotlib figures embedded as base64 PNGs.

Used by :mod:`~recsys_dist.evaluation.report` and
:mod:`~recsys_dist.evaluation.comparison_report`. Importing this module selects matplotlib's
Agg backend; draw with its :data:`plt` so that the backend is chosen first.
"""

from __future__ import annotations

import base64
import html
import io
import math
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

CSS = """
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


def escape(value: Any) -> str:
    """``str(value)`` escaped for HTML text and attribute values (quotes too)."""
    return html.escape(str(value), quote=True)


def is_number(value: Any) -> bool:
    """True for a finite int or float (not a bool, not None, nan or inf)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def fmt(value: Any, digits: int = 4) -> str:
    """``value`` with ``digits`` decimals, or ``n/a`` when it is not a finite number."""
    return f"{value:.{digits}f}" if is_number(value) else "n/a"


def fmt_int(value: Any) -> str:
    """``value`` as an integer with thousands separators, or ``n/a``."""
    return f"{int(value):,}" if is_number(value) else "n/a"


def fmt_delta(value: Any, metric: str | None = None) -> str:
    """A signed difference with 5 decimals, as HTML: in a ``better``/``worse`` span when
    ``metric`` is one whose direction is known (auc, gauc, logloss, normalized_entropy)."""
    if not is_number(value):
        return "n/a"
    text = escape(f"{value:+.5f}")
    if metric in _HIGHER_IS_BETTER and abs(value) >= 5e-6:  # visible at 5 decimals
        better = (value > 0) == _HIGHER_IS_BETTER[metric]
        return f'<span class="{"better" if better else "worse"}">{text}</span>'
    return text


def table(header: Sequence[str], rows: Sequence[Sequence[str]], name_columns: int = 1) -> str:
    """An HTML table; cells are already-escaped HTML; the first ``name_columns`` align left."""

    def cells(tag: str, values: Sequence[str]) -> str:
        return "".join(
            f"<{tag}{' class=name' if i < name_columns else ''}>{v}</{tag}>"
            for i, v in enumerate(values)
        )

    lines = ["<table>", f"<tr>{cells('th', [escape(h) for h in header])}</tr>"]
    lines += [f"<tr>{cells('td', row)}</tr>" for row in rows]
    lines.append("</table>")
    return "\n".join(lines)


def png(figure: Any) -> str:
    """Renders a figure to an ``<img>`` tag with an embedded base64 PNG, and closes it."""
    buffer = io.BytesIO()
    try:
        figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    finally:
        plt.close(figure)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="plot" src="data:image/png;base64,{data}">'
