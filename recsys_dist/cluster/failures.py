"""Telling a lost parameter server apart from everything else.

``ClusterCoordinator`` handles a lost *worker* itself: it re-runs the worker's closure
elsewhere and lets the worker rejoin when it is back. A lost *parameter server* takes
its variables with it, so the coordinator raises ``UnavailableError`` or
``AbortedError`` (or, when the server came back on the same port before any RPC
noticed, ``InvalidArgumentError`` about an unknown device or a missing remote
handle) from ``schedule``, ``fetch`` or ``join``. Those become :class:`ClusterLost`,
which the ``train`` command answers with a restart from its last checkpoint.
"""

from __future__ import annotations

import contextlib
import re
from typing import Iterator

import tensorflow as tf

from recsys_dist.errors import ClusterLost

_LOST_STATE = ("unknown device", "unable to find the relevant tensor remote_handle")


def is_cluster_failure(error: BaseException) -> bool:
    """Whether ``error`` means a task (in practice a parameter server) was lost."""
    if isinstance(error, (tf.errors.UnavailableError, tf.errors.AbortedError)):
        return True
    return isinstance(error, tf.errors.InvalidArgumentError) and any(
        s in str(error).lower() for s in _LOST_STATE
    )


@contextlib.contextmanager
def cluster_failures_as_cluster_lost(synchronous: bool = False) -> Iterator[None]:
    """Re-raises a lost parameter server (``synchronous``: a lost worker of a
    ``multi_worker_mirrored`` job, which every step needs) as :class:`ClusterLost`."""
    try:
        yield
    except tf.errors.OpError as exc:
        if not is_cluster_failure(exc):
            raise
        text = exc.message or str(exc)
        first = text.strip().splitlines()[0][:300]
        tasks = sorted(set(re.findall(r"/job:(?:worker|ps)/replica:\d+/task:\d+", text)))
        named = f"; it names {', '.join(tasks)}" if tasks else ""
        gone = (
            "a worker of the synchronous job is gone"
            if synchronous
            else "the variables on the parameter servers are gone"
        )
        raise ClusterLost(
            f"lost a task of the cluster ({type(exc).__name__}: {first}{named}); "
            f"{gone}, so training must restart from the last checkpoint"
        ) from None
