"""Retraining roots built by hand, and ``pipelines/offline_eval.py`` run on them."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

from tests.support.paths import REPO

OFFLINE_EVAL_SCRIPT = str(REPO / "pipelines" / "offline_eval.py")


def run_offline_eval(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python pipelines/offline_eval.py ARGS`` from the repository root."""
    return subprocess.run(
        [sys.executable, OFFLINE_EVAL_SCRIPT, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def publish(root: pathlib.Path, date: str, manifest: dict, run: pathlib.Path | None) -> None:
    """Writes ``root/published/<date>/`` like ``recsys-dist retrain`` (no export): the
    run's config and features (if ``run`` is given), the manifest, ``_SUCCESS`` last."""
    directory = root / "published" / date
    directory.mkdir(parents=True)
    for name in ("config.yaml", "features.yaml"):
        if run is not None:
            shutil.copy(run / name, directory / name)
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2))
    (directory / "_SUCCESS").write_text(date + "\n")
