"""Early stopping's hook: scores ``data.validation`` after every pass, stops after
``patience`` passes without a gain, keeps the best pass's checkpoint and ends the run
with its weights (``train.early_stopping``; the record itself: ``train/early_stopping.py``).
"""

from __future__ import annotations

import logging

from recsys_dist.checkpoint.restore import restore
from recsys_dist.checkpoint.store import CheckpointError
from recsys_dist.cluster.collective import from_chief
from recsys_dist.data.input_fn import InputPipeline
from recsys_dist.evaluation.evaluate import evaluate_on_one_device, evaluate_split
from recsys_dist.train.attempt import Attempt
from recsys_dist.train.early_stopping import EarlyStopping
from recsys_dist.train.hooks import Hook

log = logging.getLogger(__name__)


class EarlyStoppingHook(Hook):
    """Early stopping of one run.

    Args:
      trainer: The trainer (its model, checkpoints and data position).
      validation: The planned ``data.validation`` split.
    """

    state_key = "early_stopping"

    def __init__(self, trainer, validation: InputPipeline):
        config = trainer.config
        spec = config.train.early_stopping
        self.trainer, self.validation = trainer, validation
        self.record = EarlyStopping(spec, spec.label or config.labels[0])

    def begin(self, attempt: Attempt) -> None:
        """A resumed run whose checkpoint was written after a pass ended but before it
        was scored scores it now (the weights are that pass's: the next pass had not
        started)."""
        position = self.trainer.position
        if not position.stopped and position.passes_done > self.record.scored_passes:
            self.after_pass(attempt, position.passes_done)

    def after_pass(self, attempt: Attempt, epoch: int) -> bool:
        """Scores the validation split after pass ``epoch`` (from 1), checkpoints, and
        keeps the best pass's checkpoint. Returns True when training should stop."""
        trainer, record = self.trainer, self.record
        scores = self._scores(attempt)
        stop = record.record(epoch, trainer.step, scores[record.metric])
        for entry in attempt.epochs:
            if entry["epoch"] == epoch:
                entry["validation"] = {"auc": scores["auc"], "logloss": scores["logloss"]}
        log.info("%s", record.describe_last())
        if stop:
            trainer.position.stopped = attempt.stopped = True
            if epoch < trainer.position.epochs:
                log.info(
                    "early\tstop after epoch %d of %d: %d epoch(s) without a gain of more "
                    "than %s in validation %s",
                    epoch,
                    trainer.position.epochs,
                    record.spec.patience,
                    record.spec.min_delta,
                    record.metric,
                )
        self.pin_best()
        trainer.checkpoint(attempt)
        attempt.saved(trainer.step)
        return stop

    def _scores(self, attempt: Attempt) -> dict[str, float]:
        """AUC and logloss of early stopping's label on the validation split. Under
        ``multi_worker_mirrored`` the workers checkpoint, the chief scores that checkpoint
        alone on one device, and sends the figures to the others."""
        trainer, label = self.trainer, self.record.label
        runtime, labels = trainer.runtime, trainer.config.labels
        if not runtime.lockstep:
            metrics, _ = evaluate_split(runtime, trainer.model, self.validation, labels, {})
            return metrics["labels"][label]
        trainer.checkpoint(attempt)
        figures = (0.0, 0.0)
        if runtime.is_chief:
            metrics = evaluate_on_one_device(
                trainer.config, trainer.checkpoints.latest(), self.validation, labels, {}
            )
            figures = (metrics["labels"][label]["auc"], metrics["labels"][label]["logloss"])
        auc, logloss = from_chief(runtime.strategy, figures, runtime.is_chief)
        return {"auc": auc, "logloss": logloss}

    def pin_best(self) -> None:
        """Keeps the best pass's checkpoint whatever ``train.keep_checkpoints`` says."""
        best = self.record.best
        self.trainer.checkpoints.pinned = {best["step"]} if best else set()

    def end(self, attempt: Attempt) -> bool:
        """Loads the best pass's weights when the run ends on a worse one (keeping the
        global step); True when it did."""
        trainer, best = self.trainer, self.record.best
        if best is None or best["step"] == trainer.step:
            return False
        saved = trainer.checkpoints.at_step(best["step"])
        if saved is None:
            raise CheckpointError(
                f"{trainer.checkpoints.root}: the checkpoint of the best "
                f"epoch ({best['epoch']}, step {best['step']:,}) is gone; "
                "it is kept for early stopping, so it was removed by hand"
            )
        step = trainer.step
        restore(trainer.checkpoint_object, saved)
        trainer.global_step.assign(step)
        log.info(
            "best\tepoch %d (validation %s %.4f): its weights, from %s, are the run's final model",
            best["epoch"],
            self.record.metric,
            best["value"],
            saved.directory,
        )
        return True

    def state(self) -> dict:
        return self.record.to_json()

    def restore(self, state) -> None:
        self.record.restore(state)
        self.pin_best()
