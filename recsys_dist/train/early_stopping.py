"""Early stopping: the validation metric of every pass, the best pass, when to stop.

The trainer scores ``data.validation`` after each pass (``train.early_stopping``), checkpoints,
and asks :meth:`EarlyStopping.record` whether to go on. The best pass's checkpoint is kept
whatever ``train.keep_checkpoints`` says (the trainer pins it), and when the run ends its
weights become the final model. The record travels in every checkpoint's state, so a
resumed run goes on counting where the killed one stopped.
"""

from __future__ import annotations

import dataclasses

from recsys_dist.config.sections import EarlyStoppingSpec


@dataclasses.dataclass
class EarlyStopping:
    """The validation record of one run.

    Args:
      spec: ``train.early_stopping``.
      label: The label whose metric decides (``spec.label`` or the model's first label).

    Attributes:
      history: ``{"epoch": n (from 1), "step": global step, "value": metric}`` per
        scored pass, in order.
      best: The history entry of the best pass, or None before the first.
      stopped: The record asked training to stop before its last pass.
    """

    spec: EarlyStoppingSpec
    label: str
    history: list[dict] = dataclasses.field(default_factory=list)
    best: dict | None = None
    stopped: bool = False

    @property
    def metric(self) -> str:
        return self.spec.metric

    def _gain(self, value: float) -> float:
        """How much ``value`` improves on the best so far (positive: better)."""
        if self.best is None:
            return float("inf")
        change = value - self.best["value"]
        return change if self.metric == "auc" else -change

    def record(self, epoch: int, step: int, value: float) -> bool:
        """Records pass ``epoch``'s validation ``value`` (at global ``step``); returns
        True when training should stop (``patience`` passes without a gain)."""
        entry = {"epoch": epoch, "step": step, "value": float(value)}
        if self.best is None or self._gain(value) > self.spec.min_delta:
            self.best = entry
        self.history.append(entry)
        self.stopped = self.passes_since_best >= self.spec.patience
        return self.stopped

    @property
    def passes_since_best(self) -> int:
        return 0 if self.best is None else self.history[-1]["epoch"] - self.best["epoch"]

    @property
    def scored_passes(self) -> int:
        return len(self.history)

    def describe_last(self) -> str:
        """One line on the newest pass: its value, and the best so far."""
        last, best = self.history[-1], self.best
        line = f"validate epoch {last['epoch']}: {self.metric}/{self.label} {last['value']:.4f}"
        if best is last:
            return line + " (best so far)"
        return line + (
            f" (best: epoch {best['epoch']}, {best['value']:.4f}; "
            f"{self.passes_since_best} of {self.spec.patience} epoch(s) "
            "without a gain)"
        )

    def to_json(self) -> dict:
        return {
            "label": self.label,
            "metric": self.metric,
            "history": list(self.history),
            "best": self.best,
            "stopped": self.stopped,
        }

    def restore(self, state: dict | None) -> None:
        """Takes over a checkpoint's record (none: a checkpoint written without early
        stopping, which starts the record afresh)."""
        if not state:
            return
        self.history = [dict(entry) for entry in state.get("history", [])]
        best = state.get("best")
        self.best = next((e for e in self.history if best and e["epoch"] == best["epoch"]), None)
        self.stopped = bool(state.get("stopped", False))
