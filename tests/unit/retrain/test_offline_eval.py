"""``pipelines/offline_eval.py`` rejects what it cannot evaluate, before any model is
read: a date not published, a root with no published model, an incomplete publication.

Evaluating published models on a real local cluster is in
tests/cluster/test_offline_eval.py.
"""

from __future__ import annotations

import pathlib

import pytest

from tests.support.retrain import publish
from tests.support.retrain import run_offline_eval as offline_eval


def test_a_date_that_is_not_published_is_named_with_the_published_ones(tmp_path):
    root = tmp_path / "root"
    for date in ("2026-01-01", "2026-01-02"):
        publish(root, date, {"date": date, "checkpoint": "unused"}, None)
    (root / "published" / "2026-01-03").mkdir()  # incomplete: no _SUCCESS
    result = offline_eval(
        "--root",
        str(root),
        "--dates",
        "2026-01-04",
        "--models",
        "2026-01-02,2026-01-05",
        "--out",
        str(tmp_path / "out"),
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert "2026-01-05" in result.stderr
    assert "published models: 2026-01-01, 2026-01-02" in result.stderr
    incomplete = offline_eval(
        "--root",
        str(root),
        "--dates",
        "2026-01-04",
        "--models",
        "2026-01-03",
        "--out",
        str(tmp_path / "out"),
    )
    assert incomplete.returncode == 2
    assert "2026-01-03 (incomplete: no _SUCCESS)" in incomplete.stderr
    assert not (tmp_path / "out").exists()


def test_a_root_without_published_models_is_rejected(tmp_path):
    empty = tmp_path / "empty"
    (empty / "runs" / "2026-01-01").mkdir(parents=True)
    result = offline_eval(
        "--root", str(empty), "--dates", "2026-01-04", "--out", str(tmp_path / "out")
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "no published model" in result.stderr and str(empty / "published") in result.stderr
    assert "Traceback" not in result.stderr


def test_incomplete_publications_name_the_missing_file(tmp_path):
    from recsys_dist.retrain.offline_eval import OfflineEvalError, evaluate_published

    def expect(root: pathlib.Path, *fragments: str) -> None:
        with pytest.raises(OfflineEvalError) as error:
            evaluate_published(str(root), "2026-01-04", str(tmp_path / "out"))
        for fragment in fragments:
            assert fragment in str(error.value), str(error.value)

    no_manifest = tmp_path / "a"
    publish(no_manifest, "2026-01-01", {}, None)
    (no_manifest / "published" / "2026-01-01" / "manifest.json").unlink()
    expect(no_manifest, str(no_manifest / "published" / "2026-01-01" / "manifest.json"), "missing")

    checkpoint = tmp_path / "b" / "runs" / "2026-01-01" / "checkpoints" / "ckpt-000000000010"
    checkpoint.mkdir(parents=True)
    no_config = tmp_path / "b"
    publish(no_config, "2026-01-01", {"date": "2026-01-01", "checkpoint": str(checkpoint)}, None)
    expect(no_config, str(no_config / "published" / "2026-01-01" / "config.yaml"), "missing")

    gone = tmp_path / "c"
    publish(
        gone,
        "2026-01-01",
        {
            "date": "2026-01-01",
            "checkpoint": str(gone / "runs" / "2026-01-01" / "checkpoints" / "ckpt-000000000010"),
        },
        None,
    )
    expect(gone, "ckpt-000000000010", "does not exist")

    with pytest.raises(OfflineEvalError, match="2026-01-09..2026-01-04"):
        evaluate_published(str(no_config), "2026-01-09..2026-01-04", str(tmp_path / "out"))
