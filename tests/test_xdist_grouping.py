"""``make test`` runs each module of ``tests/cluster/`` whole in one process
(``pytest -n 2 --dist loadgroup`` and the groups of ``tests/support/grouping.py``), so a
module's fixtures start their servers once. Checked on generated modules in a pytest of
its own: every test of a module reports the same worker. (pytest-xdist stops grouping
without a word with some pytest releases; pyproject.toml pins around them.)"""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

CONFTEST = """
import pathlib
import pytest
from tests.support.grouping import group_modules

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    group_modules(items, pathlib.Path(__file__).parent, ())
"""

MODULE = """
import os, pathlib, time
def record(name):
    time.sleep(0.2)
    with open(pathlib.Path(__file__).parent / "workers.txt", "a") as out:
        out.write(f"{pathlib.Path(__file__).stem} {os.environ['PYTEST_XDIST_WORKER']}\\n")
def test_1(): record("1")
def test_2(): record("2")
def test_3(): record("3")
"""


def test_each_module_runs_whole_in_one_worker(tmp_path):
    suite = tmp_path / "grouped"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    for name in "abcd":
        (suite / f"test_{name}.py").write_text(MODULE)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-p",
            "no:cacheprovider",
            str(suite),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workers: dict[str, set[str]] = {}
    for line in (suite / "workers.txt").read_text().splitlines():
        module, worker = line.split()
        workers.setdefault(module, set()).add(worker)
    assert len(workers) == 4 and all(len(w) == 1 for w in workers.values()), workers
