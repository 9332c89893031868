"""TF_CPP_MIN_LOG_LEVEL applies to the lines TensorFlow's libraries log while they load
(recsys_dist/tf_log_filter.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from recsys_dist.tf_log_filter import hidden

INFO = b"I0000 00:00:1795443766.826175    1391 port.cc:153] oneDNN custom operations are on."
WARNING = b"W0000 00:00:1795443766.826469    1391 cuda_executor.cc:12] something to know"
ERROR = b"E1123 14:02:03.123456    1391 server_lib.cc:9] something went wrong"
BANNER = (b"WARNING: All log messages before absl::InitializeLog() is called are written "
          b"to STDERR")


@pytest.mark.parametrize("level, shown", [
    (0, [BANNER, INFO, WARNING, ERROR]),
    (1, [WARNING, ERROR]),
    (2, [ERROR]),
    (3, []),
])
def test_absl_lines_below_the_level_are_hidden(level, shown):
    lines = [BANNER, INFO, WARNING, ERROR]
    assert [line for line in lines if not hidden(line, level)] == shown


def test_other_lines_are_never_hidden():
    for line in (b"Traceback (most recent call last):", b"error: bad config",
                 b"UserWarning: I0000 is not a log line", b"", b"I0000 no header"):
        assert not hidden(line, 3)


RELAY = r"""
import os, sys
from recsys_dist.tf_log_filter import _FilteredStderr
with _FilteredStderr(int(sys.argv[1])):
    os.write(2, INFO + b"\n" + b"plain line\n" + ERROR + b"\n")
    print("from python", file=sys.stderr)
    os.write(2, b"no newline at the end")
print("after", file=sys.stderr)
"""


@pytest.mark.parametrize("level, expected", [
    (3, "plain line\nfrom python\nno newline at the endafter\n"),
    (2, "plain line\nE1123 14:02:03.123456    1391 server_lib.cc:9] something went wrong\n"
        "from python\nno newline at the endafter\n"),
])
def test_the_relay_passes_every_other_line_in_order(level, expected):
    script = f"INFO = {INFO!r}\nERROR = {ERROR!r}\n" + RELAY
    done = subprocess.run([sys.executable, "-c", script, str(level)], capture_output=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.decode() == expected


def test_importing_tensorflow_after_recsys_dist_prints_nothing_at_the_default_level():
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run(
        [sys.executable, "-c", "import recsys_dist, tensorflow, sys; "
                               "print('done', file=sys.stderr)"],
        capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "done\n"
