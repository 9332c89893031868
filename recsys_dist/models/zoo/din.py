"""DIN (Zhou et al., 2018, "Deep Interest Network for Click-Through Rate Prediction"): the
candidate weighs each item of the user's history by how relevant it is."""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

from recsys_dist.config.model_params import DINParams
from recsys_dist.features.config import FeatureConfig
from recsys_dist.models.activations import activation_layer
from recsys_dist.models.attention import TargetAttention
from recsys_dist.models.behaviour import BehaviourInputs, hard_search
from recsys_dist.models.blocks import MLP, derive_seed, seeded_initializer
from recsys_dist.models.collection import EmbeddedBatch
from recsys_dist.models.sharding import Placement
from recsys_dist.models.zoo.ranking_model import RankingModel, logit_head


class DIN(RankingModel):
    """DIN: ``head(MLP(concat(others, pooled histories, dense)))``.

    Shape letters: B batch size, L history length, G the dim of one history position.

    Each history ``keys [B, L, G]`` (a sequence and its sides) is pooled against its
    candidate ``query [B, G]`` by :class:`TargetAttention`: ``sum_l a(q, k_l) k_l`` over
    the real positions, ``a`` an MLP over ``[q, k_l, q - k_l, q * k_l]`` (weights not
    normalised unless ``attention_normalization: softmax``). With ``sequence_pooling:
    mean`` the same network takes the histories' masked means instead, with ``none`` no
    history at all (baselines). With ``search_by`` (SIM's hard search, for long histories)
    a history keeps only the newest ``search_top_k`` positions whose ``search_by`` id is
    the candidate's before anything is looked up.

    Input groups: ``deep``, with at least one ``sequence`` feature whose ``target`` is
    among them.

    Args:
      features, inputs, labels: See :class:`RankingModel`.
      params: :class:`DINParams`.
      seed: Seed of every random initial weight.

    Raises:
      ValueError: No sequence among the inputs, or a sequence without its target there.
    """

    def __init__(
        self,
        features: FeatureConfig,
        inputs: dict[str, list[str]],
        labels: list[str],
        params: DINParams | None = None,
        seed: int = 0,
        placement: Placement | None = None,
    ):
        super().__init__(features, inputs, labels, placement)
        params = params or DINParams()
        self.sequence_pooling = params.sequence_pooling
        self.search_top_k = params.search_top_k
        self.inputs_layer = BehaviourInputs(
            self.embedding_collection,
            inputs["deep"],
            seed=derive_seed(seed, "embeddings"),
            model=self.model_name,
            name="behaviour_inputs",
        )
        # the history whose positions the hard search picks, and by which sequence
        self.searched = [
            (group, params.search_by, features.features[params.search_by].target)
            for group in self.inputs_layer.groups
            if params.search_by in group.sequences
        ]
        self.attention = (
            [
                TargetAttention(
                    params.attention_units,
                    params.attention_activation,
                    params.attention_normalization,
                    seed=derive_seed(seed, "att", i),
                    name=f"attention_{i}",
                )
                for i in range(len(self.inputs_layer.groups))
            ]
            if params.sequence_pooling == "attention"
            else []
        )
        # One learned row per history position (0 the newest), for the unit's input.
        self.positions = (
            [
                tf.keras.layers.Embedding(
                    features.features[group.main].max_length,
                    dim,
                    embeddings_initializer=seeded_initializer(
                        "uniform", derive_seed(seed, "positions", i)
                    ),
                    name=f"positions_{i}",
                )
                for i, (group, dim) in enumerate(
                    zip(self.inputs_layer.groups, self.inputs_layer.history_dims)
                )
            ]
            if self.attention and params.attention_positions
            else []
        )
        activation: Any = params.activation
        if params.activation in ("prelu", "dice"):
            activation = functools.partial(_activation, params.activation)
        self.deep = MLP(
            params.hidden_units,
            activation=activation,
            dropout=params.dropout,
            batch_norm=params.batch_norm,
            final_activation=activation,
            seed=derive_seed(seed, "deep"),
            name="deep",
        )
        self.head = logit_head(len(labels), seed)

    def batch_to_look_up(self, features: dict[str, Any]) -> dict[str, Any]:
        for group, by, target in self.searched:
            features = hard_search(features, group, by, target, self.search_top_k)
        return features

    def compute_logits(
        self, embedded: EmbeddedBatch, features: dict[str, Any], training: bool = False
    ) -> tf.Tensor:
        others, dense, histories = self.inputs_layer(
            features, looked_up=embedded[self.inputs_layer.embeddings]
        )
        pooled = []
        for i, history in enumerate(histories):
            if self.sequence_pooling == "none":
                continue
            if self.attention:
                extra = self.positions[i](history.positions[:, 1]) if self.positions else None
                outputs, _ = self.attention[i].attend(
                    history.query, history.values, history.rows, training=training, extra=extra
                )
                pooled.append(outputs)
            else:
                pooled.append(history.mean())
        parts = [*others.values(), *pooled, *([] if dense is None else [dense])]
        return self.head(self.deep(tf.concat(parts, axis=1), training=training))


def _activation(kind: str, name: str) -> tf.keras.layers.Layer:
    return activation_layer(kind, name=name)
