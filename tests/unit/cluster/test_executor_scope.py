"""Leaving an executor scope does not wait for the work pending on the executor it
restores (``recsys_dist/cluster/executor_scope.py``): a node stuck on that executor (on a
coordinator, a copy from a worker whose link is down) held every thread that left an
executor scope until it finished. Run in a process of its own: under pytest the scope's
wrapper of the restored executor outlives the scope, which hides the wait."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import REPO

SCOPES = """
import sys, threading
import tensorflow as tf
from tensorflow.python.eager import context, executor
from recsys_dist.cluster.executor_scope import BorrowedExecutor, borrowed_executors_do_not_wait
if sys.argv[1] == "patched":
    borrowed_executors_do_not_wait()
    borrowed_executors_do_not_wait()  # idempotent
    assert isinstance(context.context().executor, BorrowedExecutor)
release = threading.Event()
timer = threading.Timer(8, release.set)  # the stuck work ends after 8 s at the latest
def stuck():
    release.wait(30)
    return 0.0
pending = executor.new_executor(enable_async=True)
timer.start()
with context.executor_scope(pending):
    tf.py_function(stuck, [], tf.float32)  # queued on `pending`: waits for `release`
    with context.executor_scope(executor.new_executor(enable_async=False)):
        pass
    print("released first" if release.is_set() else "left first", flush=True)
release.set()
timer.cancel()
pending.wait()
"""


def scopes(mode: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", SCOPES, mode], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def test_leaving_a_scope_does_not_wait_for_the_restored_executors_pending_work():
    assert scopes("patched") == "left first"


def test_without_the_change_leaving_the_scope_waits_for_it():
    assert scopes("plain") == "released first"
