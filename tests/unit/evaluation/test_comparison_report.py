"""The comparison report of several models on the same rows
(``recsys_dist/evaluation/comparison_report.py``), from a comparison built here the way
``retrain/offline_eval.py`` builds it: the text lines, the HTML table and chart, and
``comparison.json``. tests/cluster/test_offline_eval.py writes one from real models."""

from __future__ import annotations

import json
import math

from recsys_dist.evaluation.comparison_report import (
    comparison_text,
    render_comparison_html,
    write_comparison,
)


def entry(auc, logloss, delta=None, boot=None, **more) -> dict:
    return {
        "auc": auc,
        "logloss": logloss,
        "normalized_entropy": 0.9,
        "calibration_ratio": 1.02,
        "delta": delta,
        "bootstrap": boot,
        **more,
    }


def comparison(**changes) -> dict:
    out = {
        "root": "s3://bucket/root",
        "dates": "2026-01-04",
        "reference": "2026-01-01",
        "current": "2026-01-02",
        "labels": ["click"],
        "rows": 4000,
        "models": [
            {
                "date": "2026-01-01",
                "current": False,
                "step": 120,
                "parent": None,
                "train_dates": "2026-01-01",
                "report": "2026-01-01/report.html",
                "labels": {"click": entry(0.71, 0.52)},
            },
            {
                "date": "2026-01-02",
                "current": True,
                "step": 1250,
                "parent": "2026-01-01",
                "train_dates": "2026-01-01..2026-01-04",
                "trained_on_eval_dates": True,
                "report": "2026-01-02/report.html",
                "labels": {
                    "click": entry(
                        0.7312,
                        0.5,
                        {"auc": 0.0212, "logloss": -0.02},
                        {
                            "low": 0.011,
                            "high": 0.0305,
                            "confidence": 0.95,
                            "p_worse": 0.001,
                            "delta": 0.0212,
                        },
                    )
                },
            },
        ],
    }
    out.update(changes)
    return out


def test_text_has_a_line_per_model_and_label_with_the_reference_and_the_current():
    assert comparison_text(comparison()) == [
        "model            step label            AUC     Δ AUC              interval  logloss",
        "2026-01-01        120 click         0.7100 reference                         0.5200",
        "2026-01-02*     1,250 click         0.7312   +0.0212    [+0.0110, +0.0305]   0.5000",
        "(* = current: 2026-01-02)",
    ]


def test_html_table_links_reports_and_marks_deltas_intervals_and_optimistic_models():
    html = render_comparison_html(comparison())
    assert html.startswith("<!DOCTYPE html>") and html.count("data:image/png;base64,") == 1
    assert "<title>Published models on 2026-01-04</title>" in html
    assert "4,000 rows of 2026-01-04 from s3://bucket/root" in html
    assert "* trained on some of the evaluation dates" in html
    rows = [line for line in html.splitlines() if line.startswith("<tr><td")]
    assert len(rows) == 2
    assert '<a href="2026-01-01/report.html">2026-01-01</a>' in rows[0]
    assert rows[0].count("reference") == 2 and "<td>none</td>" in rows[0]
    assert '<td><span class="better">+0.02120</span></td>' in rows[1]
    assert '<td><span class="better">-0.02000</span></td>' in rows[1]  # lower logloss
    assert "<td>[+0.01100, +0.03050] at 95%</td>" in rows[1]
    assert "<td>2026-01-01..2026-01-04 *</td>" in rows[1] and "<td>yes</td>" in rows[1]
    assert "GAUC" not in html and "oracle AUC" not in html


def test_optional_columns_appear_when_a_model_has_them_and_labels_are_prefixed():
    both = comparison(labels=["click", "buy"])
    for model in both["models"]:
        model["labels"]["buy"] = entry(0.6, 0.3, gauc=0.58)
    html = render_comparison_html(both)
    header = next(line for line in html.splitlines() if line.startswith("<tr><th"))
    assert "<th>click: AUC</th>" in header and "<th>buy: GAUC</th>" in header
    assert "oracle AUC" not in header


def test_a_comparison_without_any_auc_has_no_chart():
    empty = comparison()
    for model in empty["models"]:
        model["labels"]["click"]["auc"] = math.nan
    html = render_comparison_html(empty)
    assert '<p class="note">No AUC to plot.</p>' in html and "base64" not in html


def test_both_files_are_written_and_the_json_has_no_nan(tmp_path):
    data = comparison()
    data["models"][0]["labels"]["click"]["normalized_entropy"] = math.nan
    path = write_comparison(str(tmp_path / "out"), data)
    assert path == str(tmp_path / "out" / "comparison.html")
    assert (tmp_path / "out" / "comparison.html").read_text().startswith("<!DOCTYPE html>")
    written = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert written["models"][0]["labels"]["click"]["normalized_entropy"] is None
    assert written["models"][1]["labels"]["click"]["bootstrap"]["low"] == 0.011
