"""The coordinator's running state of one attempt of a run: counters, the recent losses
and rates the progress line averages over, the passes trained so far."""

from __future__ import annotations

import collections
import dataclasses

from recsys_dist.train.cadence import Cadence


@dataclasses.dataclass
class Counters:
    """Counters of one attempt of a run (the coordinator's view)."""

    steps: int = 0
    rows: int = 0
    skipped: int = 0


@dataclasses.dataclass
class Attempt:
    """The coordinator's running state of one attempt of a run.

    Args:
      first_step: The global step the attempt began at.
      keep: Losses (and rate samples) the progress line averages over.
      cadence: When it logs, writes summaries and checkpoints.
    """

    first_step: int
    keep: int
    cadence: Cadence
    counters: Counters = dataclasses.field(default_factory=Counters)
    epoch: int | None = None  # the pass being trained
    epochs: list = dataclasses.field(default_factory=list)  # finished passes' AUCs
    pass_start: int = 0  # rows collected before this pass
    first: tuple[float, int] | None = None  # (time, rows) at the first collected item
    first_step_at: float | None = None  # Unix time of the attempt's first step's end
    saved_at: int | None = None  # the step of this attempt's latest checkpoint
    stopped: bool = False  # early stopping ended the run at the end of pass `epoch`

    def __post_init__(self):
        self.recent: collections.deque = collections.deque(maxlen=self.keep)  # (loss, weight)
        self.window: collections.deque = collections.deque(maxlen=self.keep)  # (time, rows)

    @property
    def step(self) -> int:
        """The global step after the items collected so far."""
        return self.first_step + self.counters.steps

    def count(self, loss_sum: float, weight: float, rows: int, steps: int) -> None:
        """Counts one collected item's figures."""
        self.counters.steps += steps
        self.counters.rows += rows
        self.counters.skipped += int(rows - weight)
        if steps:
            self.recent.append((loss_sum, weight))

    def saved(self, step: int) -> None:
        """A checkpoint of global ``step`` was just written by this attempt."""
        self.saved_at = step
        self.cadence.saved(step)

    def mean_loss(self) -> float:
        """The weighted mean loss of the recent items (nan before the first)."""
        return mean_loss(self.recent)


def mean_loss(recent) -> float:
    """The weighted mean of ``(loss sum, weight)`` pairs (nan when they weigh nothing)."""
    loss = sum(value for value, _ in recent)
    weight = sum(w for _, w in recent)
    return loss / weight if weight else float("nan")
