"""Handing work items to the workers: a window of closures in flight, oldest first.

Training and scoring both cut a split into items (row ranges of one file; see
``data/input_fn.py``) and schedule one closure per item on the ``ClusterCoordinator``.
They keep ``2 x workers`` closures in flight, so each worker has the next item queued
while it runs one, and they take results back in the order they were scheduled, so the
coordinator knows exactly which items are done (a checkpoint records that).
``ClusterCoordinator`` re-runs a lost worker's closure on another worker, so each item
returns once.

Training takes closures back as they come back instead (``any_order``): each item is
recorded on its own, and a closure stuck on a worker whose link is down then holds back
no other.
"""

from __future__ import annotations

import collections
from typing import Any, Callable

import tensorflow as tf

from recsys_dist.errors import ClusterLost, DataError

#: How often :meth:`InFlight.pop` looks for any closure that is back while the oldest is
#: not.
ANY_ORDER_POLL_SECONDS = 0.02


class InFlight:
    """Closures of one function in flight on a coordinator, returned oldest first.

    Args:
      coordinator: The ``ClusterCoordinator``.
      function: The ``tf.function`` each closure runs.
      limit: Closures in flight at most (normally twice the workers).
      any_order: Return closures as they come back, not in the order they were
        scheduled (training, where each item is recorded on its own).
    """

    def __init__(self, coordinator, function: Callable, limit: int, any_order: bool = False):
        self._coordinator, self._function, self._limit = coordinator, function, limit
        self._any_order = any_order
        self._pending: collections.deque = collections.deque()

    def has_room(self) -> bool:
        return len(self._pending) < self._limit

    def __len__(self) -> int:
        return len(self._pending)

    def put(self, tag: Any, *args: int) -> None:
        """Schedules ``function(*args)`` (int64 scalars); :meth:`pop` returns ``tag`` with it."""
        self._pending.append(
            (
                tag,
                self._coordinator.schedule(
                    self._function, args=tuple(tf.constant(v, tf.int64) for v in args)
                ),
            )
        )

    def pop(self) -> tuple[Any, Any]:
        """``(tag, result)`` of the oldest closure, waiting for it; with ``any_order``, of
        the oldest closure that is back, waiting for the first to come back."""
        index = 0
        while self._any_order and not _back(self._pending[0][1]):
            index = next((i for i, (_, r) in enumerate(self._pending) if _back(r)), 0)
            if index:
                break
            _wait(self._pending[0][1], ANY_ORDER_POLL_SECONDS)
        tag, remote = self._pending[index]
        del self._pending[index]
        result = remote.fetch()
        if result is None:
            # Seen once under heavy load, after a worker's RPC failed: the coordinator
            # handed back a closure with no values. Treat it as a lost task (resume from
            # the last checkpoint) rather than fail on the missing figures.
            raise ClusterLost("a work item came back from a worker without its result")
        return tag, result


def _back(remote) -> bool:
    """Whether a closure's result (or error) is back, without waiting for it."""
    event = getattr(remote, "_status_available_event", None)
    return event is None or event.is_set()


def _wait(remote, seconds: float) -> None:
    event = getattr(remote, "_status_available_event", None)
    if event is not None:
        event.wait(seconds)


def check_item_rows(files: list[str], item, rows: int, done: str) -> None:
    """Raises if a worker returned another number of rows than ``item``'s footer holds.

    Args:
      files: The plan's files (``item.file`` indexes them).
      item: The work item.
      rows: Rows the worker returned.
      done: What the worker did, for the message (``read``, ``scored``).
    """
    if rows != item.rows:
        raise DataError(
            f"{files[item.file]} rows {item.start}..{item.stop}: a worker {done} "
            f"{rows:,} rows, the footer says {item.rows:,}"
        )
