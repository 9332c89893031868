"""DCN-v2 (Wang et al., 2021): a cross network and an MLP over ``concat(embeddings,
dense)``, stacked or in parallel."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from recsys_dist.config.model_params import DCNv2Params
from recsys_dist.features.config import FeatureConfig
from recsys_dist.models.blocks import MLP, CrossNetwork, derive_seed
from recsys_dist.models.collection import EmbeddedBatch
from recsys_dist.models.sharding import Placement
from recsys_dist.models.zoo.ranking_model import (
    RankingModel,
    concat_inputs,
    logit_head,
)


class DCNv2(RankingModel):
    """DCN-v2: ``x0 = concat(embeddings, dense)``, a cross network and an MLP, a head.

    ``stacked``: ``head(MLP(cross(x0)))``; ``parallel``: ``head(concat(cross(x0),
    MLP(x0)))``.

    Input groups: ``deep``.

    Args:
      features, inputs, labels: See :class:`RankingModel`.
      params: :class:`DCNv2Params`.
      seed: Seed of every random initial weight.
    """

    def __init__(
        self,
        features: FeatureConfig,
        inputs: dict[str, list[str]],
        labels: list[str],
        params: DCNv2Params | None = None,
        seed: int = 0,
        placement: Placement | None = None,
    ):
        super().__init__(features, inputs, labels, placement)
        params = params or DCNv2Params()
        self.structure = params.structure
        self.embeddings = self.embedding_collection.embeddings(
            inputs["deep"], "embeddings", seed=derive_seed(seed, "embeddings")
        )
        self.cross = CrossNetwork(
            params.cross_layers, params.low_rank, seed=derive_seed(seed, "cross"), name="cross"
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
        x0 = concat_inputs(*embedded[self.embeddings])
        if self.structure == "stacked":
            hidden = self.deep(self.cross(x0), training=training)
        else:
            hidden = tf.concat([self.cross(x0), self.deep(x0, training=training)], axis=1)
        return self.head(hidden)
