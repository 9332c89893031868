"""One replica's training step: the loss, its gradients, the optimizers' update and the
training AUC.

Loss scaling: a replica's loss is the mean over its valid rows divided by the number
of replicas of its worker; ``apply_gradients`` sums the replicas' gradients once, so a
worker step applies the mean gradient over the worker's batch, whatever the number of
replicas (one on a CPU worker, one per GPU otherwise; each replica takes its own
slice of the batch, :func:`~recsys_dist.cluster.replicas.replica_slice`).
"""

from __future__ import annotations

import tensorflow as tf

from recsys_dist.cluster.replicas import replica_slice
from recsys_dist.train.dense_cache import watched
from recsys_dist.train.optimizers import ModelOptimizers

AUC_THRESHOLDS = 2000


def replica_loss(
    logits: dict,
    labels: dict,
    valid: tf.Tensor,
    names: list[str],
    replicas: int,
    extra_losses: list | None = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """One replica's loss, scaled so the replicas' summed gradients are the step's mean.

    With several replicas every one divides its weighted sum by the weight of the whole
    step's batch (summed over the replicas, as ``tf.nn.compute_average_loss`` divides by
    the global batch), so the gradients ``apply_gradients`` sums once are exactly those of
    the step's mean loss, whatever rows each replica got.

    Args:
      logits, labels: Per label name, ``[B]`` tensors of this replica's rows.
      valid: ``[B]`` example weights (0 for skipped rows).
      names: Labels in the loss (their cross-entropies add up).
      replicas: Replicas in sync; ``apply_gradients`` sums their gradients once.
      extra_losses: Regularisation losses of the model, counted once per step.

    Returns:
      ``(loss, per_example)``: the scalar to differentiate, and the weighted ``[B]``
      cross-entropy (for reporting).
    """
    per_example = (
        tf.add_n(
            [
                tf.nn.sigmoid_cross_entropy_with_logits(labels=labels[name], logits=logits[name])
                for name in names
            ]
        )
        * valid
    )
    weight = tf.reduce_sum(valid)
    if replicas > 1:
        weight = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, weight)
    loss = tf.reduce_sum(per_example) / tf.maximum(weight, 1.0)
    if extra_losses:
        loss += tf.add_n(extra_losses) / replicas
    return loss, per_example


def require_gradients(variables: list, grads: list) -> None:
    """Raises when a variable gets no gradient (checked at tracing): every embedding table
    of a model is read by its loss, so a missing gradient is a bug that would leave the
    table silently at its initial rows (as a gradient lost on the way to the parameter
    servers once did).

    Raises:
      RuntimeError: naming the variables without a gradient.
    """
    untrained = [v.name for v, g in zip(variables, grads) if g is None]
    if untrained:
        raise RuntimeError(
            f"no gradient reaches the embedding variables {untrained}; "
            "every table of the model is read by the loss"
        )


def training_auc(labels: list[str]) -> dict[str, tf.keras.metrics.AUC]:
    """The streaming training AUC of each label (create under the strategy's scope)."""
    return {
        label: tf.keras.metrics.AUC(
            num_thresholds=AUC_THRESHOLDS, from_logits=True, name=f"auc_{label}"
        )
        for label in labels
    }


class ReplicaStep:
    """The step one replica runs: :meth:`run` ``(batch, dense_copies=()) -> (loss sum,
    weight, rows)`` over its rows, after applying the gradients.

    Args:
      model: The ranking model.
      optimizers: Its optimizers (embedding and dense).
      auc: The training AUC per label (:func:`training_auc`).
      labels: The labels in the loss.
      replicas: Replicas in sync.
      slice_batch: Whether the replica takes its own slice of a worker's batch (the
        asynchronous runner); a lockstep replica is given its rows already.
    """

    def __init__(
        self,
        model,
        optimizers: ModelOptimizers,
        auc: dict,
        labels: list[str],
        replicas: int,
        slice_batch: bool,
    ):
        self.model, self.optimizers, self.auc = model, optimizers, auc
        self.labels, self.replicas, self.slice_batch = labels, replicas, slice_batch

    # Model code is plain TensorFlow (no Python control flow on tensors), so AutoGraph
    # must not convert it: converting every layer's call (and tf-keras' own __call__
    # wrappers) would be most of the first step's tracing time.
    @tf.autograph.experimental.do_not_convert
    def run(self, batch, dense_copies=()):
        if self.slice_batch:
            batch = replica_slice(batch)
        model, labels = self.model, self.labels
        valid = batch["valid"]
        embedding_vars, dense_vars = model.embedding_variables, model.dense_variables
        # With cached dense weights the model reads these copies, not the variables.
        dense_sources = watched(dense_copies) if dense_copies else dense_vars
        with tf.GradientTape() as tape:
            if dense_copies:
                tape.watch(dense_sources)
            logits = model(batch["features"], training=True)
            loss, per_example = replica_loss(
                logits, batch["labels"], valid, labels, self.replicas, model.losses
            )
        grads = tape.gradient(loss, embedding_vars + list(dense_sources))
        require_gradients(embedding_vars, grads[: len(embedding_vars)])
        self.optimizers.apply(grads[: len(embedding_vars)], grads[len(embedding_vars) :])
        for name in labels:
            self.auc[name].update_state(batch["labels"][name], logits[name], sample_weight=valid)
        # The sums come after the gradients, so they mark the step's end (first_step_at).
        with tf.control_dependencies(
            [g.values if isinstance(g, tf.IndexedSlices) else g for g in grads if g is not None]
        ):
            return (
                tf.reduce_sum(per_example),
                tf.reduce_sum(valid),
                tf.cast(tf.size(valid), tf.float32),
            )
