"""Typed, validated model and training configs (the feature config is
:mod:`recsys_dist.features.config`)."""

from recsys_dist.config.experiment import ExperimentConfig, load_config
from recsys_dist.config.sections import DateRange

__all__ = ["DateRange", "ExperimentConfig", "load_config"]
