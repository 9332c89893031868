"""Logistic regression: per label t, ``sum_f w_t[id_f] + w_t . dense + b_t``."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from recsys_dist.config.model_params import LRParams
from recsys_dist.features.config import FeatureConfig
from recsys_dist.models.collection import EmbeddedBatch
from recsys_dist.models.sharding import Placement
from recsys_dist.models.zoo.ranking_model import RankingModel


class LogisticRegression(RankingModel):
    """Logistic regression: per label t, ``sum_f w_t[id_f] + w_t . dense + b_t``.

    Input groups: ``wide``. All weights start at zero.

    Args:
      features, inputs, labels: See :class:`RankingModel`.
      params: :class:`LRParams` (no fields).
      seed: Unused; nothing is random.
    """

    def __init__(
        self,
        features: FeatureConfig,
        inputs: dict[str, list[str]],
        labels: list[str],
        params: LRParams | None = None,
        seed: int = 0,
        placement: Placement | None = None,
    ):
        super().__init__(features, inputs, labels, placement)
        del params, seed  # no hyper-parameters; every weight starts at zero
        self.linear = self.embedding_collection.linear(inputs["wide"], len(labels), "linear")

    def compute_logits(
        self, embedded: EmbeddedBatch, features: dict[str, Any], training: bool = False
    ) -> tf.Tensor:
        return self.linear(*embedded[self.linear.embeddings])
