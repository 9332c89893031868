"""Table memory (``config/memory.py``), the one function the strategy check and the
capacity planner both use."""

from __future__ import annotations

import pytest

from recsys_dist.config.memory import TABLE_SLOTS, VALUE_BYTES, table_bytes


@pytest.mark.parametrize(
    "optimizer, copies", [(None, 1), ("sgd", 1), ("adagrad", 2), ("ftrl", 3), ("adam", 3)]
)
def test_a_table_with_its_optimizer_slots(optimizer, copies):
    assert table_bytes(1000, 8, optimizer) == 1000 * 8 * VALUE_BYTES * copies
    if optimizer is not None:
        assert copies == 1 + TABLE_SLOTS[optimizer]


def test_part_of_a_table_and_a_dense_variable():
    assert table_bytes(2.5, 4, "adagrad") == 2.5 * 4 * 4 * 2  # expected rows may be fractional
    assert table_bytes(10, 1) == 40  # a non-trainable variable of 10 values: no slots
    with pytest.raises(KeyError):
        table_bytes(1, 1, "rmsprop")
