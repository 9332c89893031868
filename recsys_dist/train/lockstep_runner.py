"""The lockstep runner (``multi_worker_mirrored``): every worker runs this process's
training loop, and all workers train each item together, one ``tf.function`` call per
synchronous step.

Worker ``w`` of ``W`` reads its share of the item (:func:`worker_rows`) in batches of
``batch_size / W``; every worker runs the item's ``ceil(n / batch_size)`` steps (cut to
the step budget), a worker whose rows run out first on a zero-weight row for the steps
it lacks. A step's loss and weight are summed over the workers, so every worker returns
the same figures.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import tensorflow as tf

from recsys_dist.data.input_fn import InputPipeline
from recsys_dist.data.shard_plan import Unit
from recsys_dist.train.step import ReplicaStep


def worker_rows(
    start: int, stop: int, worker: int, workers: int, stride: int = 1
) -> tuple[int, int]:
    """The bounds ``(a, b)`` of the rows of item ``start, start + stride, ...`` below
    ``stop`` that ``worker`` of ``workers`` reads under ``multi_worker_mirrored``: the
    item's rows ``w n / W`` to ``(w + 1) n / W``, ``n`` its rows, read as rows ``a, a +
    stride, ...`` below ``b``."""
    n = len(range(start, stop, stride))
    first, end = worker * n // workers, (worker + 1) * n // workers
    return start + first * stride, (stop if end == n else start + end * stride)


class LockstepRunner:
    """``train_item(file_index, start, stop, stride, max_steps)`` of a ``multi_worker_mirrored``
    worker, a Python function with the asynchronous runner's results.

    Args:
      strategy: The ``MultiWorkerMirroredStrategy``.
      pipeline: The planned training split.
      replica: The replica's step (given its rows whole).
      global_step: Advanced by the steps of each item.
      workers: Workers in the job.
      worker: This worker's index.
    """

    def __init__(
        self,
        strategy,
        pipeline: InputPipeline,
        replica: ReplicaStep,
        global_step: tf.Variable,
        workers: int,
        worker: int,
    ):
        self.strategy, self.pipeline, self.replica = strategy, pipeline, replica
        self.global_step, self.workers, self.worker = global_step, workers, worker
        self.batch = pipeline.spec.batch_size
        self.share = self.batch // workers
        self._step = self._synchronous_step()

    def train_item(self, file_index, start, stop, stride, max_steps):
        file_index, start, stop, stride = int(file_index), int(start), int(stop), int(stride)
        # Each worker's rows (those the split keeps); every worker runs the steps the
        # largest share needs (ceil(n / batch_size) when nothing is filtered).
        counts = [
            self.pipeline.item_rows(Unit(file_index, a, b, stride))
            for a, b in (
                worker_rows(start, stop, w, self.workers, stride) for w in range(self.workers)
            )
        ]
        steps = min(max(-(-c // self.share) for c in counts), int(max_steps))
        totals, first_step_at = tf.zeros([2]), 0.0
        for rows in self._batches(file_index, start, stop, stride, steps):
            totals += self._step(rows)
            first_step_at = first_step_at or time.time()
        self.global_step.assign_add(steps)
        trained = sum(min(c, steps * self.share) for c in counts)
        return (
            totals[0],
            totals[1],
            tf.constant(float(trained)),
            tf.constant(steps, tf.int64),
            tf.constant(first_step_at, tf.float64),
        )

    def _synchronous_step(self):
        """``step(rows) -> [loss sum, weight]`` over all workers: one synchronous step."""
        strategy = self.strategy
        with tf.Graph().as_default():  # the batches' structure
            zero = tf.constant(0, tf.int64)
            spec = self.pipeline.item_dataset(
                zero, zero, zero, training=True, batch_size=self.share
            ).element_spec
        # Batch dimension unknown: one trace for every batch size, so every worker makes
        # the same collectives in the same order.
        spec = tf.nest.map_structure(lambda s: s._unbatch()._batch(None), spec)  # noqa: SLF001

        def replica_totals(rows):
            loss, weight, _ = self.replica.run(rows)
            return tf.stack([loss, weight])

        @tf.function(input_signature=[spec])
        def step(rows):
            return strategy.reduce(
                tf.distribute.ReduceOp.SUM, strategy.run(replica_totals, args=(rows,)), axis=None
            )

        return step

    def _batches(
        self, file_index: int, start: int, stop: int, stride: int, steps: int
    ) -> Iterator[dict]:
        """``steps`` batches of this worker's share of the item's rows: its own rows,
        then (when they run out first) the item's first row with weight 0."""

        def read(a: int, b: int, batch_size: int, step: int = 1) -> tf.data.Dataset:
            return self.pipeline.item_dataset(
                *(tf.constant(v, tf.int64) for v in (file_index, a, b)),
                training=True,
                batch_size=batch_size,
                stride=tf.constant(step, tf.int64),
            )

        lo, hi = worker_rows(start, stop, self.worker, self.workers, stride)
        taken = 0
        for rows in read(lo, hi, self.share, stride) if hi > lo else ():
            if taken == steps:
                return
            yield rows
            taken += 1
        if taken < steps:
            # (the item's first row it returns: with a hash_share, not always row start)
            end = start + 1 if self.pipeline.hash_share is None else stop
            padding = next(iter(read(start, end, 1, stride)))
            padding = dict(padding, valid=tf.zeros_like(padding["valid"]))
            for _ in range(steps - taken):
                yield padding
