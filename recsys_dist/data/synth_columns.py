"""Arrow columns of the synthetic data, built from numpy without a Python loop per row:
list columns from flat values and counts, ``|``-joined strings and 8-digit hex ids."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
MISSING_HEX = 1 << 32  # stands for "" when hashing a string id field


def distinct_per_row(
    rows: np.ndarray, ids: np.ndarray, bound: int
) -> tuple[np.ndarray, np.ndarray]:
    """Drops repeated ids within a row; ids (all < ``bound``) come out sorted per row."""
    unique = np.unique(rows * bound + ids)
    return unique // bound, unique % bound


def list_column(values: pa.Array, counts: np.ndarray, non_null: bool = True) -> pa.ListArray:
    """``counts[i]`` consecutive ``values`` per row, as a list column."""
    offsets = np.zeros(counts.size + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    kind = pa.list_(pa.field("item", values.type, nullable=not non_null))
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=kind)


def join_lists(values: pa.Array, counts: np.ndarray) -> pa.Array:
    """Joins ``counts[i]`` consecutive string ``values`` per row with ``|``."""
    return pc.binary_join(list_column(values, counts, non_null=False), "|")


def hex_strings(values: np.ndarray) -> pa.Array:
    """8-char lowercase hex of 32-bit ``values``; ``MISSING_HEX`` becomes ``""``."""
    present = values != MISSING_HEX
    shifts = np.arange(28, -1, -4, dtype=np.int64)
    digits = HEX_DIGITS[(values[present, None] >> shifts) & 0xF]
    offsets = np.zeros(values.size + 1, dtype=np.int32)
    np.cumsum(np.where(present, 8, 0), out=offsets[1:])
    return pa.StringArray.from_buffers(
        values.size, pa.py_buffer(offsets), pa.py_buffer(digits.tobytes()), null_count=0
    )
