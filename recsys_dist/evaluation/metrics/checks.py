"""Input checks shared by every metric: each raises :class:`ValueError` naming the bad argument."""

from __future__ import annotations

from typing import Any

import numpy as np


def as_1d(values: Any, name: str) -> np.ndarray:
    """Returns ``values`` as an array after checking it is given and 1-D."""
    if values is None:
        raise ValueError(f"{name} is missing; expected a 1-D array")
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {array.shape}")
    return array


def check_length(array: np.ndarray, name: str, rows: int, reference: str = "labels") -> None:
    """Raises when ``array`` does not have ``rows`` rows, as ``reference`` has."""
    if len(array) != rows:
        raise ValueError(
            f"{name} has {len(array)} rows but {reference} has {rows}; expected the same length"
        )


def _first_bad(mask: np.ndarray, array: np.ndarray) -> str:
    row = int(np.argmax(mask))
    # .item(): numpy 2's repr of a scalar is np.int64(2), not the value a user wrote
    return f"{array[row].item()!r} at row {row}"


def check_labels(labels: Any, name: str = "labels") -> np.ndarray:
    """Returns ``labels`` as int8 0/1 after checking they are 1-D, non-empty and 0/1."""
    array = as_1d(labels, name)
    if array.size == 0:
        raise ValueError(f"{name} is empty; expected at least one row")
    if array.dtype.kind == "b":
        return array.astype(np.int8)
    if array.dtype.kind not in "iuf":
        raise ValueError(f"{name} must hold numeric 0/1 values, got dtype {array.dtype}")
    if array.dtype.kind in "iu":
        valid = array.min() >= 0 and array.max() <= 1
    else:
        valid = np.count_nonzero(array == 0) + np.count_nonzero(array == 1) == array.size
    if not valid:
        bad = (array != 0) & (array != 1)
        raise ValueError(f"{name} must contain only 0 and 1; found {_first_bad(bad, array)}")
    return array.astype(np.int8, copy=False)


def check_scores(scores: Any, name: str, rows: int, reference: str = "labels") -> np.ndarray:
    """Checks a score/logit column: 1-D, numeric, ``rows`` long and finite. Keeps its dtype."""
    array = as_1d(scores, name)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be numeric, got dtype {array.dtype}")
    check_length(array, name, rows, reference)
    if array.dtype.kind == "f":
        finite = np.isfinite(array)
        if not finite.all():
            raise ValueError(f"{name} must be finite; found {_first_bad(~finite, array)}")
    if array.dtype.kind == "b":
        array = array.astype(np.int8)
    return array


def check_weights(weights: Any, rows: int, reference: str = "labels") -> np.ndarray | None:
    """Returns float64 weights, or None when ``weights`` is None (every row weighs 1)."""
    if weights is None:
        return None
    array = as_1d(weights, "weights")
    if array.dtype.kind not in "biuf":
        raise ValueError(f"weights must be numeric, got dtype {array.dtype}")
    check_length(array, "weights", rows, reference)
    array = array.astype(np.float64)
    finite = np.isfinite(array)
    if not finite.all():
        raise ValueError(f"weights must be finite; found {_first_bad(~finite, array)}")
    negative = array < 0
    if negative.any():
        raise ValueError(f"weights must be >= 0; found {_first_bad(negative, array)}")
    return array


def check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    """Returns ``value`` as an int after checking it is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_groups(groups: Any, rows: int, reference: str = "labels") -> np.ndarray:
    """Returns group ids as an integer array (strings are mapped to integer codes)."""
    array = as_1d(groups, "groups")
    check_length(array, "groups", rows, reference)
    if array.dtype.kind in "OUS":
        return np.unique(array.astype(str), return_inverse=True)[1].astype(np.int64)
    if array.dtype.kind not in "biu":
        raise ValueError(f"groups must hold integer ids (or strings), got dtype {array.dtype}")
    return array.astype(np.int8) if array.dtype.kind == "b" else array
