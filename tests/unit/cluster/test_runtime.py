"""Joining a TF_CONFIG cluster: the coordinator must be the chief, with clear errors."""

from __future__ import annotations

import json
import re

import pytest

from recsys_dist.cluster.runtime import connect
from recsys_dist.cluster.server import ClusterError
from recsys_dist.config.sections import ClusterSpec

CLUSTER = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}


@pytest.mark.parametrize(
    "tf_config,message",
    [
        (None, "TF_CONFIG is not set"),
        ("{not json", "TF_CONFIG is not valid JSON"),
        (
            json.dumps(
                {"cluster": {"worker": ["127.0.0.1:2"]}, "task": {"type": "chief", "index": 0}}
            ),
            "TF_CONFIG cluster has no 'ps' job",
        ),
        (
            json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": 0}}),
            "TF_CONFIG task.type must be 'chief', got 'worker'; start workers and parameter "
            "servers "
            "with python -m recsys_dist.cluster.server",
        ),
    ],
)
def test_tf_config_mode_rejects_a_bad_or_non_chief_tf_config(
    monkeypatch, tmp_path, tf_config, message
):
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(ClusterError, match=re.escape(message)):
        with connect(ClusterSpec("tf_config", 1, 1), str(tmp_path), 1024):
            pass
