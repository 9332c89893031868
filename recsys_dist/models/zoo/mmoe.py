"""MMoE (Ma et al., 2018): shared experts mixed by one gate per label, then one tower and
head per label."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from recsys_dist.config.model_params import MMoEParams
from recsys_dist.features.config import FeatureConfig
from recsys_dist.models.blocks import MLP, MixtureOfExperts, derive_seed
from recsys_dist.models.collection import EmbeddedBatch
from recsys_dist.models.sharding import Placement
from recsys_dist.models.zoo.ranking_model import (
    RankingModel,
    concat_inputs,
    logit_head,
)


class MMoE(RankingModel):
    """MMoE: shared ``concat(embeddings, dense)``, experts mixed by one gate per label, then
    one tower MLP and head per label.

    Input groups: ``deep``. Needs at least 2 labels (its registration's ``min_labels``,
    checked by :class:`RankingModel`).

    Args:
      features, inputs, labels: See :class:`RankingModel`.
      params: :class:`MMoEParams`.
      seed: Seed of every random initial weight.

    Raises:
      ValueError: Fewer than 2 labels.
    """

    def __init__(
        self,
        features: FeatureConfig,
        inputs: dict[str, list[str]],
        labels: list[str],
        params: MMoEParams | None = None,
        seed: int = 0,
        placement: Placement | None = None,
    ):
        super().__init__(features, inputs, labels, placement)
        params = params or MMoEParams()
        self.embeddings = self.embedding_collection.embeddings(
            inputs["deep"], "embeddings", seed=derive_seed(seed, "embeddings")
        )
        self.experts = MixtureOfExperts(
            params.num_experts,
            params.expert_units,
            len(labels),
            dropout=params.dropout,
            batch_norm=params.batch_norm,
            seed=derive_seed(seed, "experts"),
            name="experts",
        )
        self.towers = [
            MLP(
                params.tower_units,
                dropout=params.dropout,
                batch_norm=params.batch_norm,
                seed=derive_seed(seed, "tower", t),
                name=f"tower_{t}",
            )
            for t in range(len(labels))
        ]
        self.heads = [logit_head(1, seed, name=f"head_{t}") for t in range(len(labels))]

    def compute_logits(
        self, embedded: EmbeddedBatch, features: dict[str, Any], training: bool = False
    ) -> tf.Tensor:
        inputs = concat_inputs(*embedded[self.embeddings])
        mixed = self.experts(inputs, training=training)
        return tf.concat(
            [
                head(tower(x, training=training))
                for x, tower, head in zip(mixed, self.towers, self.heads)
            ],
            axis=1,
        )
