"""One pass over synthetic Parquet on a real local cluster: 2 workers + 1 ps on 127.0.0.1.

The coordinator hands the training items to whichever worker is free
(``cluster/read_check.py``, the dispatcher training uses), collects the identity of
every row read and checks that each planned row was read exactly once across the
workers, from local disk and from S3 (moto's server).
"""

from __future__ import annotations

import pytest

from recsys_dist.cluster.read_check import read_split
from recsys_dist.config import load_config
from recsys_dist.data.input_fn import prepare_input
from recsys_dist.data.read_pass import check_exactly_once
from recsys_dist.data.synth_files import synthesize
from tests.support.data import upload_dir
from tests.support.paths import DEMO_CONFIG

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def synth_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth")
    synthesize(out, days=2, rows_per_day=6_000, seed=3, rows_per_file=1_500, row_groups_per_file=3)
    return out


@pytest.fixture(scope="module")
def cluster(s3_server, tmp_path_factory):
    import tensorflow as tf

    from recsys_dist.cluster.local import LocalCluster

    with LocalCluster(2, 1, tmp_path_factory.mktemp("logs"), env=s3_server["env"]) as local:
        strategy = tf.distribute.experimental.ParameterServerStrategy(local.cluster_resolver())
        coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
        yield strategy, coordinator


def _one_pass(cluster, data_path: str):
    _, coordinator = cluster
    config = load_config(DEMO_CONFIG, ["input.batch_size=256"])
    pipeline = prepare_input(config.with_data_path(data_path), "train", num_workers=2)
    assert pipeline.plan.total_rows == 12_000 and len(pipeline.plan.units) == 24
    assert len(pipeline.training_items(1)) == 48  # 500-row units cut into 250-row items
    result = read_split(pipeline, coordinator, 2, steps_per_call=1, collect_rows=True)
    return pipeline, result


def _assert_exactly_once(pipeline, result):
    assert result.rows == 12_000
    check_exactly_once(pipeline.plan, result.row_ids)
    # Both workers took items, and together they read every row once.
    assert sum(result.rows_per_worker) == 12_000
    assert min(result.rows_per_worker) > 0


def test_one_pass_from_local_disk_reads_every_row_exactly_once(cluster, synth_data):
    _assert_exactly_once(*_one_pass(cluster, str(synth_data)))


def test_one_pass_from_s3_reads_every_row_exactly_once(cluster, synth_data, s3_server):
    url = upload_dir(s3_server["client"], s3_server["bucket"], synth_data, "criteo")
    pipeline, result = _one_pass(cluster, url)
    assert all(f.startswith("s3://recsys-test/criteo/dt=") for f in pipeline.plan.files)
    _assert_exactly_once(pipeline, result)
