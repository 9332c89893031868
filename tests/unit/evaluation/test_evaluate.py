"""Parts of the evaluate job that need no cluster: the group keys of GAUC.

``recsys-dist evaluate`` on a real local cluster is in tests/cluster/test_evaluate.py.
"""

from __future__ import annotations

import numpy as np


def test_string_group_keys_are_stable_64_bit_hashes():
    from recsys_dist.evaluation.evaluate import _group_ids

    first = _group_ids(np.array([b"u1", b"u2", b"u1"], dtype=object))
    again = _group_ids(np.array([b"u2"], dtype=object))  # another item, same user
    assert first.dtype == np.int64 and first[0] == first[2] != first[1] == again[0]
    np.testing.assert_array_equal(_group_ids(np.array([7, 7, 9])), [7, 7, 9])
