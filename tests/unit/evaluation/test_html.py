"""HTML and plot helpers of the evaluation reports (``recsys_dist/evaluation/html.py``):
escaping, number formats, the colour of a delta by the metric's direction, tables and
embedded PNGs."""

from __future__ import annotations

import base64
import math

import numpy as np

from recsys_dist.evaluation import html


def test_text_is_escaped_for_html_and_attributes():
    assert (
        html.escape("<b a=\"1\">x & 'y'</b>")
        == "&lt;b a=&quot;1&quot;&gt;x &amp; &#x27;y&#x27;&lt;/b&gt;"
    )
    assert html.escape(3) == "3"


def test_only_finite_numbers_are_formatted():
    assert [
        html.is_number(v) for v in (1, 2.5, np.float64(0.1), True, None, math.nan, math.inf, "1")
    ] == [True, True, True, False, False, False, False, False]
    assert html.fmt(0.123456) == "0.1235" and html.fmt(2, 1) == "2.0"
    assert html.fmt(None) == html.fmt(math.nan) == html.fmt(True) == "n/a"
    assert html.fmt_int(1234567.9) == "1,234,567" and html.fmt_int(math.inf) == "n/a"


def test_a_delta_is_better_or_worse_by_the_direction_of_its_metric():
    assert html.fmt_delta(0.0012, "auc") == '<span class="better">+0.00120</span>'
    assert html.fmt_delta(-0.0012, "gauc") == '<span class="worse">-0.00120</span>'
    assert html.fmt_delta(0.0012, "logloss") == '<span class="worse">+0.00120</span>'
    assert html.fmt_delta(-0.0012, "normalized_entropy") == '<span class="better">-0.00120</span>'
    # Unknown direction, or too small to show at 5 decimals: plain.
    assert html.fmt_delta(0.0012, "calibration") == "+0.00120"
    assert html.fmt_delta(0.0012) == "+0.00120"
    assert html.fmt_delta(4e-6, "auc") == "+0.00000"
    assert html.fmt_delta(math.nan, "auc") == "n/a"


def test_a_table_escapes_its_header_and_aligns_name_columns_left():
    out = html.table(
        ["model", "a<b", "auc"], [["<i>m1</i>", "x", "0.7"], ["m2", "y", "0.8"]], name_columns=2
    )
    assert out.splitlines() == [
        "<table>",
        "<tr><th class=name>model</th><th class=name>a&lt;b</th><th>auc</th></tr>",
        "<tr><td class=name><i>m1</i></td><td class=name>x</td><td>0.7</td></tr>",
        "<tr><td class=name>m2</td><td class=name>y</td><td>0.8</td></tr>",
        "</table>",
    ]


def test_a_figure_becomes_an_embedded_png_and_is_closed():
    figure, axes = html.plt.subplots(figsize=(2, 2))
    axes.plot([0, 1], [0, 1])
    tag = html.png(figure)
    assert tag.startswith('<img alt="plot" src="data:image/png;base64,') and tag.endswith('">')
    data = base64.b64decode(tag.split("base64,")[1][:-2])
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert not html.plt.fignum_exists(figure.number)
