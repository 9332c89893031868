"""The ``AdmitIds`` kernel (recsys_dist/ops/dynamic_admission.cc): every row, count and
counter it leaves behind for two indexes in one call, checked against hand-worked
values, and each refusal of a bad input on its message."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist import ops
from recsys_dist.features.config import TableSpec
from recsys_dist.models.dynamic_lookup import admit_ids
from recsys_dist.models.dynamic_table import DynamicShard


def shard(name: str, capacity: int, admit_after: int) -> DynamicShard:
    spec = TableSpec(
        name=name, dim=2, kind="dynamic", capacity_per_shard=capacity, admit_after=admit_after
    )
    return DynamicShard(spec, 2, 0, None, "zeros", 0, name)


def admit(shards, *key_lists):
    keys = tf.constant([k for ks in key_lists for k in ks], tf.int64)
    sizes = tf.constant([len(ks) for ks in key_lists], tf.int32)
    return admit_ids(shards, keys, sizes).numpy().tolist()


def index_of(s: DynamicShard) -> dict[int, int]:
    keys, rows = (t.numpy().tolist() for t in s.index.export())
    return dict(zip(keys, rows))


def test_two_indexes_in_one_call_count_admit_refuse_and_mark_their_rows():
    counted = shard("counted", capacity=10, admit_after=2)  # a row on the second sighting
    small = shard("small", capacity=2, admit_after=1)  # a row at once, room for two
    counted.day.assign(7)
    small.day.assign(9)

    assert admit([counted, small], [5, 6, 5], [1, 2, 3]) == [-1, -1, -1, 0, 1, -1]
    assert index_of(counted) == {} and index_of(small) == {1: 0, 2: 1}
    keys, seen = (t.numpy().tolist() for t in counted.counts.export())
    assert dict(zip(keys, seen)) == {5: 1, 6: 1}  # counted once per call, not per read
    assert (int(small.dropped_full.numpy()), int(small.waiting.numpy())) == (1, 1)
    assert int(counted.waiting.numpy()) == 3
    assert small.last_seen.numpy().tolist()[:2] == [9, 9]

    assert admit([counted, small], [6, 7, 5], [3, 2]) == [0, -1, 1, -1, 1]
    assert index_of(counted) == {6: 0, 5: 1}  # in the order of the keys
    keys, seen = (t.numpy().tolist() for t in counted.counts.export())
    assert dict(zip(keys, seen)) == {7: 1}  # the admitted ones are no longer counted
    assert int(counted.next_row.numpy()) == 2 and int(small.next_row.numpy()) == 2
    assert counted.last_seen.numpy().tolist()[:3] == [7, 7, 0]
    assert (int(small.dropped_full.numpy()), int(small.waiting.numpy())) == (2, 2)


def test_passes_after_the_first_neither_count_nor_admit():
    counted = shard("counted", capacity=10, admit_after=2)
    admit([counted], [1, 2])
    counted._counting.on.assign(False)  # noqa: SLF001
    assert admit([counted], [1, 3]) == [-1, -1]  # 1 seen once in the first pass
    keys, seen = (t.numpy().tolist() for t in counted.counts.export())
    assert dict(zip(keys, seen)) == {1: 1, 2: 1}  # 3 not counted, 1 not again
    counted._counting.on.assign(True)  # noqa: SLF001
    assert admit([counted], [3, 1]) == [-1, 0]


def test_it_runs_in_a_function_and_gives_found_keys_their_rows():
    table = shard("t", capacity=100, admit_after=1)
    step = tf.function(lambda keys: admit_ids([table], keys, tf.size(keys)[None]))
    first = step(tf.constant(np.arange(50), tf.int64)).numpy()
    again = step(tf.constant(np.arange(50)[::-1], tf.int64)).numpy()
    assert first.tolist() == list(range(50)) and again.tolist() == first[::-1].tolist()


@pytest.mark.parametrize(
    "keys, sizes, message",
    [
        ([1, 2, 3], [2], "sizes do not add up to the number of keys"),
        ([1, 2], [1, 1], "sizes must hold one count per index"),
        ([1, 2], [-1], "sizes must be >= 0"),
        ([[1, 2]], [2], "keys must be 1-D"),
    ],
)
def test_bad_keys_or_sizes_are_refused_by_name(keys, sizes, message):
    table = shard("t", capacity=4, admit_after=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        admit_ids([table], tf.constant(keys, tf.int64), tf.constant(sizes, tf.int32))


def test_a_wrong_resource_is_refused_naming_the_input():
    table = shard("t", capacity=4, admit_after=1)
    with pytest.raises(tf.errors.OpError, match=r"counting\[0\]"):
        ops.load().admit_ids(
            *_state(table, counting=table.index.resource_handle),
            keys=tf.constant([1], tf.int64),
            sizes=tf.constant([1], tf.int32),
            capacity=[4],
            admit_after=[1],
        )


@pytest.mark.parametrize(
    "capacity, admit_after, message",
    [
        ([4], [0], "capacity must be >= 0 and admit_after >= 1"),
        ([4, 4], [1], "capacity and admit_after need one value per index"),
    ],
)
def test_bad_attributes_are_refused(capacity, admit_after, message):
    table = shard("t", capacity=4, admit_after=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        ops.load().admit_ids(
            *_state(table),
            keys=tf.constant([1], tf.int64),
            sizes=tf.constant([1], tf.int32),
            capacity=capacity,
            admit_after=admit_after,
        )


def _state(table: DynamicShard, **replace):
    """The kernel's state inputs for one index, with some replaced by name."""
    handles = {
        "indexes": table.index.resource_handle,
        "counts": table.counts.resource_handle,
        "next_rows": table.next_row.handle,
        "last_seen": table.last_seen.handle,
        "dropped_full": table.dropped_full.handle,
        "waiting": table.waiting.handle,
        "days": table.day.handle,
        "counting": table._counting.on.handle,
    }  # noqa: SLF001
    handles.update(replace)
    return [[handle] for handle in handles.values()]


def test_a_state_variable_of_another_dtype_or_rank_is_refused_naming_it():
    table = shard("t", capacity=4, admit_after=1)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"next_rows\[0\]: expected a scalar int64 variable, got float "
        r"\[4,2\]",
    ):
        ops.load().admit_ids(
            *_state(table, next_rows=table.emb.handle),
            keys=tf.constant([1], tf.int64),
            sizes=tf.constant([1], tf.int32),
            capacity=[4],
            admit_after=[1],
        )


def test_a_capacity_beyond_the_rows_is_refused_before_any_admission():
    table = shard("t", capacity=4, admit_after=1)
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"capacity\[0\] is 5 rows but last_seen\[0\] holds 4"
    ):
        ops.load().admit_ids(
            *_state(table),
            keys=tf.constant([1], tf.int64),
            sizes=tf.constant([1], tf.int32),
            capacity=[5],
            admit_after=[1],
        )
    assert index_of(table) == {}


def test_an_index_row_past_the_rows_is_refused_naming_the_key():
    table = shard("t", capacity=4, admit_after=1)
    table.index.insert(tf.constant([7], tf.int64), tf.constant([50], tf.int64))
    with pytest.raises(
        tf.errors.FailedPreconditionError,
        match=r"indexes\[0\] gives key 7 row 50, past the 4 rows of "
        r"last_seen\[0\]",
    ):
        admit([table], [7])
