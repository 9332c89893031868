"""The launcher of a local ``multi_worker_mirrored`` run, on real processes that exit as
told (``tests/support/exiting_worker.py``): the outcome of a run, and each way a worker can
end it, on its message and exit code."""

from __future__ import annotations

import pytest

from recsys_dist.cluster.collective import CollectiveRun, WorkerFailed, _wait_all, launch
from recsys_dist.errors import ClusterLost

RUN = CollectiveRun("config.yaml", None, "model", True, None, "fail")
MODULE = "tests.support.exiting_worker"


def run(tmp_path, monkeypatch, actions: str):
    monkeypatch.setenv("EXITING_WORKER", actions)
    return launch(RUN, 2, str(tmp_path / "logs"), MODULE)


def test_a_run_returns_the_chiefs_outcome_and_echoes_its_output(tmp_path, monkeypatch, capfd):
    assert run(tmp_path, monkeypatch, "0:ok,1:ok") == {"already_complete": False, "step": 7}
    assert "worker 0: ok" in capfd.readouterr().out
    assert "worker 1: ok" in (tmp_path / "logs" / "worker-1.log").read_text()


def test_a_killed_worker_is_a_lost_cluster(tmp_path, monkeypatch):
    with pytest.raises(
        ClusterLost,
        match=r"^worker 1 of 2 \(multi_worker_mirrored\) was "
        r"killed by SIGKILL; last lines of .*worker-1\.log:"
        r"\nworker 1: kill",
    ):
        run(tmp_path, monkeypatch, "0:ok,1:kill")


def test_a_worker_that_lost_its_peers_is_a_lost_cluster(tmp_path, monkeypatch):
    with pytest.raises(
        ClusterLost,
        match=r"^worker 1 of 2 \(multi_worker_mirrored\) lost "
        "its peers",
    ):
        run(tmp_path, monkeypatch, "0:ok,1:4")


def test_an_error_on_a_worker_ends_with_its_exit_code(tmp_path, monkeypatch):
    with pytest.raises(
        WorkerFailed,
        match=r"^worker 0 of 2 \(multi_worker_mirrored\) stopped "
        "with exit code 3; its error is printed above$",
    ) as chief:
        run(tmp_path, monkeypatch, "0:3,1:ok")
    assert chief.value.exit_code == 3
    with pytest.raises(
        WorkerFailed,
        match=r"^worker 1 of 2 \(multi_worker_mirrored\) stopped "
        r"with exit code 2; last lines of .*worker-1\.log:"
        r"\n[\s\S]*worker 1: 2$",
    ) as other:
        run(tmp_path, monkeypatch, "0:ok,1:2")
    assert other.value.exit_code == 2


class _Exited:
    def __init__(self, code):
        self.code = code

    def poll(self):
        return self.code


@pytest.mark.parametrize(
    "codes,reported",
    [
        ((ClusterLost.exit_code, -9), (1, -9)),  # worker 0 lost its peer: worker 1 was killed
        ((ClusterLost.exit_code, 3), (1, 3)),
        ((3, -15), (1, -15)),
        ((ClusterLost.exit_code, ClusterLost.exit_code), (0, ClusterLost.exit_code)),
        ((0, 2), (1, 2)),
    ],
)
def test_failures_seen_together_are_told_by_their_cause(codes, reported):
    """A killed worker's peers exit within a fraction of a second: the report names the
    worker that was killed, not the first index that stopped."""
    assert _wait_all([_Exited(code) for code in codes]) == reported
