"""Joining a TF_CONFIG cluster: the coordinator must be the chief, with clear errors; the
replicas of ``mirrored`` set up before a command's first TensorFlow op."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from recsys_dist.cluster.runtime import connect
from recsys_dist.cluster.server import ClusterError
from recsys_dist.config.sections import ClusterSpec
from tests.support.data import free_port
from tests.support.paths import REPO

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


class _Coordinator:
    """A coordinator whose closures finish after ``polls`` calls of ``done`` (never: None)."""

    def __init__(self, polls):
        self.polls, self.joined = polls, False

    def join(self):
        self.joined = True

    def done(self):
        if self.polls is None:
            return False
        self.polls -= 1
        return self.polls <= 0


class _Watch:
    def __init__(self, away):
        self.away = away

    def unreachable_within(self, seconds):
        return [("worker", i) for i in self.away]


def _runtime(coordinator, away):
    from recsys_dist.cluster.runtime import Runtime

    return Runtime(None, coordinator, 2, 2, mode="tf_config", watch=_Watch(away))


def test_join_waits_for_the_closures_as_the_coordinator_does_when_no_worker_was_away():
    coordinator = _Coordinator(polls=None)
    _runtime(coordinator, away=[]).join(timeout=0.0)
    assert coordinator.joined


def test_join_waits_for_work_out_on_a_worker_that_was_away_while_it_comes_back():
    coordinator = _Coordinator(polls=3)
    _runtime(coordinator, away=[1]).join(timeout=5.0)
    assert coordinator.polls == 0 and not coordinator.joined


def test_join_gives_up_on_work_sent_to_a_worker_before_its_link_went_down(capfd, caplog):
    from recsys_dist.errors import ClusterLost

    with pytest.raises(ClusterLost) as raised:
        _runtime(_Coordinator(polls=None), away=[1]).join(timeout=0.3)
    assert str(raised.value) == (
        "work sent to worker 1 before its link went down has not come back 0.3 s after every "
        "worker answered again"
    )
    # the threads' stacks, for a bug report, this test's among them
    assert "the coordinator's threads, for a bug report" in caplog.text
    stacks = capfd.readouterr().err
    assert "Current thread" in stacks and "in test_join_gives_up_on_work" in stacks, stacks


#: A command's start with a string vocabulary: planning the input fingerprints the
#: vocabulary, the first TensorFlow op of the process, which fixes its devices and its
#: collective ops; ``prepare_devices`` must have set them up before it.
AFTER_A_VOCABULARY = """
import sys

import recsys_dist
from recsys_dist.cluster.runtime import connect, prepare_devices
from recsys_dist.features.kinds.vocabulary import Vocabulary
from recsys_dist.config.sections import ClusterSpec

cluster = ClusterSpec("local", int(sys.argv[2]), 1, strategy=sys.argv[1])
prepare_devices(cluster)
Vocabulary.build(["a", "b"], 1, strings=True)
with connect(cluster, "unused", 1024) as runtime:
    print("replicas", runtime.strategy.num_replicas_in_sync)
"""


@pytest.mark.parametrize("strategy,replicas", [("mirrored", 2), ("multi_worker_mirrored", 1)])
def test_the_strategy_is_set_up_when_the_input_plan_ran_an_op_first(strategy, replicas):
    """``train`` and ``evaluate`` call ``prepare_devices`` before they plan their input.
    Without it, a string vocabulary ended a ``mirrored`` run with "mirrored needs 2 CPU
    devices but TensorFlow started in this process with 1", and each worker of a
    ``multi_worker_mirrored`` run with "Collective ops must be configured at program
    startup" (here one worker, of a TF_CONFIG cluster of one)."""
    tf_config = {
        "cluster": {"worker": [f"127.0.0.1:{free_port()}"]},
        "task": {"type": "worker", "index": 0},
    }
    done = subprocess.run(
        [sys.executable, "-c", AFTER_A_VOCABULARY, strategy, str(replicas)],
        cwd=REPO,
        env=dict(os.environ, TF_CONFIG=json.dumps(tf_config)),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["replicas", str(replicas)]


class _StartWatch:
    """Workers 0 and 2 of three in the run; worker 1 missing at the start, then back."""

    def __init__(self):
        self.down = {("worker", 1)}
        self.answered = set()

    def unreachable(self):
        return sorted(self.down)

    def unreachable_within(self, seconds):
        return sorted(self.down)

    def tasks(self):
        return [("worker", 0), ("worker", 1), ("worker", 2), ("ps", 0)]

    def answered_since(self, job, index, since):
        return (job, index) in self.answered

    def workers_answer(self, indices=None):
        return not any(i in (indices or (0, 1, 2)) for _, i in self.down)


def test_a_worker_missing_at_the_start_holds_nothing_and_is_taken_in_when_it_answers():
    """A run started without worker 1 checkpoints and syncs as its own workers allow (the
    missing one is not waited for), names itself by TF_CONFIG's indices, and says when the
    missing worker answers."""
    from recsys_dist.cluster.runtime import Runtime

    watch = _StartWatch()
    runtime = Runtime(None, None, 2, 1, mode="tf_config", watch=watch, members=(0, 2))
    assert not runtime.worker_unreachable() and runtime.workers_answer()
    assert runtime.workers_unreachable_within(60) == []
    assert runtime.joining() == []
    assert runtime.describe() == (
        "2 workers + 1 ps (tf_config; workers 0, 2 of TF_CONFIG until the others answer)"
    )
    watch.down.clear()
    watch.answered.add(("worker", 1))
    assert runtime.joining() == [1]
    watch.down.add(("worker", 2))  # one of its own workers away: that one holds saves
    assert runtime.worker_unreachable() and not runtime.workers_answer()
    every = Runtime(None, None, 3, 1, mode="tf_config", watch=watch)
    assert every.joining() == [] and every.worker_unreachable()
