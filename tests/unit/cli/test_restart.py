"""How ``train`` starts itself again after a lost task (``commands.restart_after``): the
lost-task error is kept, with everything its frames hold, until the process is replaced.
Freeing the cluster's resources calls the tasks that own them
(``EagerResourceDeleter.__del__``), and a call to a lost task whose connection was left
dead waits for ever."""

from __future__ import annotations

import gc
import types

import pytest

from recsys_dist import commands
from recsys_dist.errors import ClusterLost


@pytest.fixture
def no_wait(monkeypatch):
    monkeypatch.setattr(commands.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(commands, "_lost", [])
    monkeypatch.delenv("RECSYS_DIST_RESTART", raising=False)
    yield
    gc.enable()


def _config(max_restarts: int):
    return types.SimpleNamespace(train=types.SimpleNamespace(max_restarts=max_restarts))


class Held:
    """Stands for a cluster resource: it records being freed."""

    freed = False

    def __del__(self):
        Held.freed = True


def test_a_restart_keeps_the_error_and_what_its_frames_hold(no_wait, capsys):
    def train_run():
        resource = Held()  # noqa: F841  held by this frame, hence by the traceback
        raise ClusterLost("lost ps 0")

    Held.freed = False
    try:
        train_run()
    except ClusterLost as exc:
        assert commands.restart_after(exc, _config(3)) == commands.RESTART_EXIT
    gc.collect()
    assert not Held.freed and not gc.isenabled()
    assert capsys.readouterr().out.startswith(
        "restart  lost ps 0; starting the cluster again and resuming from the last "
        "checkpoint (restart 1 of at most 3)"
    )


def test_past_max_restarts_the_error_is_raised_and_still_kept(no_wait, monkeypatch):
    monkeypatch.setenv("RECSYS_DIST_RESTART", "2")
    lost = ClusterLost("lost ps 0")
    with pytest.raises(ClusterLost, match=r"gave up after train.max_restarts = 2 restarts"):
        commands.restart_after(lost, _config(2))
    assert commands._lost == [lost]
