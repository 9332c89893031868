"""A feature group read by models of user behaviour: each history next to its candidate.

Shape letters: B batch size, L a history's ``max_length``, D a table's dim, G the dim of
one history position (the sum of the dims of a main sequence and its sides).

:class:`BehaviourInputs` embeds a group's features with a group of the model's
:class:`~recsys_dist.models.collection.EmbeddingCollection`,
keeping every ``sequence`` feature at its real positions only (newest first), and pairs
each history (a main sequence and the sequences ``side_of`` it, see
:meth:`FeatureConfig.sequence_groups`) with its candidate (:class:`History`):

- ``values`` ``[R, G]``: each real position's embeddings of the main sequence and its
  sides, concatenated (DIN's item and category embeddings of one behaviour), with
  ``positions`` ``[R, 2]``; ``keys`` gives them padded, ``[B, L, G]``;
- ``query`` ``[B, G]``: the embeddings of their ``target`` features, in the same order;
- ``mask`` ``[B, L]`` bool: true at the real positions.

Every other id-valued feature (the candidates included) comes out as ``[B, D]``, the dense
numerics as ``[B, n_dense]``. Pooling over ``values`` costs nothing for padding; only BST's
transformer, which reads every position, builds ``keys``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from recsys_dist.config.model_inputs import history_problem
from recsys_dist.features.config import FeatureConfig, SequenceGroup
from recsys_dist.models.collection import EmbeddingCollection, GroupLookup
from recsys_dist.models.embedding import KeptSequence, scatter_padded


@dataclasses.dataclass(frozen=True)
class History:
    """One history of a batch, next to its candidate, kept at its real positions.

    Attributes:
      group: Which sequences (and targets) it is made of.
      query: ``[B, G]`` the candidate's embeddings.
      values: ``[R, G]`` each real position's embeddings (the main sequence's R real
        positions of the batch, row-major; a side reads zeros where it has no id).
      positions: ``[R, 2]`` int64 ``(row, position)`` of each.
      mask: ``[B, L]`` bool, true at real positions.
    """

    group: SequenceGroup
    query: tf.Tensor
    values: tf.Tensor
    positions: tf.Tensor
    mask: tf.Tensor

    @property
    def rows(self) -> tf.Tensor:
        """``[R]`` the example of each real position."""
        return self.positions[:, 0]

    @property
    def keys(self) -> tf.Tensor:
        """``[B, L, G]`` each position's embeddings, zeros at padding."""
        return scatter_padded(self.values, self.positions, tf.shape(self.mask, out_type=tf.int64))

    def mean(self) -> tf.Tensor:
        """``[B, G]`` the mean over the real positions; zeros for an empty history."""
        return ragged_mean(self.values, self.rows, self.mask)


def check_histories(features: FeatureConfig, names: list[str], model: str) -> list[SequenceGroup]:
    """The histories among ``names``; raises ValueError with the message of
    :func:`~recsys_dist.config.model_inputs.history_problem` when the model cannot read
    them."""
    problem = history_problem(model, features, names)
    if problem is not None:
        raise ValueError(problem.message)
    return features.sequence_groups(names)


class BehaviourInputs(tf.keras.layers.Layer):
    """Embeds a group's features, with each history paired with its candidate.

    Args:
      collection: The model's embedding collection; the group's embeddings are its
        group ``embeddings``.
      feature_names: The group's features; at least one main sequence, every sequence
        with its ``target`` among them.
      seed: Seed of the tables' initializers.
      model: The model's name, for messages.
      name: Layer name.

    Call args:
      features: A batch as produced by the input pipeline.
      looked_up: The lookup of the group (``embedded[layer.embeddings]``).

    Returns:
      ``(others, dense, histories)``: ``others`` maps each id-valued feature that is not
      a sequence to ``[B, D]``, ``dense`` is ``[B, n_dense]`` or None, ``histories`` holds
      one :class:`History` per main sequence, in feature-config order.

    Raises:
      ValueError: No sequence among the features, or a sequence without its target or
        its main sequence among them.
    """

    def __init__(
        self,
        collection: EmbeddingCollection,
        feature_names: list[str],
        seed: int | None,
        model: str,
        name: str = "behaviour_inputs",
        **kwargs: Any,
    ):
        super().__init__(name=name, **kwargs)
        self.groups = check_histories(collection.features, list(feature_names), model)
        self.embeddings = collection.embeddings(
            list(feature_names), "embeddings", seed=seed, keep_sequences=True
        )
        in_history = {n for group in self.groups for n in group.sequences}
        self.other_names = [n for n in self.embeddings.sparse_feature_names if n not in in_history]
        self.history_dims = [
            sum(self.embeddings.embedding_dims[n] for n in group.sequences) for group in self.groups
        ]

    def call(
        self, features: dict[str, Any], looked_up: GroupLookup
    ) -> tuple[dict[str, tf.Tensor], tf.Tensor | None, list[History]]:
        sparse, dense = looked_up
        histories = []
        for group in self.groups:
            main = sparse[group.main]
            values = [
                main.values if n == group.main else _aligned(sparse[n], main)
                for n in group.sequences
            ]
            query = tf.concat([sparse[t] for t in group.targets], axis=-1)
            mask = tf.not_equal(features[group.main]["weights"], 0.0)
            histories.append(History(group, query, tf.concat(values, -1), main.positions, mask))
        return {n: sparse[n] for n in self.other_names}, dense, histories


def _aligned(side: KeptSequence, main: KeptSequence) -> tf.Tensor:
    """``[R, D]``: a side sequence's vectors at the main sequence's real positions (zeros
    where the side has no id). Usually both have the same positions, which costs nothing;
    otherwise the side is scattered to ``[B, L, D]`` and gathered back."""

    def same() -> tf.Tensor:
        return tf.reduce_all(tf.equal(side.positions, main.positions))

    def regathered() -> tf.Tensor:
        return tf.gather_nd(side.padded(), main.positions)

    equal_count = tf.equal(tf.shape(side.positions)[0], tf.shape(main.positions)[0])
    return tf.cond(
        tf.cond(equal_count, same, lambda: tf.constant(False)),
        lambda: tf.identity(side.values),
        regathered,
    )


def hard_search(
    features: dict[str, Any], group: SequenceGroup, by: str, target: str, top_k: int
) -> dict[str, Any]:
    """SIM's hard search (Pi et al., 2020): keeps, of ``group``'s history, the newest
    ``top_k`` positions whose id in sequence ``by`` (the main sequence or a side) is the
    candidate's id of ``target``; every other position becomes padding (weight 0) in the
    main sequence and its sides, so it is never looked up. Positions keep their place, so
    a kept item's position still says how recent it is. Returns the batch with the
    group's sequences changed."""
    real = tf.not_equal(features[group.main]["weights"], 0.0)  # [B, L]
    candidate = tf.reshape(features[target], [-1, 1])
    match = real & tf.equal(features[by]["ids"], tf.cast(candidate, features[by]["ids"].dtype))
    kept = match & (tf.cumsum(tf.cast(match, tf.int32), axis=1) <= top_k)  # newest first
    searched = dict(features)
    for name in group.sequences:
        weights = features[name]["weights"]
        searched[name] = {
            **features[name],
            "weights": tf.where(kept, weights, tf.zeros_like(weights)),
        }
    return searched


def masked_mean(keys: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """``[B, G]``: the mean of ``keys`` ``[B, L, G]`` over the real positions of ``mask``
    ``[B, L]``; zeros for an empty history."""
    weights = tf.cast(mask, keys.dtype)
    total = tf.reduce_sum(keys * weights[..., tf.newaxis], axis=1)
    return tf.math.divide_no_nan(total, tf.reduce_sum(weights, axis=1, keepdims=True))


def ragged_mean(values: tf.Tensor, rows: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """``[B, G]``: the mean of ``values`` ``[R, G]`` per example of ``rows`` ``[R]``, over
    the real positions of ``mask`` ``[B, L]``; zeros for an empty history."""
    total = tf.math.unsorted_segment_sum(values, rows, num_segments=tf.shape(mask)[0])
    count = tf.reduce_sum(tf.cast(mask, values.dtype), axis=1, keepdims=True)
    return tf.math.divide_no_nan(total, count)
