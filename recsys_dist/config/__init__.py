"""Typed, validated configs: feature configs and model/training configs."""

from recsys_dist.config.experiment import ExperimentConfig, load_config
from recsys_dist.config.features import FeatureConfig, load_feature_config
from recsys_dist.config.sections import DateRange

__all__ = ["DateRange", "ExperimentConfig", "FeatureConfig", "load_config", "load_feature_config"]
