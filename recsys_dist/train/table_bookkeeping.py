"""Dynamic-table bookkeeping of a run: the hour trained rows count as seen, eviction
after a warm start, and the ids each run admitted."""

from __future__ import annotations

import datetime
from datetime import date, time

from recsys_dist.config.sections import DataSpec
from recsys_dist.models.dynamic_table import evict_tables
from recsys_dist.train.attempt import Attempt
from recsys_dist.train.hooks import Hook


def training_window(data: DataSpec | None) -> tuple[datetime.datetime, datetime.datetime]:
    """When the training window's first and last partitions start: the first hours of its
    date range's first and last days, or its ``start`` twice (a follow run's partition),
    or else the first hour of today twice. Dynamic tables' trained rows count as last seen
    at the last; eviction counts back from the first."""
    split = data.train if data is not None else None
    if split is not None and split.start is not None:
        return split.start, split.start
    dates = split.date_range() if split is not None else None
    first, last = (dates.first, dates.last) if dates is not None else (date.today(),) * 2
    return datetime.datetime.combine(first, time()), datetime.datetime.combine(last, time())


def describe_time(at: datetime.datetime) -> str:
    """``2026-01-02`` at midnight, else ``2026-01-02 13:00``."""
    return at.strftime("%Y-%m-%d" if at.time() == time() else "%Y-%m-%d %H:%M")


class TableBookkeeping(Hook):
    """The dynamic tables' figures of a run.

    Args:
      model: The ranking model (its ``dynamic_tables`` per layer).
      data: The ``data`` section (the training window).
      optimizers: Every optimizer of the model (eviction clears their slot rows).
    """

    state_key = "dynamic_live_at_start"

    def __init__(self, model, data: DataSpec | None, optimizers: list):
        self.tables = [table for tables in model.dynamic_tables.values() for table in tables]
        self._layers = list(model.dynamic_tables.values())
        self.window = training_window(data)
        self.optimizers = optimizers
        self.evicted: dict[str, dict] = {}  # per dynamic table, what evict_unseen did
        # per dynamic table, its live ids when this run began training (after a warm
        # start and eviction; kept in checkpoints, so a resumed run counts from there)
        self.live_at_start: dict[str, int] | None = None

    def evict_unseen(self) -> dict[str, dict]:
        """Eviction of daily retraining (after the warm start, before any step): every
        dynamic table with ``evict_after`` drops the ids last seen more than that long
        before the training window starts. Returns, per table of each layer,
        ``{"kept", "evicted", "oldest_seen"}`` (also in :meth:`stats`)."""
        for tables in self._layers:
            hours = tables[0].spec.evict_after_hours
            if hours is not None:
                oldest = self.window[0] - datetime.timedelta(hours=hours)
                for name, result in evict_tables(tables, oldest, self.optimizers).items():
                    self.evicted[name] = dict(result, oldest_seen=describe_time(oldest))
        return self.evicted

    def begin(self, attempt: Attempt) -> None:
        for table in self.tables:  # rows trained by this run were last seen in its last part
            table.stamp_trained_rows(self.window[1])
        if self.live_at_start is None:  # not resumed: this run's training begins now
            self.live_at_start = {name: stats["live_ids"] for name, stats in self.stats().items()}

    def stats(self) -> dict[str, dict]:
        """:meth:`DynamicTable.stats` of every dynamic table, by ``<layer>_<table>``, with
        ``admitted_this_run`` once training began and ``evicted_at_start`` where
        :meth:`evict_unseen` dropped ids."""
        found = {}
        for table in self.tables:
            stats = found[table.name] = table.stats()
            if self.live_at_start is not None and table.name in self.live_at_start:
                stats["admitted_this_run"] = max(
                    0, stats["live_ids"] - self.live_at_start[table.name]
                )
            if table.name in self.evicted:
                stats["evicted_at_start"] = self.evicted[table.name]["evicted"]
        return found

    def state(self) -> dict | None:
        return self.live_at_start or None  # a model with dynamic tables

    def restore(self, state) -> None:
        self.live_at_start = state
