"""The data position a checkpoint records: what is left of each pass, files counted by
their path under the data root and their size, and other data refused."""

from __future__ import annotations

import json

import pytest

from recsys_dist.data.shard_plan import Unit
from recsys_dist.train.data_position import DataPosition, PositionMismatch


def _position(epochs: int = 2) -> DataPosition:
    items = tuple(Unit(0, i * 10, (i + 1) * 10) for i in range(5))
    return DataPosition(("a.parquet",), items, epochs, shuffle=True, seed=3)


def test_data_position_schedules_what_is_left_pass_by_pass():
    position = _position()
    passes, order = zip(*position.schedule())
    assert passes == (0,) * 5 + (1,) * 5
    assert sorted(order[:5]) == sorted(order[5:]) == list(range(5))
    assert order[:5] != list(range(5)) or order[5:] != list(range(5))  # shuffled
    for index in order[:7]:
        position.complete(index)
    resumed = _position()
    resumed.restore(json.loads(json.dumps(position.to_json())), "ckpt")
    assert resumed.finished_rows == 70 and not resumed.finished
    passes, left = zip(*resumed.schedule())
    assert passes == (1, 1, 1)
    assert sorted(left) == sorted(order[7:])  # exactly the three unfinished passes
    for index in left:
        resumed.complete(index)
    assert resumed.finished and resumed.finished_rows == resumed.total_rows == 100


def test_a_position_counts_files_by_their_path_under_the_data_root_and_their_size():
    from recsys_dist.train.data_position import _absolute_paths_fingerprint, relative_paths

    local = ("/srv/data/dt=2026-01-01/a.parquet", "/srv/data/dt=2026-01-02/b.parquet")
    moved = ("s3://bucket/copy/dt=2026-01-01/a.parquet", "s3://bucket/copy/dt=2026-01-02/b.parquet")
    assert (
        relative_paths(local)
        == relative_paths(moved)
        == ["dt=2026-01-01/a.parquet", "dt=2026-01-02/b.parquet"]
    )
    assert relative_paths(("/srv/data/one.parquet",)) == ["one.parquet"]
    items = (Unit(0, 0, 10), Unit(1, 0, 10))
    position = DataPosition(local, items, 2, True, 3, (100, 200))
    position.complete(1)
    saved = json.loads(json.dumps(position.to_json()))
    elsewhere = DataPosition(moved, items, 2, True, 3, (100, 200))
    elsewhere.restore(saved, "ckpt-1")  # moved data resumes
    assert elsewhere.done == [0, 1]
    rewritten = DataPosition(local, items, 2, True, 3, (100, 201))
    with pytest.raises(PositionMismatch, match="their sizes"):
        rewritten.restore(saved, "ckpt-1")
    older = dict(saved, fingerprint=_absolute_paths_fingerprint(local, items))
    same_place = DataPosition(local, items, 2, True, 3, (100, 200))
    same_place.restore(older, "ckpt-0")  # written before positions were root-relative
    assert same_place.done == [0, 1]


def test_data_position_of_other_data_is_refused():
    position = _position()
    other = DataPosition(("b.parquet",), position.items, 2, True, 3)
    with pytest.raises(
        PositionMismatch,
        match="ckpt-9: the checkpoint's data position was recorded over other data",
    ):
        other.restore(position.to_json(), "ckpt-9")


def test_a_position_stopped_early_is_finished_schedules_nothing_and_keeps_it():
    position = _position(epochs=4)
    for _, index in list(position.schedule())[:5]:
        position.complete(index)
    assert position.passes_done == 1 and not position.finished
    position.stopped = True
    assert position.finished and list(position.schedule()) == []
    resumed = _position(epochs=4)
    resumed.restore(json.loads(json.dumps(position.to_json())), "ckpt")
    assert resumed.stopped and resumed.finished and resumed.finished_rows == 50


def test_a_position_over_contiguous_items_resumes_on_strided_items_of_the_same_units():
    """Checkpoints written when items were contiguous ranges resume item by item: the same
    units in the same order, as many items each; other data is still refused."""
    files, sizes = ("/d/dt=2026-01-01/a.parquet",), (100,)
    contiguous = (Unit(0, 0, 34), Unit(0, 34, 67), Unit(0, 67, 100), Unit(0, 100, 110))
    strided = (Unit(0, 0, 100, 3), Unit(0, 1, 100, 3), Unit(0, 2, 100, 3), Unit(0, 100, 110))
    assert [u.rows for u in strided] == [34, 33, 33, 10]
    before = DataPosition(files, contiguous, 2, True, 3, sizes)
    before.complete(1)
    before.complete(3)
    saved = json.loads(json.dumps(before.to_json()))
    after = DataPosition(files, strided, 2, True, 3, sizes, contiguous_items=contiguous)
    assert after.fingerprint != saved["fingerprint"]
    after.restore(saved, "ckpt-3")
    assert after.done == [0, 1, 0, 1] and after.finished_rows == 43
    unrelated = DataPosition(files, strided, 2, True, 3, sizes, contiguous_items=strided)
    with pytest.raises(PositionMismatch, match="ckpt-3: the checkpoint's data position"):
        unrelated.restore(saved, "ckpt-3")
