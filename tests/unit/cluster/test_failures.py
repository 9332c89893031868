"""Which TensorFlow errors mean a lost task, and what the resulting message says."""

from __future__ import annotations

import pytest
import tensorflow as tf

from recsys_dist.cluster.failures import cluster_failures_as_cluster_lost
from recsys_dist.errors import ClusterLost


def test_a_lost_task_is_named_from_the_error_text():
    error = tf.errors.UnavailableError(
        None,
        None,
        "2 root error(s) found.\n  (0) UNAVAILABLE: from /job:ps/replica:0/task:1"
        " while calling /job:worker/replica:0/task:0; and /job:ps/replica:0/task:1 again",
    )
    with pytest.raises(ClusterLost) as raised, cluster_failures_as_cluster_lost():
        raise error
    assert str(raised.value) == (
        "lost a task of the cluster (UnavailableError: 2 root error(s) found.; it names "
        "/job:ps/replica:0/task:1, /job:worker/replica:0/task:0); the variables on the "
        "parameter servers are gone, so training must restart from the last checkpoint"
    )


def test_other_errors_pass_unchanged():
    with (
        pytest.raises(tf.errors.InvalidArgumentError, match="bad shape"),
        cluster_failures_as_cluster_lost(),
    ):
        raise tf.errors.InvalidArgumentError(None, None, "bad shape")
    with (
        pytest.raises(ClusterLost, match=r"\(AbortedError: gone\); the variables"),
        cluster_failures_as_cluster_lost(),
    ):
        raise tf.errors.AbortedError(None, None, "gone")
