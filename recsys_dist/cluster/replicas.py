"""How a worker's batch is split over its replicas (one per GPU, one on a CPU worker)."""

from __future__ import annotations

import tensorflow as tf


def replica_slice(batch: dict) -> dict:
    """This replica's share of a worker batch.

    The whole batch on a one-replica worker; else a contiguous slice: replica ``r`` of
    ``R`` takes rows ``[r n / R, (r + 1) n / R)``. Call inside ``strategy.run``.
    """
    context = tf.distribute.get_replica_context()
    replicas = context.num_replicas_in_sync
    if replicas == 1:
        return batch
    size = tf.shape(batch["valid"], out_type=tf.int64)[0]
    replica = tf.cast(context.replica_id_in_sync_group, tf.int64)
    start, stop = size * replica // replicas, size * (replica + 1) // replicas
    return tf.nest.map_structure(lambda t: t[start:stop], batch)
