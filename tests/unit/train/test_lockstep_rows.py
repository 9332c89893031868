"""How ``multi_worker_mirrored`` workers share an item's rows (``lockstep_runner.worker_rows``):
every row exactly once, each worker one contiguous range, and every worker's range needs
the item's number of steps except when the item's last global batch is shorter than the
number of workers."""

from __future__ import annotations

import pytest

from recsys_dist.train.lockstep_runner import worker_rows


@pytest.mark.parametrize(
    "start, stop, workers",
    [(0, 256, 2), (100, 1100, 2), (0, 7, 3), (5, 6, 4), (0, 12_345, 5), (40, 40, 2)],
)
def test_each_row_goes_to_exactly_one_worker_in_contiguous_ranges(start, stop, workers):
    ranges = [worker_rows(start, stop, w, workers) for w in range(workers)]
    assert ranges[0][0] == start and ranges[-1][1] == stop
    for (_, end), (begin, _) in zip(ranges, ranges[1:]):
        assert end == begin
    assert all(a <= b for a, b in ranges)


@pytest.mark.parametrize("rows", [*range(1, 12), *range(250, 262), 511, 512, 513, 1000, 2047])
def test_every_worker_needs_the_items_steps_unless_the_last_batch_is_tiny(rows):
    batch, workers = 256, 2
    share = batch // workers
    steps = -(-rows // batch)
    needed = [
        -(-(b - a) // share) for a, b in (worker_rows(0, rows, w, workers) for w in range(workers))
    ]
    assert max(needed) == steps  # no worker needs more steps than the item has
    if rows - (steps - 1) * batch >= workers:  # the last global batch has a row for each
        assert needed == [steps] * workers


@pytest.mark.parametrize(
    "start, stop, stride, workers",
    [(0, 100, 4, 2), (3, 100, 4, 2), (1, 95, 7, 3), (5, 6, 3, 4), (2, 12_345, 9, 5)],
)
def test_a_strided_item_is_shared_row_by_row_in_order(start, stop, stride, workers):
    """Worker w reads rows ``a, a + stride, ...`` below ``b``: together every row of the
    item once, in order, each worker's share as even as for a contiguous item."""
    shares = [
        list(range(*worker_rows(start, stop, w, workers, stride), stride)) for w in range(workers)
    ]
    assert [row for share in shares for row in share] == list(range(start, stop, stride))
    sizes = [len(share) for share in shares]
    assert max(sizes) - min(sizes) <= 1
