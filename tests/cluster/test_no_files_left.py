"""A run leaves nothing in the temporary directory, even when a worker is SIGKILLed.

``recsys-dist train`` with ``cluster.mode: local`` gets a fresh ``TMPDIR``; worker 0 is
SIGKILLed after the first checkpoint (the worker can remove nothing), the run recovers, and
after the command exits the ``TMPDIR`` is empty: TensorFlow's autograph files, staging
directories and every process's run-scoped directory (``recsys_dist/scratch.py``) are gone.
"""

from __future__ import annotations

import os
import signal

import pytest

from recsys_dist.data.synth_files import synthesize
from tests.support.run_configs import small_run_config
from tests.support.train_run import TrainRun

pytestmark = pytest.mark.cluster


def test_a_run_with_a_killed_worker_leaves_nothing_in_its_tmpdir(tmp_path):
    data = tmp_path / "data"
    synthesize(data, days=3, rows_per_day=6_000, seed=7, rows_per_file=3_000)
    config = small_run_config(tmp_path, data, changes={"train.checkpoint_every_steps": 10})
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    run = TrainRun(config, tmp_path / "run", env={"TMPDIR": str(tmpdir)})
    run.wait_for(r"^checkpoint step")
    os.kill(run.servers("worker")[0], signal.SIGKILL)
    assert run.finish() == 0, run.output[-3000:]
    assert "worker 0 exited with code -9; restarting it" in run.output, run.output[-3000:]
    assert sorted(os.listdir(tmpdir)) == []
