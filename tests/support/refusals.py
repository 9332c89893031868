"""A command line refused before any cluster starts, run in the test's own process."""

from __future__ import annotations

import re
import subprocess


def refused_here(capsys, *argv: str) -> subprocess.CompletedProcess:
    """``recsys-dist *argv`` through :func:`recsys_dist.cli.main` in this process: its
    exit code and what it printed, as ``subprocess.run`` gives them. For inputs the
    command refuses before it starts a cluster, where a process of its own would spend
    its seconds importing TensorFlow; the console script's own wrapping (signals, the
    exit) is tested in tests/unit/cli and by every command the cluster tests run."""
    from recsys_dist.cli import main

    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert not re.search(r"^cluster ", out, re.M), (
        f"a cluster started in the test's process:\n{out}"
    )
    return subprocess.CompletedProcess(list(argv), code, out, err)
