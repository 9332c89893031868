"""Fixtures shared by the modules of ``tests/cluster/``."""

from __future__ import annotations

import json
import pathlib

import pytest

from recsys_dist.data.synth_files import synthesize
from tests.support.grouping import group_modules
from tests.support.run_configs import small_run_config
from tests.support.train_run import TrainRun

#: Session fixtures whose modules run in one process, so each is built once.
SHARED_SESSION_FIXTURES = ("fault_free_run",)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under ``pytest -n N --dist loadgroup`` (``make test``) each module of
    ``tests/cluster/`` runs whole in one process, so its module fixtures start their
    servers once; modules that use the same session fixture run in the same process."""
    group_modules(items, pathlib.Path(__file__).parent, SHARED_SESSION_FIXTURES)


@pytest.fixture(scope="session")
def fault_free_run(tmp_path_factory):
    """The fault tests' small run without a fault (2 workers + 2 ps on 127.0.0.1): its
    config, its data and its held-out AUC. The kill tests (``test_fault_tolerance.py``)
    and the host tests (``test_hosts.py``, the same data and model on S3 and namespace
    hosts) hold their runs to this AUC."""
    tmp = tmp_path_factory.mktemp("ft")
    data = tmp / "data"
    synthesize(
        data, days=3, rows_per_day=12_000, seed=7, rows_per_file=6_000, row_groups_per_file=2
    )
    config = small_run_config(tmp, data)
    run = TrainRun(config, tmp / "baseline")
    assert run.finish() == 0, run.output[-3000:]
    result = json.loads((tmp / "baseline" / "train_result.json").read_text())
    return config, data, result["eval"]["labels"]["click"]["auc"]
