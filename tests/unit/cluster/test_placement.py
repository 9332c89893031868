"""Where a model's variables live (``cluster/placement.py``): the placement each strategy
gives the models (the ``Placement`` of ``models/sharding.py``), without servers. On
servers: tests/cluster/test_train.py (a dynamic table's shards on the two parameter
servers) and test_dynamic_tables.py."""

from __future__ import annotations

import tensorflow as tf

from recsys_dist.cluster.mirrored import mirrored_strategy
from recsys_dist.cluster.placement import (
    MirroredPlacement,
    ParameterServerPlacement,
    building_under,
    new_run_dynamic_shards,
    placement_for,
)
from recsys_dist.models.sharding import Placement, current_placement, placed

SERVERS = [f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in range(2)]


def test_dynamic_shards_go_round_robin_on_the_servers():
    placement = ParameterServerPlacement(SERVERS)
    assert placement.server_count() == 2
    assert placement.shard_devices(3) == [SERVERS[0], SERVERS[1], SERVERS[0]]
    assert ParameterServerPlacement([]).shard_devices(2) == [None, None]
    assert ParameterServerPlacement([]).server_count() is None


def test_the_default_placement_keeps_everything_in_this_process():
    default = current_placement()
    assert type(default) is Placement
    assert default.server_count() is None and default.shard_devices(2) == [None, None]
    table = tf.Variable(tf.zeros([3, 2]))
    assert default.local_copy(table) is table
    assert new_run_dynamic_shards(ps=4) == 4  # no servers in force: cluster.ps
    with placed(ParameterServerPlacement(SERVERS)):
        assert new_run_dynamic_shards(ps=4) == 2  # the servers there are
    assert current_placement() is default


def test_models_built_under_a_mirrored_strategy_read_each_replicas_own_copy():
    strategy = mirrored_strategy(1)
    assert isinstance(placement_for(strategy), MirroredPlacement)
    assert type(placement_for(tf.distribute.get_strategy())) is Placement
    with building_under(strategy):
        assert isinstance(current_placement(), MirroredPlacement)
        table = tf.Variable(tf.ones([3, 2]))
    assert isinstance(current_placement(), Placement)
    copy = placement_for(strategy).local_copy(table)
    assert copy is not table and not hasattr(copy, "_get_on_device_or_primary")
    assert copy.numpy().tolist() == table.numpy().tolist()
