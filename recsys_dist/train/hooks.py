"""Hooks: the parts of training that act at fixed points of the loop.

The loop (``train/loop.py``) calls every hook when an attempt begins, after each pass
and when it ends; a hook's state travels in every checkpoint, so a resumed run goes on
where the killed one stopped. The trainer's hooks: dynamic-table bookkeeping
(``train/table_bookkeeping.py``) and early stopping (``train/validation.py``).
"""

from __future__ import annotations

from recsys_dist.train.attempt import Attempt


class Hook:
    """A part of training the loop calls; every method does nothing unless overridden.

    Attributes:
      state_key: The key of :meth:`state` in a checkpoint's state (None: nothing kept).
    """

    state_key: str | None = None

    def begin(self, attempt: Attempt) -> None:
        """Before the attempt's first item (nothing in flight)."""

    def after_pass(self, attempt: Attempt, epoch: int) -> bool:
        """After pass ``epoch`` (from 1) ended, nothing in flight; True stops training."""
        return False

    def end(self, attempt: Attempt) -> bool:
        """When the attempt's last item is back; True when the hook changed the weights
        (the run then ends with a checkpoint of them)."""
        return False

    def state(self) -> dict | None:
        """What a checkpoint keeps of the hook (None: nothing)."""
        return None

    def restore(self, state) -> None:
        """Takes over :meth:`state` from the checkpoint a run resumes (None when the
        checkpoint has none)."""
