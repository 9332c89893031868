"""DeepFM (Guo et al., 2017): ``linear + FM(embeddings) + head(MLP(concat(embeddings,
dense)))``."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from recsys_dist.config.model_params import DeepFMParams
from recsys_dist.features.config import FeatureConfig
from recsys_dist.models.blocks import MLP, FactorizationMachine, derive_seed
from recsys_dist.models.collection import EmbeddedBatch
from recsys_dist.models.sharding import Placement
from recsys_dist.models.zoo.ranking_model import (
    RankingModel,
    common_dim,
    concat_inputs,
    logit_head,
)


class DeepFM(RankingModel):
    """DeepFM: ``linear + FM(embeddings) + head(MLP(concat(embeddings, dense)))``.

    The FM's second-order term over the F sparse embeddings ``[B, F, D]`` has no weights
    of its own, so it is the same for every label; linear part and head are per label.

    Input groups: ``deep``. All tables must share one dim D.

    Args:
      features, inputs, labels: See :class:`RankingModel`.
      params: :class:`DeepFMParams`.
      seed: Seed of every random initial weight.

    Raises:
      ValueError: The tables have different dims, or there is no id-valued feature.
    """

    def __init__(
        self,
        features: FeatureConfig,
        inputs: dict[str, list[str]],
        labels: list[str],
        params: DeepFMParams | None = None,
        seed: int = 0,
        placement: Placement | None = None,
    ):
        super().__init__(features, inputs, labels, placement)
        params = params or DeepFMParams()
        common_dim(features, inputs["deep"], self.model_name)
        self.embeddings = self.embedding_collection.embeddings(
            inputs["deep"], "embeddings", seed=derive_seed(seed, "embeddings")
        )
        self.linear = self.embedding_collection.linear(inputs["deep"], len(labels), "linear")
        self.fm = FactorizationMachine(name="fm")
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
        sparse, dense = embedded[self.embeddings]
        fm = self.fm(tf.stack(list(sparse.values()), axis=1))  # [B]
        deep = self.deep(concat_inputs(sparse, dense), training=training)
        return self.linear(*embedded[self.linear.embeddings]) + fm[:, None] + self.head(deep)
