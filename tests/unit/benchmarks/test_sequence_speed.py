"""The rows ``benchmarks/sequence_speed.py`` hands its PyTorch peer are the training rows
our input reads: every row once, each history its newest ``max_length`` ids newest first,
ids of one table numbered alike wherever they appear."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from recsys_dist.config import load_config
from recsys_dist.data.synth_behaviour import BehaviourGenerator
from recsys_dist.data.synth_files import synthesize

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _speed(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import sequence_speed

    return sequence_speed


def test_histories_are_the_newest_ids_newest_first_padded_with_zeros(monkeypatch):
    speed = _speed(monkeypatch)
    lists = pa.chunked_array([pa.array([[1, 2, 3, 4], [], [5]]), pa.array([[6, 7]])])
    np.testing.assert_array_equal(
        speed.newest_first(lists, 3, newest_last=True),
        [[4, 3, 2], [0, 0, 0], [5, 0, 0], [7, 6, 0]],
    )
    np.testing.assert_array_equal(
        speed.newest_first(lists, 3, newest_last=False),
        [[1, 2, 3], [0, 0, 0], [5, 0, 0], [6, 7, 0]],
    )


def test_the_peer_rows_are_the_training_split_with_shared_table_numbering(tmp_path, monkeypatch):
    speed = _speed(monkeypatch)
    data = tmp_path / "data"
    synthesize(data, days=2, rows_per_day=300, seed=1, generator_class=BehaviourGenerator)
    config = load_config(
        str(ROOT / "configs" / "amazon_din.yaml"),
        [
            f"data.path={data}",
            f"features={ROOT / 'features' / 'behaviour_synth.yaml'}",
            "data.train={dates: 2026-01-01..2026-01-02}",
            "data.eval={dates: 2026-01-02}",
            "data.validation=null",
        ],
    )
    files = speed.training_files(config, str(data))
    shape = speed.export_rows(config, files, tmp_path / "rows.npz")
    rows = np.load(tmp_path / "rows.npz")
    table = pa.concat_tables(pq.read_table(f) for f in files)
    assert shape["rows"] == table.num_rows == 600
    assert json.loads(str(rows["spec"]))["history"][0][:2] == ["hist_item_id", "item_id"]
    # one numbering per table: a history's item reads the row its candidate reads
    items = table.column("item_id").to_numpy()
    last = [h[-1] if h else None for h in table.column("hist_item_id").to_pylist()]
    for i, newest in enumerate(last):
        if newest is not None and newest in items:
            j = int(np.flatnonzero(items == newest)[0])
            assert rows["hist_item_id"][i, 0] == rows["item_id"][j]
    lengths = (rows["hist_item_id"] > 0).sum(axis=1)
    expected = [min(len(h or []), 50) for h in table.column("hist_item_id").to_pylist()]
    np.testing.assert_array_equal(lengths, expected)
    np.testing.assert_array_equal(rows["label"], table.column("click").to_numpy())


def test_an_unknown_model_or_a_missing_torch_environment_is_named(monkeypatch, tmp_path):
    speed = _speed(monkeypatch)
    monkeypatch.setattr("sys.argv", ["sequence_speed.py", "--models", "din,dien"])
    with pytest.raises(SystemExit, match=r"--models: \['dien'\] unknown; choose from pooled"):
        speed.main()
    missing = tmp_path / "no-venv" / "bin" / "python"
    monkeypatch.setattr("sys.argv", ["sequence_speed.py", "--torch-python", str(missing)])
    with pytest.raises(SystemExit, match=r"no-venv/bin/python not found: run `make bench-torch`"):
        speed.main()


def test_a_config_with_two_histories_is_refused_naming_them(tmp_path, monkeypatch):
    speed = _speed(monkeypatch)
    features = yaml.safe_load((ROOT / "features" / "behaviour_synth.yaml").read_text())
    features["features"]["hist_cate_id"].pop("side_of")  # a second history of its own
    (tmp_path / "features.yaml").write_text(yaml.safe_dump(features))
    config = load_config(
        str(ROOT / "configs" / "amazon_din.yaml"),
        [f"data.path={tmp_path}", f"features={tmp_path / 'features.yaml'}"],
    )
    with pytest.raises(SystemExit, match=r"the peer reads one history; the config has "):
        speed.export_rows(config, [], tmp_path / "rows.npz")
