"""The data position of a run: which work items each pass has finished.

Training hands the workers *items*: the rows of the shard plan's units, each unit cut
into items of at most ``steps_per_call * batch_size`` rows (every m-th row of the unit,
``InputPipeline.training_items``), one item per scheduled closure. The coordinator
learns an item is finished when its closure returns, so the position is exact:
``done[i]`` counts the passes item ``i`` has completed. A checkpoint stores it next to
the weights it belongs to (the coordinator drains the closures in flight before it
saves), and a resumed run schedules only what is left.

Order: pass ``p`` runs the items with ``done < p + 1`` in an order shuffled by
``(seed, p)``, so a resumed run sees the same order for the rest of a pass. Items of
pass ``p + 1`` start only when every item of pass ``p`` has been handed out.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Iterator

from recsys_dist.data.shard_plan import Unit, relative_paths
from recsys_dist.errors import RecsysError


class PositionMismatch(RecsysError):
    """A checkpoint's data position belongs to other data than this run's."""


def items_fingerprint(
    files: tuple[str, ...], items: tuple[Unit, ...], file_bytes: tuple[int, ...] = ()
) -> str:
    """Identifies the data a position counts: the files relative to their common root,
    their sizes, and the item boundaries (rows from the footers' row groups)."""
    digest = hashlib.sha256()
    digest.update(
        json.dumps([relative_paths(files), list(file_bytes), [_bounds(u) for u in items]]).encode()
    )
    return digest.hexdigest()[:16]


def _bounds(item: Unit) -> list[int]:
    return [item.file, item.start, item.stop] + ([item.stride] if item.stride != 1 else [])


def _absolute_paths_fingerprint(files: tuple[str, ...], items: tuple[Unit, ...]) -> str:
    """The fingerprint of checkpoints written before positions were root-relative."""
    digest = hashlib.sha256()
    digest.update(json.dumps([list(files), [_bounds(u) for u in items]]).encode())
    return digest.hexdigest()[:16]


class DataPosition:
    """Finished passes per item, and the order that hands out what is left.

    Args:
      files: The plan's files (``Unit.file`` indexes them).
      items: Every item of one pass.
      epochs: Passes to run.
      shuffle: Shuffle item order within each pass.
      seed: Seed of that shuffle.
      file_bytes: Size of each file (part of the fingerprint).
      contiguous_items: ``items`` cut as contiguous ranges, as training cut its units
        before its items were strided (``InputPipeline.contiguous_training_items``): a
        checkpoint that counts those resumes with its counts taken item by item (the
        same units, as many items each), so a pass it left half done finishes with as
        many rows of each unit, though not the same rows.
    """

    def __init__(
        self,
        files: tuple[str, ...],
        items: tuple[Unit, ...],
        epochs: int,
        shuffle: bool,
        seed: int,
        file_bytes: tuple[int, ...] = (),
        contiguous_items: tuple[Unit, ...] = (),
    ):
        self.files = files
        self.items = items
        # What checkpoints of earlier versions recorded over the same data.
        earlier = [_absolute_paths_fingerprint(files, items)]
        if len(contiguous_items) == len(items):
            earlier += [
                items_fingerprint(files, contiguous_items, file_bytes),
                _absolute_paths_fingerprint(files, contiguous_items),
            ]
        self._earlier_fingerprints = tuple(earlier)
        self.epochs = epochs
        self.shuffle = shuffle
        self.seed = seed
        self.done = [0] * len(items)
        self.stopped = False  # early stopping ended the run before its last pass
        self.fingerprint = items_fingerprint(files, items, file_bytes)

    # ---- progress -----------------------------------------------------------------------
    @property
    def total_rows(self) -> int:
        """Rows of all passes."""
        return self.epochs * sum(u.rows for u in self.items)

    @property
    def finished_rows(self) -> int:
        return sum(min(d, self.epochs) * u.rows for d, u in zip(self.done, self.items))

    @property
    def finished(self) -> bool:
        return self.stopped or all(d >= self.epochs for d in self.done)

    @property
    def passes_done(self) -> int:
        """Passes every item has finished."""
        return min(self.done, default=0)

    def complete(self, index: int) -> None:
        """Records one more finished pass of item ``index``."""
        self.done[index] += 1

    def schedule(self) -> Iterator[tuple[int, int]]:
        """(pass, item index) still to run, pass by pass (each index once per missing
        pass); passes count from 0."""
        if self.stopped:
            return
        for epoch in range(self.epochs):
            todo = [i for i, d in enumerate(self.done) if d <= epoch]
            if self.shuffle:
                random.Random(f"{self.seed}/{epoch}").shuffle(todo)
            yield from ((epoch, index) for index in todo)

    # ---- persistence --------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "fingerprint": self.fingerprint,
            "epochs": self.epochs,
            "items": len(self.items),
            "done": list(self.done),
            "stopped": self.stopped,
            "finished_rows": self.finished_rows,
            "total_rows": self.total_rows,
        }

    def restore(self, state: dict, source: str) -> None:
        """Takes over the finished passes of a checkpoint's position.

        Raises:
          PositionMismatch: the position counts items of other data (files or item
            boundaries differ), so it cannot say what is left.
        """
        known = (self.fingerprint, *self._earlier_fingerprints)
        if state.get("fingerprint") not in known or len(state["done"]) != len(self.items):
            raise PositionMismatch(
                f"{source}: the checkpoint's data position was recorded over other data "
                f"(fingerprint {state.get('fingerprint')} with {len(state.get('done', []))} "
                f"items, this run has {self.fingerprint} with {len(self.items)} items: the "
                "files (their paths under the data root, their sizes, their row groups), "
                "input.max_unit_rows, input.batch_size or train.steps_per_call changed). "
                "Resume with the same data and settings, or "
                "train into a new --model-dir"
            )
        self.done = [int(d) for d in state["done"]]
        self.stopped = bool(state.get("stopped", False))
