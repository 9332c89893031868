"""Reading the streaming training AUCs, and starting them over at a pass's end.

Their counts live on the parameter servers, where every step adds to them. Under a
parameter-server strategy the reading runs as a closure on a worker, not on the
coordinator: the coordinator's own reads of the counts can wait, for as long as a
worker's link is down, while a step that adds to them is stuck on that worker. On a
worker the reading goes on, and a copy stuck on an unreachable worker runs again on
another (``cluster/dispatch.py``). Progress lines and summaries show the latest reading
that came back and never wait for one. Other strategies read them in this process.
"""

from __future__ import annotations

import time

import tensorflow as tf

from recsys_dist.cluster.dispatch import came_back, run_on_a_worker

#: A new reading starts at most this often (each is one closure on a worker).
READ_EVERY_SECONDS = 1.0
#: A reading not back after this long (on a worker whose link is down, say) is left to
#: finish on its own, and the next one starts.
STALE_AFTER_SECONDS = 2.0


class AucReader:
    """Reads ``metrics`` (``{label: tf.keras.metrics.AUC}``, created under the strategy's
    scope) through ``runtime``'s coordinator."""

    def __init__(self, metrics: dict, runtime):
        self.metrics, self.runtime = metrics, runtime
        self._on_workers = isinstance(
            runtime.coordinator, tf.distribute.experimental.coordinator.ClusterCoordinator
        )
        self._pending, self._pending_since, self._latest = None, -READ_EVERY_SECONDS, None
        self._read = tf.function(self._results)
        self._read_and_reset = tf.function(self._results_then_zeros)
        if self._on_workers:
            # Traced now, while every worker answers: a new function is registered with
            # every worker, and that waits (holding Python's lock) while one is away.
            self._read.get_concrete_function()
            self._read_and_reset.get_concrete_function()

    def values(self, reset: bool = False) -> dict[str, float]:
        """Each label's AUC over the rows counted since the last reset; with ``reset``,
        the counts then start over (call it with nothing in flight)."""
        if not self._on_workers:
            values = {n: float(m.result()) for n, m in self.metrics.items()}
            if reset:
                for metric in self.metrics.values():
                    metric.reset_state()
            return values
        function = self._read_and_reset if reset else self._read
        values = run_on_a_worker(
            self.runtime.coordinator, function, self.runtime.worker_unreachable
        )
        return {n: float(v) for n, v in values.items()}

    def latest(self) -> dict[str, float] | None:
        """The latest reading without waiting for one (None until the first is back);
        under parameter servers each call takes a reading that is back and starts the
        next on a worker (at most one a second), so what it shows lags by a second or
        so."""
        if not self._on_workers:
            return self.values()
        now = time.monotonic()
        if self._pending is not None and came_back(self._pending):
            values, self._pending = self._pending.fetch(), None
            self._latest = {n: float(v) for n, v in values.items()}
        elif self._pending is not None and now - self._pending_since > STALE_AFTER_SECONDS:
            self._pending = None
        if self._pending is None and now - self._pending_since >= READ_EVERY_SECONDS:
            self._pending = self.runtime.coordinator.schedule(self._read)
            self._pending_since = now
        return self._latest

    def _results(self) -> dict:
        return {n: m.result() for n, m in self.metrics.items()}

    def _results_then_zeros(self) -> dict:
        values = self._results()
        with tf.control_dependencies(list(values.values())):
            for metric in self.metrics.values():
                for variable in metric.variables:
                    variable.assign(tf.zeros_like(variable))
        return values
