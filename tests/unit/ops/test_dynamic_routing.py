"""The worker-side routing kernels of dynamic tables (recsys_dist/ops/dynamic_routing.cc):
``RouteKeys`` gives the distinct keys, servers and order the stock ops give;
``UnrouteRows`` and its gradient ``RouteRowGrads`` make :func:`lookup_tables` return the
vectors and gradients of the stock-op lookup an export traces; each refusal of a bad
input is checked on its message."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist import hashing, ops
from recsys_dist.features.config import TableSpec
from recsys_dist.models.dynamic_lookup import lookup_tables, lookup_tables_stock
from recsys_dist.models.dynamic_table import ModelTables
from recsys_dist.models.sharding import Placement


def stock_routing(keys: list[np.ndarray], index_of: list[int], servers: int):
    """Per server, the distinct keys of each index in first-occurrence order (tf.unique,
    then tf.dynamic_partition by the shard hash), as the stock lookup routes them."""
    packed = [[] for _ in range(servers)]
    sizes = [[] for _ in range(servers)]
    for g in sorted(set(index_of)):
        unique = tf.unique(
            tf.constant(np.concatenate([k for k, i in zip(keys, index_of) if i == g]), tf.int64)
        )[0]
        shard = hashing.to_bucket(hashing.hash_int64(unique), servers).numpy()
        for s in range(servers):
            part = unique.numpy()[shard == s].tolist()
            packed[s] += part
            sizes[s].append(len(part))
    return packed, sizes


@pytest.mark.parametrize("servers", [1, 2, 3])
def test_route_keys_gives_the_stock_order_servers_and_slots(servers):
    rng = np.random.default_rng(servers)
    keys = [
        rng.integers(-50, 50, 40),
        rng.integers(0, 2**62, 7),
        rng.integers(0, 30, 25),
        np.array([], np.int64),
    ]
    index_of = [0, 0, 1, 2]
    packed, sizes, server, slot = ops.load().route_keys(
        [tf.constant(k, tf.int64) for k in keys], servers=servers, index_of=index_of
    )
    want_packed, want_sizes = stock_routing(keys, index_of, servers)
    assert [p.numpy().tolist() for p in packed] == want_packed
    assert [s.numpy().tolist() for s in sizes] == want_sizes
    for k, g, on, at in zip(keys, index_of, server, slot):
        on, at = on.numpy(), at.numpy()
        assert (
            on.tolist()
            == hashing.to_bucket(hashing.hash_int64(tf.constant(k, tf.int64)), servers)
            .numpy()
            .tolist()
        )
        for key, s, j in zip(k, on, at):  # each key's slot holds that key on its server
            start = sum(want_sizes[s][:g])
            assert want_packed[s][start + j] == key


def _tables(shards: int, stock_lookups: bool = False):
    """Two layers sharing an index (dims 4 and 1) and a table of its own (dim 3)."""
    spec = TableSpec(name="user", dim=4, kind="dynamic", capacity_per_shard=64, admit_after=1)
    other = TableSpec(name="ad", dim=3, kind="dynamic", capacity_per_shard=64, admit_after=1)
    shared = ModelTables(Placement(dynamic_shards=shards, stock_lookups=stock_lookups))
    return [
        shared.dynamic_table(spec, 4, "random_uniform", 1, "deep_user"),
        shared.dynamic_table(other, 3, "random_uniform", 3, "deep_ad"),
        shared.dynamic_table(spec, 1, "random_uniform", 2, "wide_user"),
    ]


@pytest.mark.parametrize("shards", [1, 2, 3])
def test_lookups_and_gradients_equal_the_stock_ops(shards):
    tables = _tables(shards)
    rng = np.random.default_rng(shards)
    batch = [tf.constant(rng.integers(0, 40, n), tf.int64) for n in (50, 30, 20)]
    lookup_tables(tables, batch, training=True)  # admits about half the ids
    batch = [tf.constant(rng.integers(0, 80, n), tf.int64) for n in (50, 30, 20)]
    variables = [v for t in tables for v in t.embedding_variables]
    weights = [
        tf.constant(rng.normal(size=(int(b.shape[0]), t.dim)), tf.float32)
        for b, t in zip(batch, tables)
    ]

    def vectors_and_grads(lookup, upstream=weights):
        with tf.GradientTape() as tape:
            vectors = lookup(tables, batch)
            loss = tf.add_n([tf.reduce_sum(v * w) for v, w in zip(vectors, upstream)])
        grads = tape.gradient(loss, variables)
        return [v.numpy() for v in vectors], [tf.convert_to_tensor(g).numpy() for g in grads]

    fused, fused_grads = vectors_and_grads(lambda t, k: lookup_tables(t, k, training=False))
    stock, stock_grads = vectors_and_grads(lookup_tables_stock)
    for a, b in zip(fused, stock):
        np.testing.assert_array_equal(a, b)  # gathered copies of the same rows
    # A row's gradient is the sum of the upstream values of its reads (n at most), which
    # the two paths may add in other orders: each within (n - 1) u sum |w| of the exact
    # sum, u = eps / 2. A read's value lost or counted twice is off by |w| itself.
    _, magnitudes = vectors_and_grads(lookup_tables_stock, [tf.abs(w) for w in weights])
    reads = max(int(np.bincount(keys.numpy()).max()) for keys in batch)
    for a, b, magnitude in zip(fused_grads, stock_grads, magnitudes):
        bound = (reads - 1) * np.finfo(np.float32).eps * magnitude
        assert np.all(np.abs(a - b) <= bound), np.max(np.abs(a - b) - bound)
    assert any(np.any(g) for g in fused_grads)
    assert sum(np.any(v, axis=1).sum() for v in fused) > 0  # some ids have rows
    assert sum((~np.any(v, axis=1)).sum() for v in fused) > 0  # and some do not


def test_lookups_in_a_function_on_several_servers_give_the_eager_values():
    tables = _tables(2)
    batch = [
        tf.constant([5, 1, 5, 9], tf.int64),
        tf.constant([2, 2], tf.int64),
        tf.constant([9, 7], tf.int64),
    ]
    eager = [v.numpy() for v in lookup_tables(tables, batch, training=True)]
    traced = tf.function(lambda *k: lookup_tables(tables, list(k), training=True))(*batch)
    for a, b in zip(eager, traced):
        np.testing.assert_array_equal(a, b.numpy())
    np.testing.assert_array_equal(eager[0][0], eager[0][2])  # one id, one vector


K = [tf.constant([1, 2], tf.int64)]
SIZES = [tf.constant([2], tf.int32)]
ROUTE = [tf.constant([0, 0], tf.int32)], [tf.constant([0, 1], tf.int64)]


@pytest.mark.parametrize(
    "name, kwargs, message",
    [
        (
            "route_keys",
            dict(keys=K * 3, servers=2, index_of=[0, 2, 2]),
            "index_of must group the tables by index",
        ),
        (
            "route_keys",
            dict(keys=K * 2, servers=2, index_of=[1, 1]),
            "index_of must start at index 0",
        ),
        (
            "route_keys",
            dict(keys=K * 2, servers=2, index_of=[0]),
            "index_of needs one index per table",
        ),
        (
            "route_keys",
            dict(keys=[tf.constant([[1]], tf.int64)], servers=1, index_of=[0]),
            r"keys\[0\] must be 1-D, got shape \[1,1\]",
        ),
        (
            "unroute_rows",
            dict(
                flats=[tf.zeros([5])],
                sizes=SIZES,
                server=ROUTE[0],
                slot=ROUTE[1],
                index_of=[0],
                dims=[2],
            ),
            r"flats\[0\] holds 5 values, its tables 4",
        ),
        (
            "unroute_rows",
            dict(
                flats=[tf.zeros([4])],
                sizes=[tf.constant([2, 0], tf.int32)],
                server=ROUTE[0],
                slot=ROUTE[1],
                index_of=[0],
                dims=[2],
            ),
            r"sizes\[0\] must hold one count per index \(1\), got shape \[2\]",
        ),
        (
            "unroute_rows",
            dict(
                flats=[tf.zeros([4])],
                sizes=SIZES,
                server=ROUTE[0],
                slot=[tf.constant([0, 2], tf.int64)],
                index_of=[0],
                dims=[2],
            ),
            "table 0 key 1: server 0 slot 2 is outside the routed keys",
        ),
        (
            "unroute_rows",
            dict(
                flats=[tf.zeros([4])],
                sizes=SIZES,
                server=[tf.constant([0, 1])],
                slot=ROUTE[1],
                index_of=[0],
                dims=[2],
            ),
            "table 0 key 1: server 1 slot 1 is outside the routed keys",
        ),
        (
            "unroute_rows",
            dict(
                flats=[tf.zeros([4])],
                sizes=SIZES,
                server=ROUTE[0],
                slot=ROUTE[1],
                index_of=[0],
                dims=[0],
            ),
            "dims must be >= 1",
        ),
        (
            "unroute_rows",
            dict(
                flats=[tf.zeros([4])],
                sizes=SIZES,
                server=ROUTE[0],
                slot=ROUTE[1],
                index_of=[0],
                dims=[2, 3],
            ),
            "index_of and dims need one value per table",
        ),
        (
            "unroute_rows",
            dict(
                flats=[tf.zeros([4])],
                sizes=SIZES,
                server=ROUTE[0],
                slot=[tf.constant([0], tf.int64)],
                index_of=[0],
                dims=[2],
            ),
            r"server\[0\] and slot\[0\] must be 1-D of one length",
        ),
        (
            "route_row_grads",
            dict(
                grads=[tf.zeros([2, 3])],
                sizes=SIZES,
                server=ROUTE[0],
                slot=ROUTE[1],
                index_of=[0],
                dims=[2],
            ),
            r"grads\[0\] must be \[2, 2\], got \[2,3\]",
        ),
    ],
)
def test_a_bad_input_is_refused_with_its_message(name, kwargs, message):
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=message):
        getattr(ops.load(), name)(**kwargs)


def test_stock_lookups_refuse_training():
    """The stock ops an export traces only look up; admission needs the kernels."""
    tables = _tables(1, stock_lookups=True)
    with pytest.raises(
        ValueError,
        match=r"deep_user: a model built with Placement\(stock_lookups=True\) "
        r"looks up only, it does not train",
    ):
        lookup_tables(tables, [tf.constant([1], tf.int64)] * 3, training=True)
    # a lookup is fine, and reads zeros for ids without a row
    assert (
        not lookup_tables(tables, [tf.constant([1], tf.int64)] * 3, training=False)[0].numpy().any()
    )


def test_gradients_of_repeated_keys_add_up():
    flats = ops.load().route_row_grads(
        grads=[tf.constant([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0]])],
        sizes=[tf.constant([2], tf.int32)],
        server=[tf.constant([0, 0, 0])],
        slot=[tf.constant([1, 0, 1], tf.int64)],
        index_of=[0],
        dims=[2],
    )
    assert flats[0].numpy().tolist() == [10, 20, 101, 202]
