"""BST (Chen et al., 2019, "Behavior Sequence Transformer for E-commerce Recommendation in
Alibaba"): a transformer reads the user's history together with the candidate."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from recsys_dist.config.model_params import BSTParams
from recsys_dist.features.config import FeatureConfig
from recsys_dist.models.attention import PositionEmbedding, TransformerEncoderLayer
from recsys_dist.models.behaviour import BehaviourInputs, masked_mean
from recsys_dist.models.blocks import MLP, derive_seed
from recsys_dist.models.collection import EmbeddedBatch
from recsys_dist.models.sharding import Placement
from recsys_dist.models.zoo.ranking_model import RankingModel, logit_head


class BST(RankingModel):
    """BST: per history, ``x = [query; keys] + P`` ``[B, 1 + L, G]`` through transformer
    layers; ``head(MLP(concat(others, x'_0, mean(x'_1..L), dense)))``.

    Shape letters: B batch size, L history length, G the dim of one history position.

    Position 0 is the candidate and always real; positions 1..L are the history, newest
    first, masked at padding (as keys of the self-attention, and out of the mean). The
    candidate's output is its view of the history; the mean of the history's outputs is
    the history seen by itself.

    Input groups: ``deep``, with at least one ``sequence`` feature whose ``target`` is
    among them.

    Args:
      features, inputs, labels: See :class:`RankingModel`.
      params: :class:`BSTParams`.
      seed: Seed of every random initial weight.

    Raises:
      ValueError: No sequence among the inputs, or a sequence without its target there.
        (``build_model`` refuses a ``num_heads`` that does not divide a history
        position's dim first: :meth:`BSTParams.input_problem`.)
    """

    def __init__(
        self,
        features: FeatureConfig,
        inputs: dict[str, list[str]],
        labels: list[str],
        params: BSTParams | None = None,
        seed: int = 0,
        placement: Placement | None = None,
    ):
        super().__init__(features, inputs, labels, placement)
        params = params or BSTParams()
        self.inputs_layer = BehaviourInputs(
            self.embedding_collection,
            inputs["deep"],
            seed=derive_seed(seed, "embeddings"),
            model=self.model_name,
            name="behaviour_inputs",
        )
        self.positions, self.encoders = [], []
        for i, (group, dim) in enumerate(
            zip(self.inputs_layer.groups, self.inputs_layer.history_dims)
        ):
            length = features.features[group.main].max_length + 1
            self.positions.append(
                PositionEmbedding(
                    length, dim, seed=derive_seed(seed, "pos", i), name=f"positions_{i}"
                )
            )
            self.encoders.append(
                [
                    TransformerEncoderLayer(
                        params.num_heads,
                        params.ffn_units,
                        params.attention_dropout,
                        seed=derive_seed(seed, "transformer", i, k),
                        name=f"transformer_{i}_{k}",
                    )
                    for k in range(params.transformer_layers)
                ]
            )
        self.deep = MLP(
            params.hidden_units,
            dropout=params.dropout,
            batch_norm=params.batch_norm,
            seed=derive_seed(seed, "deep"),
            name="deep",
        )
        self.head = logit_head(len(labels), seed)

    def compute_logits(
        self, embedded: EmbeddedBatch, features: dict[str, Any], training: bool = False
    ) -> tf.Tensor:
        others, dense, histories = self.inputs_layer(
            features, looked_up=embedded[self.inputs_layer.embeddings]
        )
        encoded = []
        for history, positions, layers in zip(histories, self.positions, self.encoders):
            x = tf.concat([history.query[:, tf.newaxis, :], history.keys], axis=1)
            mask = tf.concat([tf.ones_like(history.mask[:, :1]), history.mask], axis=1)
            x = positions(x, mask=mask)
            for layer in layers:
                x = layer(x, mask=mask, training=training)
            encoded += [x[:, 0, :], masked_mean(x[:, 1:, :], history.mask)]
        parts = [*others.values(), *encoded, *([] if dense is None else [dense])]
        return self.head(self.deep(tf.concat(parts, axis=1), training=training))
