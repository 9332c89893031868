"""When the training loop logs, writes summaries and checkpoints: ``train.log_every_seconds``,
``train.summary_every_seconds``, ``train.checkpoint_every_steps`` and
``train.checkpoint_every_seconds``."""

from __future__ import annotations

import time

from recsys_dist.config.sections import TrainSpec


class Cadence:
    """The timing of one attempt's logs, summaries and checkpoints.

    Args:
      train: The ``train`` section.
      first_step: The global step the attempt began at (checkpoints count from it).
    """

    def __init__(self, train: TrainSpec, first_step: int):
        self.train = train
        self.start = self._last_log = self._last_summary = self._last_save = time.perf_counter()
        self._last_save_step = first_step

    def log_due(self, now: float) -> bool:
        if now - self._last_log < self.train.log_every_seconds:
            return False
        self._last_log = now
        return True

    def summary_due(self, now: float) -> bool:
        if now - self._last_summary < self.train.summary_every_seconds:
            return False
        self._last_summary = now
        return True

    def checkpoint_due(self, now: float, step: int) -> bool:
        train = self.train
        return (
            train.checkpoint_every_steps is not None
            and step - self._last_save_step >= train.checkpoint_every_steps
        ) or (
            train.checkpoint_every_seconds is not None
            and now - self._last_save >= train.checkpoint_every_seconds
        )

    def saved(self, step: int) -> None:
        """A checkpoint of ``step`` was just written (the next is due counting from now)."""
        self._last_save, self._last_save_step = time.perf_counter(), step
