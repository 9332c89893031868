"""Handing work items to the workers: a window of closures in flight, oldest first.

Training, scoring and ``data read`` all cut a split into items (row ranges of one file;
see ``data/input_fn.py``) and schedule one closure per item on the ``ClusterCoordinator``.
They keep ``2 x workers`` closures in flight, so each worker has the next item queued
while it runs one, and they take results back in the order they were scheduled, so the
coordinator knows exactly which items are done (a checkpoint records that).
``ClusterCoordinator`` re-runs a lost worker's closure on another worker, so each item
returns once.

Training takes closures back as they come back instead (``any_order``): each item is
recorded on its own, and a closure stuck on a worker whose link is down then holds back
no other. When nothing comes back while a worker is unreachable (the others have run
everything else, e.g. at the end of a pass), the items in flight are scheduled once
more, so the stuck one runs on another worker; the stuck copy still finishes when its
worker's link returns (or ``ClusterCoordinator`` runs it elsewhere once the worker is
named lost), so such an item trains at most twice, as after a killed worker.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable, Iterator
from typing import Any, Callable

import tensorflow as tf
from tensorflow.python.distribute.coordinator.remote_value import RemoteValueStatus

from recsys_dist.errors import ClusterLost, DataError

#: How often :meth:`InFlight.pop` looks for any closure that is back while the oldest is
#: not (a closure's copy back to the coordinator has no event to wait on): a tenth of the
#: median wait between results, within these bounds. Each look costs the coordinator
#: CPU (every 5 ms, about half of what the chief spent per step of the demo model), and
#: a result seen up to 50 ms late costs nothing while each worker has its next closure.
ANY_ORDER_POLL_SECONDS = (0.005, 0.05)

#: With ``any_order``, while a worker is unreachable and nothing has come back for this
#: long (or for 4 times the median wait between results, if that is longer), the
#: closures in flight are scheduled again: the ones stuck on that worker then run on the
#: others, and whichever copy comes back first counts.
DUPLICATE_AFTER_SECONDS = 0.5


class _Item:
    """One scheduled item: its tag, its arguments and every closure running it."""

    def __init__(self, tag: Any, args: tuple, remote):
        self.tag, self.args, self.remotes = tag, args, [remote]

    def back(self):
        """The first of its closures that is back, or None."""
        return next((r for r in self.remotes if came_back(r)), None)


class InFlight:
    """Closures of one function in flight on a coordinator, returned oldest first.

    Args:
      coordinator: The ``ClusterCoordinator``.
      function: The ``tf.function`` each closure runs.
      limit: Closures in flight at most (normally twice the workers).
      any_order: Return closures as they come back, not in the order they were
        scheduled (training, where each item is recorded on its own).
      unreachable: Whether a worker is unreachable now; with ``any_order``, closures that
        wait too long then run again on the other workers (see
        :data:`DUPLICATE_AFTER_SECONDS`).
    """

    def __init__(
        self,
        coordinator,
        function: Callable,
        limit: int,
        any_order: bool = False,
        unreachable: Callable[[], bool] = lambda: False,
    ):
        self._coordinator, self._function, self._limit = coordinator, function, limit
        self._any_order, self._unreachable = any_order, unreachable
        self._pending: collections.deque[_Item] = collections.deque()
        self._last_back: float | None = None  # none back yet: start-up is no stall
        self._gaps: collections.deque[float] = collections.deque(maxlen=64)
        self.duplicated = 0  # items scheduled again because a worker was unreachable

    def has_room(self) -> bool:
        return len(self._pending) < self._limit

    def __len__(self) -> int:
        return len(self._pending)

    def put(self, tag: Any, *args: int) -> None:
        """Schedules ``function(*args)`` (int64 scalars); :meth:`pop` returns ``tag`` with it."""
        if not self._pending and self._last_back is not None:
            self._last_back = time.monotonic()  # a wait starts with the first item in flight
        self._pending.append(_Item(tag, args, self._schedule(args)))

    def _schedule(self, args: tuple):
        return self._coordinator.schedule(
            self._function, args=tuple(tf.constant(v, tf.int64) for v in args)
        )

    def pop(self) -> tuple[Any, Any]:
        """``(tag, result)`` of the oldest closure, waiting for it; with ``any_order``, of
        the oldest closure that is back, waiting for the first to come back."""
        if not self._any_order:
            item = self._pending.popleft()
            return item.tag, _fetch(item.remotes[0])
        while (index := next((i for i, it in enumerate(self._pending) if it.back()), None)) is None:
            if (
                self._last_back is not None
                and time.monotonic() - self._last_back
                >= max(DUPLICATE_AFTER_SECONDS, 4 * self._median_gap())
                and self._unreachable()
            ):
                self._schedule_again()
            _wait(self._pending[0].remotes[-1], self._poll_seconds())
        item = self._pending[index]
        del self._pending[index]
        now = time.monotonic()
        if self._last_back is not None and not self._unreachable():
            self._gaps.append(now - self._last_back)
        self._last_back = now
        # Any other copy of the item is left to finish on its own; its result is dropped.
        return item.tag, _fetch(item.back())

    def _poll_seconds(self) -> float:
        """How long :meth:`pop` waits between looks (:data:`ANY_ORDER_POLL_SECONDS`)."""
        shortest, longest = ANY_ORDER_POLL_SECONDS
        return min(longest, max(shortest, self._median_gap() / 10))

    def _median_gap(self) -> float:
        """The median wait between results while every worker answered (a wait for a
        parameter server, or a checkpoint, is one long gap among many short ones)."""
        return sorted(self._gaps)[len(self._gaps) // 2] if self._gaps else 0.0

    def _schedule_again(self) -> None:
        """Schedules every item in flight once more (each at most once)."""
        for item in self._pending:
            if len(item.remotes) == 1:
                item.remotes.append(self._schedule(item.args))
                self.duplicated += 1
        self._last_back = time.monotonic()


def each_item(
    coordinator, function: Callable, items: Iterable, limit: int
) -> Iterator[tuple[Any, Any]]:
    """Runs ``function(item.file, item.start, item.stop, item.stride)`` for every item, at most
    ``limit`` closures in flight; yields ``(item, result)`` in the order of ``items``
    (scoring and ``data read``; training keeps its own window, see ``train/loop.py``)."""
    in_flight = InFlight(coordinator, function, limit)
    queue = iter(items)
    while True:
        while in_flight.has_room() and (item := next(queue, None)) is not None:
            in_flight.put(item, item.file, item.start, item.stop, item.stride)
        if not len(in_flight):
            return
        yield in_flight.pop()


def run_on_a_worker(coordinator, function: Callable, unreachable: Callable[[], bool]) -> Any:
    """``function()``'s values, run as one closure on whichever worker takes it; while a
    worker is unreachable, a copy stuck on it runs again on another (as training items
    do), so this returns even when the closure first went to a worker whose link is down.
    """
    reader = InFlight(coordinator, function, 1, any_order=True, unreachable=unreachable)
    reader._last_back = time.monotonic()  # the wait for this one result starts now
    reader.put(None)
    return reader.pop()[1]


def _fetch(remote):
    result = remote.fetch()
    if result is None:
        # Seen once under heavy load, after a worker's RPC failed: the coordinator
        # handed back a closure with no values. Treat it as a lost task (resume from
        # the last checkpoint) rather than fail on the missing figures.
        raise ClusterLost("a work item came back from a worker without its result")
    return result


def came_back(remote) -> bool:
    """Whether a closure's result (or error) is back on the coordinator, so that fetching
    it does not wait.

    ``ClusterCoordinator`` marks a closure's status available as soon as its function is
    dispatched (the call is asynchronous); the worker's thread then copies the outputs to
    the coordinator, holding the value's lock until the copy is done. A fetch in between
    waits for that lock, and when the worker's link is down the copy waits for the link:
    so a result is back only once its copy is done, or with an error."""
    event = getattr(remote, "_status_available_event", None)
    if event is None:
        return True
    if not event.is_set():
        return False
    if getattr(remote, "_error", None) is not None or (
        getattr(remote, "_status", None) is RemoteValueStatus.ABORTED
    ):
        return True  # fetch raises at once, without the copy's lock
    return getattr(remote, "_has_fetched_to_local", True)


def _wait(remote, seconds: float) -> None:
    """Waits at most ``seconds`` for ``remote`` to be dispatched; once it is, for its copy
    back, which has no event of its own: sleeps ``seconds``."""
    event = getattr(remote, "_status_available_event", None)
    if event is not None and not event.is_set():
        event.wait(seconds)
    else:
        time.sleep(seconds)


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
            f"{files[item.file]} {item.describe()}: a worker {done} {rows:,} rows, the "
            + ("footer says" if item.kept is None else "footer and the split's hash_share say")
            + f" {item.rows:,}"
        )
