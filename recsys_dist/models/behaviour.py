"""A feature group read by models of user behaviour: each history next to its candidate.

Shape letters: B batch size, L a history's ``max_length``, D a table's dim, G the dim of
one history position (the sum of the dims of a main sequence and its sides).

:class:`BehaviourInputs` embeds a group's features with :class:`FeatureEmbeddings`,
keeping every ``sequence`` feature as ``[B, L, D]`` (newest first, zeros at padding), and
pairs each history (a main sequence and the sequences ``side_of`` it, see
:meth:`FeatureConfig.sequence_groups`) with its candidate:

- ``keys`` ``[B, L, G]``: each position's embeddings of the main sequence and its sides,
  concatenated (DIN's item and category embeddings of one behaviour);
- ``query`` ``[B, G]``: the embeddings of their ``target`` features, in the same order;
- ``mask`` ``[B, L]`` bool: true at the real positions.

Every other id-valued feature (the candidates included) comes out as ``[B, D]``, and the
dense numerics as ``[B, n_dense]``, as from :class:`FeatureEmbeddings`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from recsys_dist.config.model_inputs import history_problem
from recsys_dist.features.config import FeatureConfig, SequenceGroup
from recsys_dist.models.dynamic_table import ModelTables
from recsys_dist.models.embedding import FeatureEmbeddings


@dataclasses.dataclass(frozen=True)
class History:
    """One history of a batch, next to its candidate.

    Attributes:
      group: Which sequences (and targets) it is made of.
      query: ``[B, G]`` the candidate's embeddings.
      keys: ``[B, L, G]`` each position's embeddings, zeros at padding.
      mask: ``[B, L]`` bool, true at real positions.
    """

    group: SequenceGroup
    query: tf.Tensor
    keys: tf.Tensor
    mask: tf.Tensor


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
      features: The feature config.
      feature_names: The group's features; at least one main sequence, every sequence
        with its ``target`` among them.
      seed: Seed of the tables' initializers.
      model: The model's name, for messages.
      name: Layer name.
      tables: What the model's embedding layers share (see :class:`FeatureEmbeddings`).

    Call args:
      features: A batch as produced by the input pipeline.

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
        features: FeatureConfig,
        feature_names: list[str],
        seed: int | None,
        model: str,
        name: str = "behaviour_inputs",
        tables: ModelTables | None = None,
        **kwargs: Any,
    ):
        super().__init__(name=name, **kwargs)
        self.groups = check_histories(features, list(feature_names), model)
        self.embeddings = FeatureEmbeddings(
            features,
            list(feature_names),
            seed=seed,
            keep_sequences=True,
            name="embeddings",
            tables=tables,
        )
        in_history = {n for group in self.groups for n in group.sequences}
        self.other_names = [n for n in self.embeddings.sparse_feature_names if n not in in_history]
        self.history_dims = [
            sum(self.embeddings.embedding_dims[n] for n in group.sequences) for group in self.groups
        ]

    def call(
        self, features: dict[str, Any], training: bool | None = None
    ) -> tuple[dict[str, tf.Tensor], tf.Tensor | None, list[History]]:
        sparse, dense = self.embeddings(features, training=training)
        histories = []
        for group in self.groups:
            keys = tf.concat([sparse[n] for n in group.sequences], axis=-1)
            query = tf.concat([sparse[t] for t in group.targets], axis=-1)
            mask = tf.not_equal(features[group.main]["weights"], 0.0)
            histories.append(History(group, query, keys, mask))
        return {n: sparse[n] for n in self.other_names}, dense, histories


def masked_mean(keys: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """``[B, G]``: the mean of ``keys`` ``[B, L, G]`` over the real positions of ``mask``
    ``[B, L]``; zeros for an empty history."""
    weights = tf.cast(mask, keys.dtype)
    total = tf.einsum("bl,blg->bg", weights, keys)
    return tf.math.divide_no_nan(total, tf.reduce_sum(weights, axis=1, keepdims=True))
