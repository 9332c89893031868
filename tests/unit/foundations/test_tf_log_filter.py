"""TF_CPP_MIN_LOG_LEVEL applies to the lines TensorFlow's libraries log while they load
(recsys_dist/tf_log_filter.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from recsys_dist.tf_log_filter import hidden

INFO = b"I0000 00:00:1795443766.826175    1391 port.cc:153] oneDNN custom operations are on."
WARNING = b"W0000 00:00:1795443766.826469    1391 cuda_executor.cc:12] something to know"
ERROR = b"E1123 14:02:03.123456    1391 server_lib.cc:9] something went wrong"
BANNER = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


@pytest.mark.parametrize(
    "level, shown",
    [
        (0, [BANNER, INFO, WARNING, ERROR]),
        (1, [WARNING, ERROR]),
        (2, [ERROR]),
        (3, []),
    ],
)
def test_absl_lines_below_the_level_are_hidden(level, shown):
    lines = [BANNER, INFO, WARNING, ERROR]
    assert [line for line in lines if not hidden(line, level)] == shown


def test_the_continuation_lines_of_a_hidden_grpc_error_are_hidden_too():
    lines = [
        b"E0000 00:00:1795446782.179258   27551 context.cc:870] Failed to register "
        b"function remotely due to failed to connect to all addresses",
        b"Additional GRPC error information from remote target /job:ps/replica:0/task:0 "
        b"while calling /tensorflow.eager.EagerService/Enqueue:",
        b':{"created":"@1795446782.178963554","description":"Failed to pick subchannel"}',
        b"This could happen if the remote target has been disconnected from the client.",
        b"error: stopped by SIGTERM",
        b"This could happen if the remote target has been disconnected from the client.",
    ]
    kept, after = [], False
    for line in lines:
        after = hidden(line, 3, after)
        if not after:
            kept.append(line)
    assert kept == lines[4:]  # not after a line that was kept


def test_the_protobuf_text_of_a_hidden_info_line_is_hidden_too():
    """An in-process server logs its SessionOptions over ~20 lines when a coordinator
    connects; only the first has the Abseil header."""
    lines = [
        b"I0000 00:00:1795455271.684429   20334 eager_service_impl.cc:355] SessionOptions: "
        b"device_count {",
        b'  key: "CPU"',
        b"  value: 1",
        b"}",
        b"gpu_options {",
        b"  experimental {",
        b"  }",
        b"}",
        b"allow_soft_placement: true",
        b"experimental {",
        b'  collective_group_leader: "/job:ps/replica:0/task:0"',
        b"}",
        b"",
        b"error: bad config",
        b"  value: 1",
    ]
    kept, after = [], False
    for line in lines:
        after = hidden(line, 2, after)
        if not after:
            kept.append(line)
    assert kept == lines[-2:]  # an error line ends the message; what follows it is kept


def test_other_lines_are_never_hidden():
    for line in (
        b"Traceback (most recent call last):",
        b"error: bad config",
        b"UserWarning: I0000 is not a log line",
        b"",
        b"I0000 no header",
    ):
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


@pytest.mark.parametrize(
    "level, expected",
    [
        (3, "plain line\nfrom python\nno newline at the endafter\n"),
        (
            2,
            "plain line\nE1123 14:02:03.123456    1391 server_lib.cc:9] something went wrong\n"
            "from python\nno newline at the endafter\n",
        ),
    ],
)
def test_the_relay_passes_every_other_line_in_order(level, expected):
    script = f"INFO = {INFO!r}\nERROR = {ERROR!r}\n" + RELAY
    done = subprocess.run(
        [sys.executable, "-c", script, str(level)], capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.decode() == expected


def test_importing_tensorflow_after_recsys_dist_prints_nothing_at_the_default_level():
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import recsys_dist, tensorflow, sys; print('done', file=sys.stderr)",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "done\n"


LIFE = r"""
import os, sys
from recsys_dist.tf_log_filter import filter_stderr_for_life
filter_stderr_for_life()
os.write(2, INFO + b"\n")
print("kept", file=sys.stderr, flush=True)
os.write(2, ERROR + b"\n")
os._exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("code", [0, 3])
def test_the_life_long_filter_drops_absl_lines_and_loses_nothing_at_exit(code):
    script = f"INFO = {INFO!r}\nERROR = {ERROR!r}\n" + LIFE
    done = subprocess.run(
        [sys.executable, "-c", script, str(code)],
        capture_output=True,
        timeout=60,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert done.returncode == code  # os._exit skips every cleanup: the filter still drains
    assert done.stderr.decode() == "kept\n" + ERROR.decode() + "\n"


def test_a_native_crash_in_a_command_leaves_its_python_stack_on_stderr():
    # run_command enables faulthandler after the stderr filter: the dump passes through it.
    script = (
        "import ctypes\nfrom recsys_dist.console import run_command\n"
        "def crash_in_native_code():\n    return ctypes.string_at(0)\n"
        "run_command(crash_in_native_code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert done.returncode == -11
    assert "Fatal Python error: Segmentation fault" in done.stderr
    assert "crash_in_native_code" in done.stderr


def test_a_signal_while_tensorflow_loads_still_leaves_its_line():
    """While TensorFlow's module runs, fd 2 goes through a pipe to a thread of the process
    (``_FilteredStderr``); a signal then ends the process at once, so its last line is
    written where fd 2 went before, not into that pipe (where it died with the thread)."""
    program = (
        "import os, signal, time\n"
        "from recsys_dist import tf_log_filter\n"
        "from recsys_dist.console import run_command\n"
        "def main():\n"
        "    with tf_log_filter._FilteredStderr(3):\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        time.sleep(30)\n"
        "    return 0\n"
        "run_command(main)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert done.stderr == "error: stopped by SIGTERM\n"
