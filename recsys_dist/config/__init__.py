"""Typed, validated configs: feature configs and model/training configs."""

from recsys_dist.config.experiment import DateRange, ExperimentConfig, load_config
from recsys_dist.config.features import FeatureConfig, load_feature_config

__all__ = ["DateRange", "ExperimentConfig", "FeatureConfig", "load_config", "load_feature_config"]
