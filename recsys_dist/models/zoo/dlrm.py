"""DLRM (Naumov et al., 2019), in TorchRec's layout: sparse, dense, interaction and over
arches."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from recsys_dist.config.model_params import DLRMParams
from recsys_dist.features.config import FeatureConfig
from recsys_dist.models.blocks import MLP, DotInteraction, derive_seed
from recsys_dist.models.collection import EmbeddedBatch
from recsys_dist.models.sharding import Placement
from recsys_dist.models.zoo.ranking_model import (
    RankingModel,
    common_dim,
    logit_head,
)


class DLRM(RankingModel):
    """DLRM (TorchRec's layout: sparse, dense, interaction and over arches).

    The bottom MLP maps the dense numerics to ``[B, D]``; DotInteraction takes the
    pairwise dot products of that vector and the F embeddings (``[B, F + 1, D]``); the
    top MLP reads ``concat(bottom, interactions)`` and a head gives the logits.

    Input groups: ``deep``, with at least one dense numeric feature. All tables must
    share one dim D.

    Args:
      features, inputs, labels: See :class:`RankingModel`.
      params: :class:`DLRMParams`.
      seed: Seed of every random initial weight.

    Raises:
      ValueError: The tables have different dims, or the group lacks id-valued or
        dense numeric features.
    """

    def __init__(
        self,
        features: FeatureConfig,
        inputs: dict[str, list[str]],
        labels: list[str],
        params: DLRMParams | None = None,
        seed: int = 0,
        placement: Placement | None = None,
    ):
        super().__init__(features, inputs, labels, placement)
        params = params or DLRMParams()
        dim = common_dim(features, inputs["deep"], self.model_name)
        if all(features.features[n].table_name is not None for n in inputs["deep"]):
            raise ValueError(
                f"model 'dlrm' needs at least one dense numeric feature (numeric "
                f"without transform 'bucketize') for its bottom MLP; got only "
                f"id-valued features {inputs['deep']}"
            )
        self.embeddings = self.embedding_collection.embeddings(
            inputs["deep"], "embeddings", seed=derive_seed(seed, "embeddings")
        )
        self.bottom = MLP(
            [*params.bottom_units, dim],
            batch_norm=params.batch_norm,
            seed=derive_seed(seed, "bottom"),
            name="bottom",
        )
        self.interaction = DotInteraction(params.self_interaction, name="interaction")
        self.top = MLP(
            params.top_units,
            dropout=params.dropout,
            batch_norm=params.batch_norm,
            seed=derive_seed(seed, "top"),
            name="top",
        )
        self.head = logit_head(len(labels), seed)

    def compute_logits(
        self, embedded: EmbeddedBatch, features: dict[str, Any], training: bool = False
    ) -> tf.Tensor:
        sparse, dense = embedded[self.embeddings]
        bottom = self.bottom(dense, training=training)  # [B, D]
        interactions = self.interaction(tf.stack([bottom, *sparse.values()], axis=1))
        return self.head(self.top(tf.concat([bottom, interactions], axis=1), training=training))
