"""DIEN (Zhou et al., 2019, "Deep Interest Evolution Network for Click-Through Rate
Prediction"): a GRU follows the user's interest through the history, in time order, and
the candidate steers a second, attention-gated GRU to the interest it is relevant to."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from recsys_dist.config.model_params import DIENParams
from recsys_dist.features.config import FeatureConfig
from recsys_dist.models.attention import TargetAttention
from recsys_dist.models.behaviour import BehaviourInputs
from recsys_dist.models.blocks import MLP, derive_seed
from recsys_dist.models.collection import EmbeddedBatch
from recsys_dist.models.interest import AUGRUCell, AuxiliaryLoss, GRUCell, in_time_order
from recsys_dist.models.sharding import Placement
from recsys_dist.models.zoo.ranking_model import RankingModel, logit_head


class DIEN(RankingModel):
    """DIEN: ``head(MLP(concat(others, interests, dense)))``.

    Shape letters: B batch size, L history length, G the dim of one history position.

    Per history (a sequence and its sides), oldest first:

    - **interest extractor**: a GRU of width G over the positions gives the state
      ``h_t`` after each; the auxiliary loss (weight ``auxiliary_loss_weight``) trains
      ``h_t`` to tell the behaviour at t + 1 from another user's;
    - **interest evolution**: DIN's activation unit scores each ``h_t`` against the
      candidate (softmax over the real positions), and a GRU with attentional update gate
      (:class:`~recsys_dist.models.interest.AUGRUCell`) runs over the states; its state
      after the last real position is the history's interest ``[B, G]``.

    Padding steps leave both GRUs' states as they are, so padding changes no prediction;
    an empty history gives a zero interest.

    Input groups: ``deep``, with at least one ``sequence`` feature whose ``target`` is
    among them.

    Args:
      features, inputs, labels: See :class:`RankingModel`.
      params: :class:`DIENParams`.
      seed: Seed of every random initial weight.

    Raises:
      ValueError: No sequence among the inputs, or a sequence without its target there.
    """

    def __init__(
        self,
        features: FeatureConfig,
        inputs: dict[str, list[str]],
        labels: list[str],
        params: DIENParams | None = None,
        seed: int = 0,
        placement: Placement | None = None,
    ):
        super().__init__(features, inputs, labels, placement)
        params = params or DIENParams()
        self.auxiliary_loss_weight = params.auxiliary_loss_weight
        self.inputs_layer = BehaviourInputs(
            self.embedding_collection,
            inputs["deep"],
            seed=derive_seed(seed, "embeddings"),
            model=self.model_name,
            name="behaviour_inputs",
        )
        self.extractors, self.attention, self.evolution, self.auxiliary = [], [], [], []
        for i, dim in enumerate(self.inputs_layer.history_dims):
            self.extractors.append(
                tf.keras.layers.RNN(
                    GRUCell(dim, seed=derive_seed(seed, "extractor", i), name="gru"),
                    return_sequences=True,
                    name=f"extractor_{i}",
                )
            )
            self.attention.append(
                TargetAttention(
                    params.attention_units,
                    params.attention_activation,
                    "softmax",
                    seed=derive_seed(seed, "att", i),
                    name=f"attention_{i}",
                )
            )
            self.evolution.append(
                tf.keras.layers.RNN(
                    AUGRUCell(dim, seed=derive_seed(seed, "evolution", i), name="augru"),
                    name=f"evolution_{i}",
                )
            )
            self.auxiliary.append(
                AuxiliaryLoss(
                    params.auxiliary_units,
                    seed=derive_seed(seed, "auxiliary", i),
                    name=f"auxiliary_{i}",
                )
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
        interests = []
        for i, history in enumerate(histories):
            batch = tf.shape(history.mask, out_type=tf.int64)[0]
            ordered = in_time_order(history.values, history.positions, batch)
            states = self.extractors[i](ordered.sequence, mask=ordered.mask, training=training)
            auxiliary = self.auxiliary[i]
            # computed in training only; the first call (create_variables) builds it
            if self.auxiliary_loss_weight > 0 and (training or not auxiliary.built):
                loss = auxiliary(states, ordered)
                if training:
                    self.add_loss(self.auxiliary_loss_weight * loss)
            real = tf.gather_nd(states, ordered.slots)  # [R, G], the input's order
            _, scores = self.attention[i].attend(
                history.query, real, history.rows, training=training
            )
            cells = tf.shape(ordered.mask, out_type=tf.int64)
            weights = tf.scatter_nd(ordered.slots, scores, cells)[..., tf.newaxis]
            steps = tf.concat([states, tf.cast(weights, states.dtype)], axis=-1)
            interests.append(self.evolution[i](steps, mask=ordered.mask, training=training))
        parts = [*others.values(), *interests, *([] if dense is None else [dense])]
        return self.head(self.deep(tf.concat(parts, axis=1), training=training))
