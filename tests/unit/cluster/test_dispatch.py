"""Handing work items to the workers (``recsys_dist/cluster/dispatch.py``): the window of
closures in flight, results taken back oldest first (or, for training, as they come back),
a closure that came back empty, and the row check of a returned item. The coordinator
here is a small object with the ``ClusterCoordinator`` interface InFlight uses
(``schedule`` returning something with ``fetch``)."""

from __future__ import annotations

import re
import threading

import pytest
import tensorflow as tf
from tensorflow.python.distribute.coordinator import values

from recsys_dist.cluster import dispatch
from recsys_dist.cluster.dispatch import InFlight, check_item_rows
from recsys_dist.data.shard_plan import Unit
from recsys_dist.errors import ClusterLost, DataError


class Remote:
    def __init__(self, value):
        self.value = value

    def fetch(self):
        return self.value


class Coordinator:
    """Runs each scheduled function at once and records its arguments."""

    def __init__(self):
        self.scheduled = []

    def schedule(self, function, args):
        self.scheduled.append(args)
        return Remote(function(*args))


@tf.function
def rows_of(file_index, start, stop, stride=1):
    return {"file": file_index, "rows": (stop - start + stride - 1) // stride}


def test_closures_are_returned_oldest_first_with_their_tags():
    coordinator = Coordinator()
    in_flight = InFlight(coordinator, rows_of, limit=3)
    items = [Unit(0, 0, 10), Unit(1, 5, 25), Unit(0, 10, 13)]
    for item in items:
        assert in_flight.has_room()
        in_flight.put(item, item.file, item.start, item.stop)
    assert len(in_flight) == 3 and not in_flight.has_room()
    assert all(
        a.dtype == tf.int64 and a.shape == () for args in coordinator.scheduled for a in args
    )
    returned = []
    while len(in_flight):
        tag, result = in_flight.pop()
        returned.append((tag, int(result["file"]), int(result["rows"])))
        assert in_flight.has_room()
    assert returned == [(items[0], 0, 10), (items[1], 1, 20), (items[2], 0, 3)]
    with pytest.raises(IndexError):
        in_flight.pop()


def test_each_item_runs_every_item_once_with_at_most_limit_in_flight_oldest_first():
    """Scoring and ``data read`` take their items this way: each scheduled once, never more
    than ``limit`` waiting, results in the order of the items."""
    coordinator = Coordinator()
    items = [Unit(0, 0, 10), Unit(1, 5, 25, 3), Unit(0, 10, 13), Unit(2, 0, 1), Unit(1, 26, 30, 3)]
    returned, in_flight = [], []
    for item, result in dispatch.each_item(coordinator, rows_of, items, 2):
        in_flight.append(len(coordinator.scheduled) - len(returned))
        returned.append((item, int(result["file"]), int(result["rows"])))
    assert returned == [(i, i.file, i.rows) for i in items]
    assert [tuple(int(a) for a in args) for args in coordinator.scheduled] == [
        (i.file, i.start, i.stop, i.stride) for i in items
    ]
    assert max(in_flight) == 2 and in_flight[-1] == 1
    assert list(dispatch.each_item(coordinator, rows_of, [], 2)) == []


class Pending:
    """A result that comes back when :meth:`arrive` is called (``ClusterCoordinator``'s
    ``RemoteValue`` sets ``_status_available_event`` the same way)."""

    def __init__(self, value):
        self.value, self._status_available_event = value, threading.Event()

    def arrive(self):
        self._status_available_event.set()

    def fetch(self):  # waits for the result, as RemoteValue.fetch does
        assert self._status_available_event.wait(5), "never came back"
        return self.value


class SlowCoordinator:
    """Each closure comes back when the test says; with ``at_once``, as it is scheduled."""

    def __init__(self):
        self.remotes, self.at_once = [], False

    def schedule(self, function, args):
        self.remotes.append(Pending(int(args[0])))
        if self.at_once:
            self.remotes[-1].arrive()
        return self.remotes[-1]


def test_with_any_order_a_closure_stuck_on_a_lost_worker_holds_back_no_other():
    """The oldest closure hangs (its worker's link is down); the ones scheduled after it
    are taken as they come back, and the stuck one when it comes back at last."""
    coordinator = SlowCoordinator()
    in_flight = InFlight(coordinator, rows_of, limit=3, any_order=True)
    for tag in ("stuck", "second", "third"):
        in_flight.put(tag, len(coordinator.remotes))
    stuck, second, third = coordinator.remotes
    third.arrive()
    assert in_flight.pop() == ("third", 2)
    threading.Timer(0.1, second.arrive).start()
    assert in_flight.pop() == ("second", 1)  # waits for the first to come back
    stuck.arrive()
    assert in_flight.pop() == ("stuck", 0) and len(in_flight) == 0


def test_while_a_worker_is_unreachable_an_item_stuck_on_it_is_scheduled_again(monkeypatch):
    """Nothing comes back for DUPLICATE_AFTER_SECONDS while a worker is unreachable: the
    items in flight run once more (on the workers that answer); the first copy back
    counts, and the stuck copy is left to finish on its own."""
    monkeypatch.setattr(dispatch, "DUPLICATE_AFTER_SECONDS", 0.2)
    unreachable = [False]
    coordinator = SlowCoordinator()
    in_flight = InFlight(
        coordinator, rows_of, limit=2, any_order=True, unreachable=lambda: unreachable[0]
    )
    in_flight.put("stuck", 0)
    in_flight.put("fine", 1)
    coordinator.remotes[1].arrive()
    assert in_flight.pop() == ("fine", 1)
    unreachable[0], coordinator.at_once = True, True
    assert in_flight.pop() == ("stuck", 0)  # its second copy
    assert len(coordinator.remotes) == 3 and in_flight.duplicated == 1
    assert not coordinator.remotes[0]._status_available_event.is_set()


def test_no_item_is_scheduled_again_while_every_worker_answers(monkeypatch):
    monkeypatch.setattr(dispatch, "DUPLICATE_AFTER_SECONDS", 0.05)
    coordinator = SlowCoordinator()
    in_flight = InFlight(coordinator, rows_of, limit=2, any_order=True)
    in_flight.put("first", 0)
    in_flight.put("slow", 1)
    coordinator.remotes[0].arrive()
    assert in_flight.pop() == ("first", 0)
    threading.Timer(0.3, coordinator.remotes[1].arrive).start()
    assert in_flight.pop() == ("slow", 1)
    assert len(coordinator.remotes) == 2 and in_flight.duplicated == 0


def test_the_wait_between_looks_for_a_result_follows_the_results_pace():
    """A tenth of the median wait between results, within ANY_ORDER_POLL_SECONDS: often
    for one-step closures, at most 20 times a second for long ones."""
    in_flight = InFlight(SlowCoordinator(), rows_of, limit=2, any_order=True)
    shortest, longest = dispatch.ANY_ORDER_POLL_SECONDS
    assert in_flight._poll_seconds() == shortest  # no result yet
    in_flight._gaps.extend([0.002, 0.004, 0.003])  # one-step closures
    assert in_flight._poll_seconds() == shortest
    in_flight._gaps.extend([0.2] * 4)
    assert in_flight._poll_seconds() == pytest.approx(0.02)
    in_flight._gaps.extend([0.7] * 20)  # the demo's 50-step closures
    assert in_flight._poll_seconds() == longest


def test_run_on_a_worker_returns_from_another_worker_when_the_first_copy_is_stuck(
    monkeypatch,
):
    """A single closure (the training AUC's reading) that went to a worker whose link is
    down runs again on another one after DUPLICATE_AFTER_SECONDS; with every worker
    answering, it is scheduled once."""
    monkeypatch.setattr(dispatch, "DUPLICATE_AFTER_SECONDS", 0.1)

    class FirstCopyStuck:
        def __init__(self):
            self.remotes = []

        def schedule(self, function, args):
            assert args == ()
            self.remotes.append(Pending(function()))
            if len(self.remotes) > 1:
                self.remotes[-1].arrive()
            return self.remotes[-1]

    coordinator = FirstCopyStuck()
    assert dispatch.run_on_a_worker(coordinator, lambda: {"auc": 0.75}, lambda: True) == {
        "auc": 0.75
    }
    assert len(coordinator.remotes) == 2
    coordinator = Coordinator()
    assert dispatch.run_on_a_worker(coordinator, lambda: 7, lambda: False) == 7
    assert coordinator.scheduled == [()]


class Copying:
    """A real ``RemoteValueImpl`` whose function was dispatched and whose outputs are being
    copied to the coordinator by its worker's thread (which holds the value's lock, as
    ``ClusterCoordinator`` does) until :meth:`copied`."""

    def __init__(self, value):
        self.remote = values.RemoteValueImpl(None, None)
        self.remote._has_fetched_to_local_lock.acquire()
        self.remote._set_values(tf.constant(value))

    def copied(self):
        self.remote._fetched_tensors = self.remote._values
        self.remote._has_fetched_to_local = True
        self.remote._has_fetched_to_local_lock.release()


def test_a_dispatched_closure_whose_copy_waits_for_its_workers_link_is_not_back(monkeypatch):
    """The oldest closure was dispatched to a worker whose link then went down: its
    status is available, but its outputs' copy to the coordinator waits for the link, so
    fetching it would wait too. The next closure is taken first; while the worker is
    unreachable the stuck one is scheduled again and its second copy counts."""
    monkeypatch.setattr(dispatch, "DUPLICATE_AFTER_SECONDS", 0.2)
    copies = []

    class Coordinator:
        def schedule(self, function, args):
            copies.append(Copying(int(args[0])))
            return copies[-1].remote

    unreachable = [False]
    in_flight = InFlight(
        Coordinator(), rows_of, limit=2, any_order=True, unreachable=lambda: unreachable[0]
    )
    in_flight.put("stuck", 0)
    in_flight.put("fine", 1)
    assert not dispatch.came_back(copies[0].remote)
    copies[1].copied()
    assert in_flight.pop() == ("fine", 1)
    unreachable[0] = True
    threading.Timer(0.4, lambda: copies[2].copied()).start()
    assert in_flight.pop() == ("stuck", 0)  # its second copy
    assert len(copies) == 3 and in_flight.duplicated == 1
    copies[0].copied()


def test_a_closure_that_failed_or_was_aborted_is_back_at_once():
    failed = values.RemoteValueImpl(None, None)
    failed._set_error(ValueError("worker said no"))
    aborted = values.RemoteValueImpl(None, None)
    aborted._set_aborted(None)
    assert dispatch.came_back(failed) and dispatch.came_back(aborted)
    assert not dispatch.came_back(values.RemoteValueImpl(None, None))


def test_without_any_order_the_oldest_is_waited_for():
    coordinator = SlowCoordinator()
    in_flight = InFlight(coordinator, rows_of, limit=2)
    in_flight.put("first", 0)
    in_flight.put("second", 1)
    coordinator.remotes[1].arrive()
    threading.Timer(0.1, coordinator.remotes[0].arrive).start()
    assert in_flight.pop() == ("first", 0)


def test_a_closure_that_came_back_without_its_result_is_a_lost_task():
    in_flight = InFlight(Coordinator(), lambda *args: None, limit=2)
    in_flight.put("item", 0, 1)
    with pytest.raises(ClusterLost, match="came back from a worker without its result"):
        in_flight.pop()
    assert len(in_flight) == 0


def test_an_item_must_come_back_with_the_rows_its_footer_holds():
    files = ["a.parquet", "s3://bucket/b.parquet"]
    check_item_rows(files, Unit(1, 100, 2100), 2000, "read")
    with pytest.raises(
        DataError,
        match=re.escape(
            "s3://bucket/b.parquet rows 100..2100: a worker scored 1,999 rows, the footer "
            "says 2,000"
        ),
    ):
        check_item_rows(files, Unit(1, 100, 2100), 1999, "scored")
