"""The TensorFlow 2.16 checkpoint fixture: where it is and the rows it is scored on.

Shared by tests/unit/checkpoint/test_checkpoint_compat.py and the script that made the
fixture, tests/fixtures/make_tf216_checkpoint.py.
"""

from __future__ import annotations

from tests.support.paths import REPO

FIXTURE = REPO / "tests" / "fixtures" / "tf216_checkpoint"


def fixed_features(config) -> dict:
    """Eight fixed rows through the config's own transform (no Parquet needed)."""
    import tensorflow as tf

    from recsys_dist.features.transforms import FeatureTransform

    dtypes = {"I1": "float32", "C1": "int64", "C21": "string", "tags": "list<int64>"}
    transform = FeatureTransform(config.features, [], dtypes, "fail")
    raw = {
        "I1": tf.constant([0.0, 1.0, 5.0, float("nan"), 30.0, 2.0, 0.5, 100.0]),
        "C1": tf.constant([1, 2, 3, 4, 5, 6, 7, 8], tf.int64),
        "C21": tf.constant(["a", "b", "c", "", "e", "f", "g", "h"]),
        "tags": tf.ragged.constant([[1], [2, 3], [], [4], [5, 6, 7], [8], [], [9]], tf.int64),
    }
    return transform.features_only(raw, tf.constant("fixture"), tf.constant(0, tf.int64))
