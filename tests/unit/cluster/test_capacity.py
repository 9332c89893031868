"""The capacity planner's arithmetic against hand-computed values on a small model, and its
sharding against TensorFlow's own partitioner."""

from __future__ import annotations

import pytest
import tensorflow as tf

from recsys_dist.cluster import capacity
from recsys_dist.cluster.capacity import Machines, Rates
from recsys_dist.config import load_config
from recsys_dist.models.footprint import (
    DynamicFootprint,
    ModelFootprint,
    PlacedVariable,
    StackFootprint,
    TableUse,
)
from tests.support.configs import changed, write_yaml

#: One stack of dim 4: table a (100 rows, 1 id per example), then b (300 rows, 2 ids);
#: created after one non-trainable scalar and before two dense weights.
STACK = StackFootprint("emb/stack_d4", 4, (TableUse("a", 100, 1, 100), TableUse("b", 300, 2, 300)))
FOOTPRINT = ModelFootprint(
    (STACK,),
    (),
    (
        PlacedVariable("counter", 1, False),
        PlacedVariable("emb/stack_d4", 1600, True),
        PlacedVariable("kernel", 1000, True),
        PlacedVariable("bias", 10, True),
    ),
)
#: Distinct rows per batch of 10, as if measured.
DISTINCT = {"a": 8.0, "b": 15.0}


@pytest.fixture
def config(small_config, tmp_path):
    """Batch 10, 10 steps per call, Adagrad tables (1 slot), Adam dense (2 slots), 2 ps,
    shards of at least 1000 bytes (the 6,400-byte stack: 2 shards of 200 rows)."""

    def make(**train):
        path = small_config()
        raw = load_config(path).raw
        doc = changed(
            {**raw, "train": raw.get("train", {})},
            {
                "input.batch_size": 10,
                "cluster.ps": 2,
                "train.steps_per_call": 10,
                "train.embedding_shard_bytes": 1000,
                **{f"train.{k}": v for k, v in train.items()},
            },
        )
        doc["features"] = str(tmp_path / "features.yaml")
        return load_config(write_yaml(tmp_path / "planned.yaml", doc))

    return make


def test_shard_rows_match_tensorflows_partitioner_and_div_layout():
    for rows, dim, min_bytes, servers in [
        (10, 1, 4, 4),
        (6, 1, 4, 2),
        (6, 1, 4, 10),
        (1000, 16, 1 << 20, 3),
        (6_523_092, 16, 1 << 20, 7),
        (5, 4, 1, 8),
    ]:
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=min_bytes, max_shards=servers
        )
        shards = partitioner(tf.TensorShape([rows, dim]), tf.float32)[0]
        base, extra = divmod(rows, shards)
        expected = [base + (1 if i < extra else 0) for i in range(shards)]
        assert capacity.shard_rows(rows, dim, min_bytes, servers) == expected
    assert capacity.shard_rows(10, 1, 4, 4) == [3, 3, 2, 2]


def test_expected_distinct_rows():
    assert capacity.expected_distinct(2, 4) == pytest.approx(4 * (1 - 0.75**2))  # 1.75
    assert capacity.expected_distinct(5, 1) == 1.0
    assert capacity.expected_distinct(7, None) == 7.0
    assert capacity.expected_distinct(10_000, 100) == pytest.approx(100, rel=1e-9)


def test_server_loads_by_hand(config):
    # Round robin: counter -> ps0, shard 0 (rows 0-199: a, b[0:100]) -> ps1,
    # shard 1 (b[100:300]) -> ps0, kernel -> ps1, bias -> ps0.
    ps0, ps1 = capacity.server_loads(FOOTPRINT, config(), 2, DISTINCT)
    assert ps1.memory == {"a": 100 * 4 * 4 * 2, "b": 100 * 4 * 4 * 2, "dense": 1000 * 4 * 3}
    assert ps0.memory == {"dense": 4 + 10 * 4 * 3, "b": 200 * 4 * 4 * 2}
    # ps1 gathers a's 8 rows and a third of b's 15: 13 rows of 16 bytes, plus the kernel
    assert ps1.bytes_out == 13 * 16 + 4000
    assert ps1.bytes_in == 13 * (16 + 16) + 4000  # ids sent for the lookup and the update
    assert ps1.values == 2 * 13 * 4 + 2 * 1000
    assert (ps0.bytes_out, ps0.bytes_in, ps0.values) == (
        10 * 16 + 40,
        10 * 32 + 40,
        2 * 10 * 4 + 2 * 10,
    )


def test_dense_refresh_reads_the_dense_weights_once_per_refresh(config):
    refreshed = config(dense_refresh_steps=4)  # 10 steps per call: reads at steps 0, 4, 8
    assert capacity.dense_reads_per_step(refreshed) == pytest.approx(0.3)
    _, ps1 = capacity.server_loads(FOOTPRINT, refreshed, 2, DISTINCT)
    assert ps1.bytes_out == pytest.approx(13 * 16 + 0.3 * 4000)
    assert ps1.bytes_in == 13 * 32 + 4000  # every gradient is still sent
    assert ps1.values == pytest.approx(2 * 13 * 4 + 1.3 * 1000)


def test_without_measured_rows_the_expected_distinct_rows_are_used(config):
    _, ps1 = capacity.server_loads(FOOTPRINT, config(), 2)
    rows = capacity.expected_distinct(10, 100) + capacity.expected_distinct(20, 300) / 3
    assert ps1.bytes_out == pytest.approx(rows * 16 + 4000)


def test_ceilings_and_the_resource_that_binds(config):
    loads = capacity.server_loads(FOOTPRINT, config(), 2, DISTINCT)
    found = capacity.ceilings(loads, config(), 3, Rates(100, 1000, 5), Machines(8000))
    assert found.by_resource == pytest.approx(
        {
            "worker CPU": 300,
            "server CPU": 1000 / 2104 * 10,
            # ps1 receives 4,416 bytes a step and sends 4,208: 3 workers overlap a third
            "server NIC": 8000 / (4416 + 4208 / 3) * 10,
            "chief dispatch": (5 - 1) * 10 * 10,  # less the training AUC's reads
        }
    )
    assert found.binding == "server CPU"
    more_cores = capacity.ceilings(
        loads, config(), 3, Rates(100, 1000, 5), Machines(8000, worker_cores=2, server_cores=4)
    )
    assert more_cores.by_resource["worker CPU"] == 600
    assert more_cores.binding == "server NIC"


def test_a_fixed_cost_per_step_and_server_is_paid_on_every_server(config):
    loads = capacity.server_loads(FOOTPRINT, config(), 2, DISTINCT)
    rates = Rates(100, 1000, 5, server_step_seconds=0.5)
    assert [capacity.server_seconds_per_step(load, rates) for load in loads] == pytest.approx(
        [0.5 + load.values / 1000 for load in loads]
    )
    found = capacity.ceilings(loads, config(), 3, rates, Machines(8000))
    assert found.by_resource["server CPU"] == pytest.approx(1 / (0.5 + 2104 / 1000) * 10)


def test_one_worker_uses_a_links_two_directions_one_after_the_other(config):
    _, ps1 = capacity.server_loads(FOOTPRINT, config(), 2, DISTINCT)
    assert capacity.link_bytes_per_step(ps1, 1) == 4416 + 4208
    assert capacity.link_bytes_per_step(ps1, 4) == 4416 + 4208 / 4


def test_the_chief_pays_for_its_closures_and_for_the_auc_read_each_second():
    from recsys_dist.train.auc_reading import READ_EVERY_SECONDS

    assert capacity.CHIEF_OTHER_CLOSURES_PER_SECOND == 1 / READ_EVERY_SECONDS
    rates = Rates(100, 1000, chief_closures=200)
    # 50 steps per closure at 100 steps/s: 2 training closures and 1 read a second
    assert capacity.chief_seconds_per_step(rates, 50, 100.0) == pytest.approx(3 / 200 / 100)


def test_the_smallest_cluster_fits_memory_then_the_rate(config):
    rates, machines = Rates(100, 100_000, 5), Machines(1e6, server_memory_bytes=20_000)
    # one server would hold 24,924 bytes; two hold 18,400 and 6,524
    result = capacity.plan(FOOTPRINT, config(), 400, rates, machines, DISTINCT)
    assert (result.smallest.workers, result.smallest.servers) == (4, 2)
    assert result.smallest.examples_per_second >= 400
    assert [sum(load.memory.values()) for load in result.loads] == [6524, 18400]
    assert (result.configured.workers, result.configured.servers) == (2, 2)
    roomy = capacity.plan(FOOTPRINT, config(), 400, rates, Machines(1e6), DISTINCT)
    assert (roomy.smallest.workers, roomy.smallest.servers) == (4, 1)


def test_no_cluster_beats_the_chief(config):
    result = capacity.plan(FOOTPRINT, config(), 600, Rates(100, 1e9, 5), Machines(1e9), DISTINCT)
    assert result.smallest is None and result.why_none == "chief dispatch"
    lines = capacity.plan_lines(result, config())
    assert (
        "smallest none meets 600 examples/s: chief dispatch caps every cluster (raise "
        "train.steps_per_call or input.batch_size)"
    ) in lines


def test_a_server_holding_a_whole_dense_weight_caps_every_cluster(config):
    # whichever server holds the 1,000-value kernel serves at least 2,000 values a step
    # (read and updated): at most 100,000 / 2,000 x 10 = 500 examples/s; two servers give
    # 1,000 / 2,104 x 100 = 475.3
    result = capacity.plan(
        FOOTPRINT, config(), 1000, Rates(100, 100_000, 1000), Machines(1e9), DISTINCT
    )
    assert result.smallest is None and result.why_none == "server CPU"
    assert result.best.binding == "server CPU" and result.best.workers == 10
    assert 100_000 / 2104 * 10 <= result.best.examples_per_second <= 500
    lines = capacity.plan_lines(result, config())
    assert "smallest none meets 1,000 examples/s: server CPU caps every cluster" in lines
    assert any(line.startswith("fastest  10 workers + ") for line in lines)


def test_a_dynamic_table_has_a_shard_on_every_server(config):
    table = DynamicFootprint("emb/tag", 4, TableUse("tag", 50, 3, None))
    footprint = ModelFootprint((), (table,), ())
    loads = capacity.server_loads(footprint, config(), 2, {"tag": 6.0})
    for load in loads:
        # 50 rows of 4 values and one Adagrad slot, plus 40 bytes of index and last-seen day
        assert load.memory == {"tag": 50 * (4 * 4 * 2 + 40)}
        assert (load.bytes_out, load.bytes_in, load.values) == (3 * 16, 3 * 32, 2 * 3 * 4)
    # without a measured count every id is taken as its own row: 10 rows x 3 ids
    assert capacity.server_loads(footprint, config(), 2)[0].bytes_out == 15 * 16
