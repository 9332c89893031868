"""Fixtures of the model tests."""

from __future__ import annotations

import pytest

from recsys_dist.features.config import FeatureConfig
from tests.support.models import TINY_FEATURES, write_feature_config


@pytest.fixture
def tiny(tmp_path) -> FeatureConfig:
    return write_feature_config(tmp_path, TINY_FEATURES)
