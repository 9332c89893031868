"""Reading the training AUCs (``recsys_dist/train/auc_reading.py``) in this process: the
values are each metric's result, and a reset starts the counts over. The reading on a
worker, under parameter servers, runs in every cluster test that ends a pass
(``tests/cluster/test_hosts.py`` reads one while a worker's link is down)."""

from __future__ import annotations

import types

import pytest

from recsys_dist.cluster.mirrored import SynchronousCoordinator
from recsys_dist.train.auc_reading import AucReader
from recsys_dist.train.step import training_auc


def test_values_are_the_metrics_results_and_a_reset_starts_them_over():
    metrics = training_auc(["click", "buy"])
    metrics["click"].update_state([1, 0, 1, 0], [2.0, -1.0, 0.5, 1.0])
    metrics["buy"].update_state([0, 1], [-3.0, 3.0])
    runtime = types.SimpleNamespace(coordinator=SynchronousCoordinator())
    reader = AucReader(metrics, runtime)
    values = reader.values()
    assert values == {n: pytest.approx(float(m.result())) for n, m in metrics.items()}
    assert values["buy"] == pytest.approx(1.0) and 0.5 < values["click"] < 1.0
    assert reader.values(reset=True) == values
    assert all(float(v.numpy().sum()) == 0 for m in metrics.values() for v in m.variables)
    metrics["click"].update_state([1, 0], [1.0, -1.0])
    assert reader.values()["click"] == pytest.approx(1.0)
