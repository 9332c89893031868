"""What ``recsys-dist follow`` refuses before it starts, each on its message, and its
ledger of trained partitions. The loop itself runs with real clusters in
``tests/cluster/test_follow.py``."""

from __future__ import annotations

import pytest

from recsys_dist.config import load_config
from recsys_dist.errors import ConfigError, RecsysError
from recsys_dist.retrain.follow import Ledger, check_follow_config
from tests.support.run_configs import zoo_config


@pytest.fixture
def config(tmp_path):
    return zoo_config(tmp_path, tmp_path / "data", "dcn_v2", epochs=1, mode="in_process")


def test_a_config_follow_cannot_run_is_refused_by_key(config, tmp_path):
    with pytest.raises(ConfigError) as caught:
        check_follow_config(load_config(config))
    assert "follow: missing; add follow: {root: DIR}" in str(caught.value)
    root = f"follow.root={tmp_path / 'follow'}"
    with pytest.raises(ConfigError) as caught:
        stopping = ["train.early_stopping={patience: 1}", "data.validation={dates: 2026-01-02}"]
        stopping.append("train.epochs=2")
        check_follow_config(load_config(config, [root, *stopping]))
    assert "train.early_stopping: follow trains each partition train.epochs passes" in str(
        caught.value
    )
    with pytest.raises(ConfigError, match="follow.partition"):
        load_config(config, [root, "follow.partition=minute"])
    with pytest.raises(ConfigError, match="follow.publish_every"):
        load_config(config, [root, "follow.publish_every=0"])
    assert check_follow_config(load_config(config, [root])).follow.base_every == 24


def test_the_ledger_keeps_the_order_and_refuses_another_file(tmp_path):
    ledger = Ledger(str(tmp_path))
    assert ledger.entries == []
    for name in ("dt=2026-01-01/hour=01", "dt=2026-01-01/hour=00"):
        ledger.record({"partition": name, "fingerprint": "f"})
    again = Ledger(str(tmp_path))
    assert list(again.names()) == ["dt=2026-01-01/hour=01", "dt=2026-01-01/hour=00"]
    (tmp_path / "trained.json").write_text("[1, 2]")
    with pytest.raises(RecsysError) as caught:
        Ledger(str(tmp_path))
    assert "trained.json: not a ledger of trained partitions" in str(caught.value)
