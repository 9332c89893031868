"""Children forked instead of started afresh (``recsys_dist/cluster/child_fork.py``): when
it is safe, and that a forked child has the environment, streams, name, signals and exit
code a started one would."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from recsys_dist.cluster import child_fork
from tests.support.paths import REPO


def _python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_child_may_be_forked_after_the_import_and_before_the_runtime_starts():
    out = _python(
        "import os\n"
        "from recsys_dist.cluster.child_fork import can_fork\n"
        "print('before import', can_fork(os.environ))\n"
        "import tensorflow as tf\n"
        "print('imported', can_fork(os.environ))\n"
        "print('cluster changed', can_fork({**os.environ, 'TF_CONFIG': '{}'}))\n"
        "other = '0' if os.environ.get('TF_ENABLE_ONEDNN_OPTS') == '1' else '1'\n"
        "print('read at import changed',"
        " can_fork({**os.environ, 'TF_ENABLE_ONEDNN_OPTS': other}))\n"
        "print('read at import dropped', can_fork({k: v for k, v in os.environ.items()"
        " if k != 'TF_USE_LEGACY_KERAS'}))\n"
        "tf.constant(1.0) + 1.0\n"
        "print('after an op', can_fork(os.environ))\n"
    )
    assert out.splitlines() == [
        "before import False",  # nothing to share: a fresh start costs the same
        "imported True",
        "cluster changed True",  # TF_CONFIG is read when a server starts
        "read at import changed False",
        "read at import dropped False",
        "after an op False",  # the runtime's threads and state must not be copied
    ]


def _child_body() -> int:
    print(f"out {os.environ.get('CHILD_FORK_VALUE')} {os.environ.get('ONLY_IN_PARENT')}")
    print("err", file=sys.stderr)
    return int(os.environ["CHILD_FORK_CODE"])


def test_a_forked_child_has_its_environment_streams_name_and_exit_code():
    env = {**os.environ, "CHILD_FORK_VALUE": "seen", "CHILD_FORK_CODE": "7"}
    os.environ["ONLY_IN_PARENT"] = "leaked"
    try:
        child = child_fork.fork_child(
            _child_body,
            env=env,
            name="child-fork-test",
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
    finally:
        del os.environ["ONLY_IN_PARENT"]
    assert child.stdout.read().splitlines() == ["out seen None", "err"]
    assert child.wait(timeout=60) == 7
    assert child.poll() == 7


def _sleep_body() -> int:
    print("ready", flush=True)
    time.sleep(120)
    return 0


def test_a_forked_child_is_named_ends_on_sigterm_and_reports_a_kill_as_subprocess_does():
    children = []
    for _ in range(2):
        child = child_fork.fork_child(
            _sleep_body,
            env=dict(os.environ),
            name="child-fork-test-name",  # longer than the 15 bytes a name keeps
            stdout=subprocess.PIPE,
            text=True,
            new_session=True,
        )
        assert child.stdout.readline() == "ready\n"
        children.append(child)
    first, second = children
    assert pathlib.Path(f"/proc/{first.pid}/comm").read_text().strip() == "child-fork-test"
    assert os.getsid(first.pid) == first.pid  # a session of its own
    assert first.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        first.wait(timeout=0.2)
    # Default handlers in the child, whatever this process (a test runner) installed.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == -signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)
    second.kill()
    assert second.wait(timeout=60) == -signal.SIGKILL
    second.kill()  # ended already: nothing happens
