"""Looking ids up in dynamic tables: each distinct key once, on its shard's server, with
admission in training, and the vectors handed back to each table (the tables themselves,
``DynamicTable`` and its shards: ``models/dynamic_table.py``, which imports this
module). The fused path packs what crosses between a worker and a
server into one tensor each way with the custom ops of ``recsys_dist/ops/``; the stock path
(:func:`lookup_tables_stock`, for tables whose placement has ``stock_lookups``: an
export's) gives the same vectors in stock TensorFlow ops."""

from __future__ import annotations

import contextlib

import tensorflow as tf

from recsys_dist import ops


def on_server(device: str | None):
    """Places the ops built inside on ``device`` (a shard's server), if any."""
    return tf.device(device) if device is not None else contextlib.nullcontext()


def lookup_tables(tables: list, keys: list[tf.Tensor], training: bool) -> list[tf.Tensor]:
    """``[N_t, dim_t]`` vectors of each table's 1-D int64 ``keys``.

    The tables share their shard count and group (one model's or one layer's tables, see
    :class:`ShardGroup`). Tables that share an id index are resolved together: each
    distinct key of theirs once, on its shard, and each table gathers its own rows. In
    training, every index's part on shard i is admitted by one ``AdmitIds`` call on
    shard i's server.

    Each tensor that crosses between a worker and a server is one transfer (a gRPC call
    between processes), so a step packs what goes to and comes from shard i: the keys of
    every index in one tensor (and their counts in another), the vectors of every table in
    one flat tensor. On the worker, ``RouteKeys`` finds each index's distinct keys and
    their shards, and ``UnrouteRows`` (with its gradient ``RouteRowGrads``) hands each
    table its vectors (``recsys_dist/ops/dynamic_routing.cc``). Tables whose placement has
    ``stock_lookups`` (an export's, which plain TensorFlow serves without the op library)
    run the same lookups in stock ops (:func:`lookup_tables_stock`).
    """
    if tables[0].placement.stock_lookups:
        if training:
            raise ValueError(
                f"{tables[0].name}: a model built with Placement(stock_lookups=True) "
                "looks up only, it does not train"
            )
        return lookup_tables_stock(tables, keys)
    library = ops.load()
    count = len(tables[0].shards)
    owners = list(dict.fromkeys(t.index_owner for t in tables))
    index_of = [owners.index(t.index_owner) for t in tables]
    order = sorted(range(len(tables)), key=index_of.__getitem__)  # grouped by index
    routed_index_of = [index_of[k] for k in order]
    packed, sizes, server, slot = library.route_keys(
        [tf.reshape(keys[k], [-1]) for k in order], servers=count, index_of=routed_index_of
    )
    flats = []
    for i in range(count):
        device = owners[0].shards[i].device
        with on_server(device):
            if training:  # every index's keys in one call, their rows in one tensor
                rows = admit_ids([owner.shards[i] for owner in owners], packed[i], sizes[i])
            else:
                rows = find_rows([owner.shards[i] for owner in owners], packed[i], sizes[i])
        flats.append(
            packed_rows(
                [
                    [tables[k].shards[i] for k in order if index_of[k] == g]
                    for g in range(len(owners))
                ],
                rows,
                sizes[i],
                device,
            )
        )
    dims = [tables[k].dim for k in order]

    @tf.custom_gradient
    def unroute(*flat):
        vectors = library.unroute_rows(
            list(flat), sizes, server, slot, index_of=routed_index_of, dims=dims
        )

        def grad(*upstream):
            return list(
                library.route_row_grads(
                    list(upstream), sizes, server, slot, index_of=routed_index_of, dims=dims
                )
            )

        return vectors, grad

    vectors: list = [None] * len(tables)
    for k, vector in zip(order, unroute(*flats)):
        vectors[k] = vector
    return vectors


def find_rows(shards: list, keys: tf.Tensor, sizes: tf.Tensor) -> tf.Tensor:
    """Rows of ``keys`` (each shard's index's keys one after another, ``sizes`` their
    counts; -1: no row), looked up only: no admission, no counting."""
    parts = [keys] if len(shards) == 1 else tf.split(keys, sizes, num=len(shards))
    found = [shard.find(part) for shard, part in zip(shards, parts)]
    return found[0] if len(found) == 1 else tf.concat(found, 0)


def lookup_tables_stock(tables: list, keys: list[tf.Tensor]) -> list[tf.Tensor]:
    """:func:`lookup_tables` in evaluation, in stock ops only (an export's serving
    functions): ``tf.unique``, the shard hash and ``tf.dynamic_partition`` per index on the
    worker, :func:`packed_rows_stock` on each server, then ``tf.split``,
    ``tf.dynamic_stitch`` and ``tf.gather`` per table. Same values as the kernels
    (tests/unit/ops/test_dynamic_routing.py)."""
    count = len(tables[0].shards)
    owners = list(dict.fromkeys(t.index_owner for t in tables))
    plans = []
    for owner in owners:
        members = [k for k, t in enumerate(tables) if t.index_owner is owner]
        flat = [tf.reshape(keys[k], [-1]) for k in members]
        unique, position = tf.unique(flat[0] if len(flat) == 1 else tf.concat(flat, 0))
        positions = (
            [position]
            if len(flat) == 1
            else tf.split(position, [tf.size(f) for f in flat], num=len(flat))
        )
        shard = owner.shard_of(unique)
        plans.append(
            (
                members,
                positions,
                tf.dynamic_partition(unique, shard, count),
                tf.dynamic_partition(tf.range(tf.size(unique)), shard, count),
            )
        )
    # The packed vectors of a shard hold the tables in this order; the worker splits them
    # by each table's dim times the number of its index's keys on that shard.
    order = [k for plan in plans for k in plan[0]]
    dims = [tables[k].dim for k in order]
    index_of_table = [o for o, plan in enumerate(plans) for _ in plan[0]]
    on_shards: list[dict[int, tf.Tensor]] = []
    for i in range(count):
        parts = [plan[2][i] for plan in plans]
        sizes = tf.stack([tf.size(part) for part in parts])
        packed = parts[0] if len(parts) == 1 else tf.concat(parts, 0)
        device = owners[0].shards[i].device
        with on_server(device):
            rows = find_rows([owner.shards[i] for owner in owners], packed, sizes)
        flat = packed_rows_stock(
            [[tables[k].shards[i] for k in plan[0]] for plan in plans], rows, sizes, device
        )
        lengths = tf.gather(sizes, index_of_table) * tf.constant(dims, tf.int32)
        split = [flat] if len(order) == 1 else tf.split(flat, lengths, num=len(order))
        on_shards.append(
            {k: tf.reshape(part, [-1, dim]) for k, part, dim in zip(order, split, dims)}
        )
    vectors: list = [None] * len(tables)
    for members, positions, _, places in plans:
        for k, position in zip(members, positions):
            found = tf.dynamic_stitch(places, [on_shards[i][k] for i in range(count)])
            vectors[k] = tf.gather(found, position)
    return vectors


def admit_ids(shards: list, keys: tf.Tensor, sizes: tf.Tensor) -> tf.Tensor:
    """Rows of ``keys`` (the keys of each shard's index, concatenated; ``sizes`` their
    counts; -1: no row) after admitting them, in one ``AdmitIds`` call on the shards'
    server (see :mod:`recsys_dist.models.dynamic_table`): find; count the keys without a row (in a
    run's first pass) and give those seen ``admit_after`` times the next rows while the
    shard has room, counting the others as ``dropped_full``; mark every row as seen
    today; count the lookups without a row as ``waiting``."""
    state = [
        [s.index.resource_handle for s in shards],
        [s.counts.resource_handle for s in shards],
        *(
            [getattr(s, name).handle for s in shards]
            for name in ("next_row", "last_seen", "dropped_full", "waiting", "day")
        ),
        [s.counting.handle for s in shards],
    ]
    return ops.load().admit_ids(
        *state,
        keys=keys,
        sizes=sizes,
        capacity=[s.capacity for s in shards],
        admit_after=[s.admit_after for s in shards],
    )


def packed_rows(
    groups: list[list], rows: tf.Tensor, sizes: tf.Tensor, device: str | None
) -> tf.Tensor:
    """The vectors of each shard of ``groups[g]`` (the shards of one server that share
    index g) at index g's rows (``rows``: every index's rows one after another, ``sizes``
    their counts; -1: a zero vector), flattened and concatenated in that order; built on
    ``device``, the shards' server, by the ``LiveRows`` and ``PackRows`` kernels around
    one gather per table.

    The gradient is unpacked on the server too (``UnpackRowGrads``): the worker sends one
    tensor back, the server splits it into each shard's rows, and the gathers turn those
    into an ``IndexedSlices`` of each ``emb`` on the server. :func:`packed_rows_stock`
    gives the same vectors in stock ops."""
    library = ops.load()
    owner = [g for g, group in enumerate(groups) for _ in group]
    with on_server(device):
        live = library.live_rows(rows, sizes, N=len(groups))
        found = [tf.gather(shard.emb, live[g]) for g, group in enumerate(groups) for shard in group]
    dims = [int(f.shape[1]) for f in found]

    @tf.custom_gradient
    def pack(*gathered):
        with on_server(device):
            packed = library.pack_rows(list(gathered), rows, sizes, owner=owner)

        def grad(upstream):
            with on_server(device):
                return list(
                    library.unpack_row_grads(
                        upstream, rows, sizes, T=len(dims), owner=owner, dims=dims
                    )
                )

        return packed, grad

    return pack(*found)


def packed_rows_stock(
    groups: list[list], rows: tf.Tensor, sizes: tf.Tensor, device: str | None
) -> tf.Tensor:
    """:func:`packed_rows` in stock ops (masks, one gather per table, scatters), for a
    SavedModel that plain TensorFlow serves. Same values, and through the stock gradients
    the same gradients, as the kernels (tests/unit/ops/test_dynamic_rows.py)."""
    with on_server(device):
        per_index = [rows] if len(groups) == 1 else tf.split(rows, sizes, num=len(groups))
        pieces = []
        for index_rows, group in zip(per_index, groups):
            valid = index_rows >= 0
            where = tf.where(valid)
            live = tf.boolean_mask(index_rows, valid)
            count = tf.size(index_rows, out_type=tf.int64)
            for shard in group:
                found = tf.gather(shard.emb, live)
                shape = tf.stack([count, tf.cast(tf.shape(found)[1], tf.int64)])
                pieces.append(tf.reshape(tf.scatter_nd(where, found, shape), [-1]))
        return pieces[0] if len(pieces) == 1 else tf.concat(pieces, 0)
