"""Wide & Deep (Cheng et al., 2016): ``linear(wide) + head(MLP(concat(embeddings, dense)))``."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from recsys_dist.config.model_params import WideDeepParams
from recsys_dist.features.config import FeatureConfig
from recsys_dist.models.blocks import MLP, derive_seed
from recsys_dist.models.collection import EmbeddedBatch
from recsys_dist.models.sharding import Placement
from recsys_dist.models.zoo.ranking_model import (
    RankingModel,
    concat_inputs,
    logit_head,
)


class WideDeep(RankingModel):
    """Wide & Deep: ``linear(wide) + head(MLP(concat(embeddings, dense)))``.

    Input groups: ``wide`` (linear part) and ``deep`` (tower).

    Args:
      features, inputs, labels: See :class:`RankingModel`.
      params: :class:`WideDeepParams`.
      seed: Seed of every random initial weight.
    """

    def __init__(
        self,
        features: FeatureConfig,
        inputs: dict[str, list[str]],
        labels: list[str],
        params: WideDeepParams | None = None,
        seed: int = 0,
        placement: Placement | None = None,
    ):
        super().__init__(features, inputs, labels, placement)
        params = params or WideDeepParams()
        self.wide = self.embedding_collection.linear(inputs["wide"], len(labels), "wide")
        self.embeddings = self.embedding_collection.embeddings(
            inputs["deep"], "deep_embeddings", seed=derive_seed(seed, "embeddings")
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
        deep = self.deep(concat_inputs(*embedded[self.embeddings]), training=training)
        return self.wide(*embedded[self.wide.embeddings]) + self.head(deep)
