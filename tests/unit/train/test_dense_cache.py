"""The dense-weight cache (``train.dense_refresh_steps``) refuses what it cannot serve:
several replicas per worker, variables outside a ParameterServerStrategy.

Training with the cache on a real local cluster is in tests/cluster/test_dense_cache.py.
"""

from __future__ import annotations

import pytest

from recsys_dist.errors import ConfigError
from recsys_dist.train.dense_cache import DenseWeightCache, check_dense_refresh


def test_several_replicas_per_worker_are_refused():
    check_dense_refresh("train.yaml", None, 4)
    check_dense_refresh("train.yaml", 8, 1)
    with pytest.raises(ConfigError) as error:
        check_dense_refresh("train.yaml", 8, 2)
    assert str(error.value) == (
        "train.yaml: train.dense_refresh_steps: 8 is not supported with 2 replicas per worker "
        "(one per GPU); set it to null"
    )


def test_variables_outside_a_parameter_server_strategy_are_refused():
    import tensorflow as tf

    with pytest.raises(ValueError) as error:
        DenseWeightCache([tf.Variable(1.0, name="kernel")], 4)
    assert str(error.value) == (
        "train.dense_refresh_steps needs ParameterServerStrategy "
        "variables; kernel:0 is a ResourceVariable"
    )
