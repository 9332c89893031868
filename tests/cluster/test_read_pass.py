"""One pass over synthetic Parquet on a real local cluster: 2 workers + 1 ps on 127.0.0.1.

Each worker runs the in-graph input function on its own shard; the coordinator
collects the identity of every row read and checks that each planned row was read
exactly once across the workers, from local disk and from S3 (moto's server).
"""

from __future__ import annotations

import pytest

from recsys_dist.config import load_config
from recsys_dist.data.input_fn import prepare_input
from recsys_dist.data.read_pass import check_exactly_once, read_pass_on_cluster
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
    strategy, coordinator = cluster
    config = load_config(DEMO_CONFIG, ["input.batch_size=256"])
    pipeline = prepare_input(config.with_data_path(data_path), "train", num_workers=2)
    assert pipeline.plan.total_rows == 12_000 and len(pipeline.plan.units) == 24
    result = read_pass_on_cluster(
        pipeline, strategy, coordinator, collect_rows=True, batches_per_call=4
    )
    return pipeline, result


def _assert_exactly_once(pipeline, result):
    assert result.rows == 12_000
    check_exactly_once(pipeline.plan, result.row_ids)
    # Each worker read exactly its own shard, and both shards are non-empty.
    assert result.rows_per_worker == pipeline.plan.rows_per_worker()
    assert min(result.rows_per_worker) > 0


def test_one_pass_from_local_disk_reads_every_row_exactly_once(cluster, synth_data):
    _assert_exactly_once(*_one_pass(cluster, str(synth_data)))


def test_one_pass_from_s3_reads_every_row_exactly_once(cluster, synth_data, s3_server):
    url = upload_dir(s3_server["client"], s3_server["bucket"], synth_data, "criteo")
    pipeline, result = _one_pass(cluster, url)
    assert all(f.startswith("s3://recsys-test/criteo/dt=") for f in pipeline.plan.files)
    _assert_exactly_once(pipeline, result)
