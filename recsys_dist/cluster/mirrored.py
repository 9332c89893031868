"""Synchronous training in this process: ``cluster.strategy: mirrored``.

A ``MirroredStrategy`` keeps a copy of every variable (the embedding tables too) on each
of its replicas: ``cluster.workers`` devices of this machine (its GPUs when it has that
many, else logical CPU devices). Each step splits ``input.batch_size`` rows (the global
batch) over the replicas, sums their gradients once and applies the same update to
every copy, so the replicas never drift apart and a run is deterministic given the data
order.

The trainer and the scorer drive any strategy through a coordinator's ``schedule`` and
``fetch`` (``cluster/dispatch.py``). :class:`SynchronousCoordinator` gives them that
interface here: ``schedule`` runs the work item at once, in this process.

Gradients are combined with ``ReductionToOneDevice``: the collective all-reduce that
``MirroredStrategy`` picks by default fails on the sparse gradients of embedding lookups
inside the training function's loop of steps ("Shape mismatch in the collective
instance": the number of rows each replica touches is known only at run time;
docs/cluster.md#strategies).
"""

from __future__ import annotations

import tensorflow as tf

from recsys_dist.cluster.server import ClusterError


def split_cpu(replicas: int) -> None:
    """Splits this process's CPU into ``replicas`` logical devices for a
    ``MirroredStrategy``, unless the process has that many GPUs.

    TensorFlow fixes a process's devices when it starts, at its first op, so a command
    calls this before it plans its input (:func:`recsys_dist.cluster.runtime.
    prepare_devices`): planning may run ops already (a string vocabulary's fingerprints).
    Called after TensorFlow started, it changes nothing; :func:`mirrored_strategy` then
    names the problem.
    """
    if len(tf.config.list_physical_devices("GPU")) >= replicas:
        return
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
        )
    except RuntimeError:
        pass  # TensorFlow has started: the devices it made are checked by the caller.


def mirrored_strategy(replicas: int) -> tf.distribute.MirroredStrategy:
    """A ``MirroredStrategy`` over ``replicas`` devices of this process: its GPUs when it
    has that many, else logical CPU devices (:func:`split_cpu`)."""
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) >= replicas:
        devices = [f"/gpu:{i}" for i in range(replicas)]
    else:
        split_cpu(replicas)
        have = len(tf.config.list_logical_devices("CPU"))
        if have < replicas:
            raise ClusterError(
                f"cluster.strategy: mirrored needs {replicas} CPU devices but "
                f"TensorFlow started in this process with {have}; start a new "
                "process (devices are fixed when TensorFlow starts)"
            )
        devices = [f"/cpu:{i}" for i in range(replicas)]
    return tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice()
    )


class _Done:
    """A finished closure: ``fetch`` returns its numpy values or raises its error."""

    def __init__(self, value=None, error: Exception | None = None):
        self._value, self._error = value, error

    def fetch(self):
        if self._error is not None:
            raise self._error
        return tf.nest.map_structure(lambda t: t.numpy(), self._value)


class SynchronousCoordinator:
    """The part of ``ClusterCoordinator``'s interface the trainer and scorer use, for a
    strategy whose replicas all live in this process: ``schedule`` runs the function at
    once; its error, like a cluster's, comes out of ``fetch``."""

    def schedule(self, function, args=(), kwargs=None) -> _Done:
        try:
            return _Done(function(*args, **(kwargs or {})))
        except tf.errors.OpError as exc:
            return _Done(error=exc)

    def join(self) -> None:
        """Nothing is ever in flight."""


def settle_replica_local(strategy: tf.distribute.Strategy, variables) -> None:
    """Gives every replica's copy of each replica-local variable the replicas' aggregate.

    Batch norm's moving statistics are ``ON_READ`` variables: under ``mirrored`` each
    replica updates its own copy from its own rows, and a checkpoint saves their mean.
    Scoring in the same process would otherwise read each replica's own copy; call this
    before scoring so every row is scored with what the checkpoint holds. Nothing to do
    under other strategies.
    """
    if not isinstance(strategy, tf.distribute.MirroredStrategy):
        return
    for variable in variables:
        if variable.synchronization == tf.VariableSynchronization.ON_READ:
            variable.assign(variable.read_value())
