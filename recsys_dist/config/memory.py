"""The memory of embedding tables with their optimizer slots, computed in one place: the
check of ``cluster.strategy`` (:mod:`recsys_dist.config.strategy`, a mirrored copy of every
table) and the capacity planner (:mod:`recsys_dist.cluster.capacity`, each server's share)
both ask :func:`table_bytes`."""

from __future__ import annotations

#: Bytes of one float32 value.
VALUE_BYTES = 4

#: Optimizer slots per variable element, by optimizer name.
TABLE_SLOTS = {"adagrad": 1, "ftrl": 2, "sgd": 0, "adam": 2}


def table_bytes(rows: float, dim: int, optimizer: str | None = None) -> float:
    """Bytes of ``rows`` rows of a float32 table of width ``dim``, with the slots of
    ``optimizer`` (one table-sized copy per slot) when it is given.

    Example::

        table_bytes(1000, 8)             # 32000: the values
        table_bytes(1000, 8, "adagrad")  # 64000: values and one accumulator
    """
    copies = 1 + (TABLE_SLOTS[optimizer] if optimizer is not None else 0)
    return rows * dim * VALUE_BYTES * copies
