"""The training loop: hands out the data position's work items, collects them as they finish,
ends passes, and logs, writes summaries and checkpoints when the cadence says.

Dynamic sharding: the coordinator hands out work items (row ranges of at most
``steps_per_call * batch_size`` rows) one per closure, to whichever worker is free. An
item is finished when its closure returns, which makes the data position exact (see
``train/data_position.py``): a checkpoint records the finished items, a killed worker's
closure is re-run elsewhere by ``ClusterCoordinator`` (its item is read again from the
start: at least once, at most one item per kill), and a resumed run schedules only
what is left. Training stops when every item has run ``epochs`` times, or after
``max_steps`` steps; there is no end-of-data ``OutOfRangeError`` to handle.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Sequence

from recsys_dist.checkpoint.store import SavedCheckpoint
from recsys_dist.cluster.collective import agree
from recsys_dist.cluster.dispatch import InFlight, check_item_rows
from recsys_dist.cluster.runtime import Runtime
from recsys_dist.config.sections import TrainSpec
from recsys_dist.errors import WorkerJoins
from recsys_dist.train.attempt import Attempt
from recsys_dist.train.auc_reading import AucReader
from recsys_dist.train.cadence import Cadence
from recsys_dist.train.data_position import DataPosition
from recsys_dist.train.early_stopping import EarlyStopping
from recsys_dist.train.hooks import Hook
from recsys_dist.train.reporting import log_pass, progress_line, write_summaries
from recsys_dist.train.result import TrainResult

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class LoopParts:
    """What the training loop works with; the trainer builds it (``Trainer.loop_parts``).

    Attributes:
      runtime: The connected cluster; its coordinator runs the items.
      train: The ``train`` section (the cadence, ``max_steps``).
      first_step: The global step the attempt begins at.
      batch_size: Rows per step.
      position: The data position: what is left (its ``items``, over its ``files``);
        the loop marks each item trained whole.
      train_item: ``train_item(file_index, start, stop, stride, max_steps) -> (loss
        sum, weight, rows, steps, first step's end)``, run on a worker per item.
      hooks: Called when the attempt begins, after each pass and when it ends.
      count_sightings: Counting of the dynamic tables' sightings, on in the first pass.
      labels: The labels, in the order the progress line shows their AUCs.
      auc_reader: Reads the training AUCs.
      rows_in_flight: Rows the closures in flight can hold at most.
      checkpoint: Saves a checkpoint of the attempt (call with nothing in flight).
      table_stats: The dynamic tables' figures, for the summaries and the result.
      resumed: The attempt resumed a checkpoint; when it trains no step, that
        checkpoint is not written again.
      early_stopping: Early stopping's record, or None without ``train.early_stopping``.
    """

    runtime: Runtime
    train: TrainSpec
    first_step: int
    batch_size: int
    position: DataPosition
    train_item: Callable
    hooks: Sequence[Hook]
    count_sightings: Callable[[bool], None]
    labels: Sequence[str]
    auc_reader: AucReader
    rows_in_flight: int
    checkpoint: Callable[[Attempt], SavedCheckpoint]
    table_stats: Callable[[], dict[str, dict]]
    resumed: bool
    early_stopping: EarlyStopping | None


class TrainingLoop:
    """One attempt of a run, driven from the coordinator.

    Args:
      parts: What the loop works with.
      writer: The summary writer.
      sync_summaries: Uploads the summaries written so far (a remote model dir).
    """

    def __init__(self, parts: LoopParts, writer, sync_summaries: Callable[[], None]):
        self.parts, self.writer, self.sync_summaries = parts, writer, sync_summaries
        runtime = parts.runtime
        self.cadence = Cadence(parts.train, parts.first_step)
        self.attempt = Attempt(parts.first_step, max(8, 4 * runtime.num_workers), self.cadence)
        self.in_flight = InFlight(
            runtime.coordinator,
            parts.train_item,
            2 * runtime.num_workers,
            any_order=True,
            unreachable=runtime.worker_unreachable,
        )

    def run(self) -> TrainResult:
        parts, attempt, in_flight = self.parts, self.attempt, self.in_flight
        for hook in parts.hooks:
            hook.begin(attempt)
        # The rate's first point is the loop's start, so the first finished item has a
        # progress line (its rate counts the start-up) and items that finish together
        # early never read as a burst of millions of examples per second.
        attempt.window.append((time.perf_counter(), 0))
        for epoch, index, budget in self._work():
            if epoch != attempt.epoch:
                if attempt.epoch is not None and self._end_pass():
                    break
                attempt.epoch = epoch
                # (nothing in flight: the pass before is drained)
                parts.count_sightings(epoch == 0)
            item = parts.position.items[index]
            in_flight.put((index, budget), item.file, item.start, item.stop, item.stride, budget)
            if not in_flight.has_room():
                self._collect_one()
        while len(in_flight):
            self._collect_one()
        # A copy of an item may still be on a worker whose link is down; the final
        # checkpoint waits for it (and for every worker to answer).
        parts.runtime.wait_for_workers("the final checkpoint")
        parts.runtime.join()
        return self._finish()

    def _work(self) -> Iterator[tuple[int, int, int]]:
        """``(epoch, item index, step budget)`` of what is left to train, in order; the
        budget is the item's batches, cut to what ``train.max_steps`` leaves."""
        parts = self.parts
        max_steps, batch, items = parts.train.max_steps, parts.batch_size, parts.position.items
        scheduled = parts.first_step
        for epoch, index in parts.position.schedule():
            budget = -(-items[index].rows // batch)
            if max_steps is not None:
                budget = min(budget, max_steps - scheduled)
            if budget <= 0:
                return
            scheduled += budget
            yield epoch, index, budget

    def _end_pass(self) -> bool:
        """A pass ends (its AUC covers its rows only); True when a hook stops training."""
        attempt = self.attempt
        self._drain()
        attempt.epochs.append(self._pass_figures(reset=True))
        attempt.pass_start = attempt.counters.rows
        return self._after_pass(attempt.epoch + 1)

    def _after_pass(self, epoch: int) -> bool:
        stop = False
        for hook in self.parts.hooks:
            stop = hook.after_pass(self.attempt, epoch) or stop
        return stop

    def _pass_figures(self, reset: bool) -> dict:
        """The training AUC of the pass that has just ended; the AUC metrics then start
        over for the next pass (unless it was the last)."""
        parts, epoch = self.parts, self.attempt.epoch
        aucs = parts.auc_reader.values(reset=reset)
        log_pass(epoch, parts.position.epochs, aucs)
        return {"epoch": epoch + 1, "auc": aucs}

    def _collect(self, tag: tuple[int, int], result) -> None:
        """Counts one finished item; marks it done when it was trained whole."""
        parts, attempt, position = self.parts, self.attempt, self.parts.position
        (index, budget), item = tag, position.items[tag[0]]
        loss_sum, weight, n_rows, n_steps, first_step_at = (float(v) for v in result)
        if n_steps and (attempt.first_step_at is None or first_step_at < attempt.first_step_at):
            attempt.first_step_at = first_step_at
        if budget >= -(-item.rows // parts.batch_size):
            check_item_rows(position.files, item, int(n_rows), "read")
            position.complete(index)
        attempt.count(loss_sum, weight, int(n_rows), int(n_steps))

    def _drain(self) -> None:
        while len(self.in_flight):
            self._collect(*self.in_flight.pop())

    def _collect_one(self) -> None:
        """Collects an item that is back, then logs, summarizes and checkpoints when due."""
        parts, attempt, cadence = self.parts, self.attempt, self.cadence
        self._collect(*self.in_flight.pop())
        now = time.perf_counter()
        if attempt.first is None:
            attempt.first = (now, attempt.counters.rows)
            parts.runtime.first_step_back()
        attempt.window.append((now, attempt.counters.rows))
        due = (
            cadence.log_due(now),
            cadence.summary_due(now),
            cadence.checkpoint_due(now, attempt.step),
        )
        runtime = parts.runtime
        joining = runtime.joining()
        if joining:
            self._take_in(joining)
        if runtime.worker_unreachable() or ((due[1] or due[2]) and not runtime.workers_answer()):
            # A summary write or a checkpoint on this process waits until every worker
            # answers (holding the whole run while a link is cut), and a checkpoint waits
            # for every closure in flight: both wait until the worker answers again.
            # Progress lines go on.
            due = (due[0], False, False)
        if runtime.lockstep:  # every worker does what the chief decided
            due = agree(runtime.strategy, due, runtime.is_chief)
        log_now, summary, save = due
        if log_now:
            line = progress_line(
                attempt,
                parts.position,
                list(parts.labels),
                parts.rows_in_flight,
                parts.auc_reader.latest,
            )
            if line is not None:
                log.info("%s", line)
        if summary:
            self._summaries(attempt.counters.rows / (now - cadence.start))
        if save:
            self._drain()  # the checkpoint must match the finished items exactly
        if save and not runtime.lockstep and not runtime.workers_answer():
            save = False  # a worker went away during the drain: save once it answers
        if save:
            parts.checkpoint(attempt)
            self.writer.flush()
            self.sync_summaries()
            attempt.saved(attempt.step)

    def _take_in(self, workers: list[int]) -> None:
        """Workers missing when the run started answer now: saves a checkpoint (when the
        run's own workers answer) and starts the run again, with every worker, from it."""
        parts, attempt = self.parts, self.attempt
        self._drain()
        saved = parts.runtime.workers_answer()
        if saved:
            parts.checkpoint(attempt)
            self.writer.flush()
            self.sync_summaries()
            attempt.saved(attempt.step)
        raise WorkerJoins(
            f"worker {', '.join(map(str, workers))} answers now; the run starts again with "
            "every worker from "
            + (f"the checkpoint of step {attempt.step:,}" if saved else "its last checkpoint")
        )

    def _summaries(self, rate: float, final: bool = False) -> None:
        """Writes the summaries; the AUCs are the latest reading (read now at the end)."""
        parts = self.parts
        write_summaries(
            self.writer,
            self.attempt.step,
            rate,
            self.attempt.mean_loss(),
            parts.auc_reader.values() if final else parts.auc_reader.latest(),
            parts.table_stats(),
        )

    def _finish(self) -> TrainResult:
        """Ends the last pass, writes the final summaries and checkpoint; the figures."""
        parts, attempt = self.parts, self.attempt
        counters = attempt.counters
        if attempt.epoch is not None and not attempt.stopped:
            attempt.epochs.append(self._pass_figures(reset=False))
            self._after_pass(attempt.epoch + 1)
        changed = any([hook.end(attempt) for hook in parts.hooks])
        seconds = time.perf_counter() - self.cadence.start
        self._summaries(counters.rows / seconds if seconds else 0.0, final=True)
        self.writer.flush()
        end = time.perf_counter()  # the rates leave out the final checkpoint
        # Never rewrite the restored checkpoint, nor one this attempt just wrote.
        if changed or ((counters.steps or not parts.resumed) and attempt.saved_at != attempt.step):
            parts.checkpoint(attempt)
        self.sync_summaries()
        warm = (
            (counters.rows - attempt.first[1]) / (end - attempt.first[0])
            if attempt.first and end > attempt.first[0]
            else float("nan")
        )
        # The last pass's AUC (a stop between passes has already reset the metrics).
        auc = attempt.epochs[-1]["auc"] if attempt.epochs else parts.auc_reader.values()
        stopping = parts.early_stopping
        return TrainResult(
            counters.steps,
            counters.rows,
            counters.skipped,
            seconds,
            attempt.mean_loss(),
            auc,
            warm,
            attempt.epochs,
            parts.table_stats(),
            stopping.to_json() if stopping else None,
            attempt.first_step_at,
        )
