"""``recsys-dist data read --check`` on a cluster: every planned row read exactly once.

The command line's other commands are in tests/unit/cli/test_cli.py."""

from __future__ import annotations

import pytest

from tests.support import command_forks
from tests.support.paths import CLI, DEMO_CONFIG

pytestmark = pytest.mark.cluster


def test_data_read_checks_exactly_once_on_a_local_cluster(synth_dir):
    result = command_forks.run(
        [
            CLI,
            "data",
            "read",
            "--config",
            DEMO_CONFIG,
            "--data",
            str(synth_dir),
            "--split",
            "train",
            "--check",
            "--set",
            "input.batch_size=128",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "cluster  2 workers + 2 ps (in_process: servers inside this process)" in result.stdout
    assert "read     6,000 rows" in result.stdout
    assert "check    every planned row was read exactly once (6,000 rows)" in result.stdout
