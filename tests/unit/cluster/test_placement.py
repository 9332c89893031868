"""Where a model's variables live (``cluster/placement.py``): the placement each strategy
gives the models (the ``Placement`` of ``models/sharding.py``) and the partitioner of
tables, without servers. On
servers: tests/cluster/test_train.py (a dynamic table's shards on the two parameter
servers) and test_dynamic_tables.py."""

from __future__ import annotations

import pytest
import tensorflow as tf

from recsys_dist.cluster.mirrored import mirrored_strategy
from recsys_dist.cluster.placement import (
    MirroredPlacement,
    ParameterServerPlacement,
    TablePartitioner,
    new_run_dynamic_shards,
    partitioned_tables,
    placement_for,
)
from recsys_dist.models.sharding import Placement

SERVERS = [f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in range(2)]


def test_dynamic_shards_go_round_robin_on_the_servers():
    placement = ParameterServerPlacement(SERVERS)
    assert placement.server_count() == 2
    assert placement.shard_devices(3) == [SERVERS[0], SERVERS[1], SERVERS[0]]
    assert ParameterServerPlacement([]).shard_devices(2) == [None, None]
    assert ParameterServerPlacement([]).server_count() is None


def test_the_default_placement_keeps_everything_in_this_process():
    default = Placement()
    assert default.dynamic_shards == 1 and not default.stock_lookups
    assert default.server_count() is None and default.shard_devices(2) == [None, None]
    table = tf.Variable(tf.zeros([3, 2]))
    assert default.local_copy(table) is table
    assert new_run_dynamic_shards(default, ps=4) == 4  # no servers: cluster.ps
    servers = ParameterServerPlacement(SERVERS)
    assert new_run_dynamic_shards(servers, ps=4) == 2  # the servers there are


def test_a_placement_keeps_its_kind_with_another_shard_count_and_refuses_a_bad_one():
    placement = ParameterServerPlacement(SERVERS, dynamic_shards=2).with_dynamic_shards(3)
    assert isinstance(placement, ParameterServerPlacement)
    assert (placement.servers, placement.dynamic_shards) == (tuple(SERVERS), 3)
    assert placement_for(mirrored_strategy(1), dynamic_shards=4).dynamic_shards == 4
    assert placement_for(tf.distribute.get_strategy()).dynamic_shards == 1
    for bad in (0, -1, 1.5, "2", True, None):
        with pytest.raises(ValueError, match=r"dynamic_shards must be a positive integer"):
            Placement(dynamic_shards=bad)


def test_only_tables_created_in_the_partitioned_scope_are_sharded():
    """TensorFlow gives the partitioner a shape and a dtype only: the tables reach it
    through ParameterServerPlacement.creating_tables(); everything else stays whole."""
    partitioner = TablePartitioner(min_shard_bytes=4, max_shards=2)
    assert partitioner(tf.TensorShape([8, 4]), tf.float32) == [1, 1]
    with ParameterServerPlacement(SERVERS).creating_tables():
        assert partitioner(tf.TensorShape([8, 4]), tf.float32) == [2, 1]
    with Placement().creating_tables(), MirroredPlacement().creating_tables():
        assert partitioner(tf.TensorShape([8, 4]), tf.float32) == [1, 1]
    with partitioned_tables():
        assert partitioner(tf.TensorShape([8, 4]), tf.float32) == [2, 1]
    assert partitioner(tf.TensorShape([8, 4]), tf.float32) == [1, 1]


def test_models_built_under_a_mirrored_strategy_read_each_replicas_own_copy():
    strategy = mirrored_strategy(1)
    assert isinstance(placement_for(strategy), MirroredPlacement)
    assert type(placement_for(tf.distribute.get_strategy())) is Placement
    with strategy.scope():
        table = tf.Variable(tf.ones([3, 2]))
    copy = placement_for(strategy).local_copy(table)
    assert copy is not table and not hasattr(copy, "_get_on_device_or_primary")
    assert copy.numpy().tolist() == table.numpy().tolist()
