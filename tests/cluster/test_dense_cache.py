"""Dense weights read every N steps (``train.dense_refresh_steps``) on a real local cluster.

One worker and one parameter server, rows in file order, so a run is deterministic:
- read through the cache every step (N = 1), training ends at exactly the weights of the
  uncached step: the copies are the weights and the gradients reach every variable;
- read every 4 steps, the weights differ (the steps in between used older weights);
- no embedding table is ever copied whole into the cache.

The refusals, which need no cluster, are in tests/unit/train/test_dense_cache.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from recsys_dist.train.dense_cache import caching_variable
from tests.support.run_configs import zoo_config as write_config

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from recsys_dist.data.synth_files import synthesize

    out = tmp_path_factory.mktemp("dense_cache_data")
    synthesize(out, days=3, rows_per_day=4_000, seed=9, rows_per_file=2_000, row_groups_per_file=2)
    return out


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    from recsys_dist.cluster.runtime import connect
    from recsys_dist.config.sections import ClusterSpec

    with connect(ClusterSpec("local", 1, 1), str(tmp_path_factory.mktemp("logs")), 1024) as rt:
        yield rt


def _train(tmp_path, data, runtime, refresh_steps):
    from recsys_dist.config import load_config
    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.train.trainer import Trainer

    overrides = [
        "input.shuffle=false",
        "train.max_steps=24",
        "train.steps_per_call=8",
        f"train.dense_refresh_steps={'null' if refresh_steps is None else refresh_steps}",
    ]
    config = load_config(write_config(tmp_path, data, "dcn_v2"), overrides)
    pipeline = prepare_input(config, "train", 1)
    trainer = Trainer(config, runtime, pipeline, str(tmp_path / f"model_{refresh_steps}"))
    result = trainer.fit()
    assert result.steps == 24
    return trainer


def _weights(trainer):
    return {v.name: v.numpy() for v in trainer.model.trainable_variables}


def test_refresh_every_step_equals_the_uncached_step_and_every_4_steps_differs(
    tmp_path, data, runtime
):
    plain = _weights(_train(tmp_path, data, runtime, None))
    every_step = _train(tmp_path, data, runtime, 1)
    cached = _weights(every_step)
    assert plain.keys() == cached.keys()
    for name, value in plain.items():
        # Raw weights after 24 Adam steps, which amplify rounding (a gradient of rounding
        # noise moves a weight by up to the learning rate): this holds only because both
        # runs apply the same ops to the same values in the same server processes, bit for
        # bit; the tolerance would not cover sums formed in another order.
        np.testing.assert_allclose(cached[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    # The cache never copies a table: only dense variables get a cached read.
    for variable in every_step.model.embedding_variables:
        assert caching_variable(variable)._cache is None, variable.name  # noqa: SLF001

    stale = _weights(_train(tmp_path, data, runtime, 4))
    dense = {v.name for v in every_step.model.dense_variables}
    moved = [n for n in dense if not np.allclose(stale[n], plain[n], rtol=1e-4, atol=1e-5)]
    assert moved, "reading the dense weights every 4 steps changed nothing"
