"""The history lengths of ``validate --scan`` (recsys_dist.data.history_lengths)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from recsys_dist.config import load_config
from recsys_dist.data.history_lengths import history_lengths
from recsys_dist.data.input_fn import prepare_input
from tests.support.configs import write_yaml
from tests.support.data import write_parquet

FEATURES = {
    "tables": {"item": {"rows": 100, "dim": 4}},
    "features": {
        "item": {"kind": "categorical", "dtype": "int64", "table": "item"},
        "hist": {"kind": "sequence", "table": "item", "max_length": 3, "target": "item"},
        "recent": {
            "kind": "sequence",
            "table": "item",
            "max_length": 2,
            "column": "text",
            "target": "item",
        },
    },
    "labels": {"click": {}},
}


def test_lengths_of_list_and_delimited_histories_with_empty_null_and_cut_rows(tmp_path):
    lists = [[1, 2, 3, 4, 5], [], None, [7], [1, 2, 3]] * 20
    texts = ["1|2|3", "", None, "4", "5|6"] * 20
    write_parquet(
        tmp_path / "data" / "part-0.parquet",
        pa.table(
            {
                "item": pa.array(np.arange(100), pa.int64()),
                "hist": pa.array(lists, pa.list_(pa.int64())),
                "text": pa.array(texts, pa.string()),
                "click": pa.array(np.arange(100) % 2, pa.int64()),
            }
        ),
        row_group_size=30,
    )
    write_yaml(tmp_path / "features.yaml", FEATURES)
    config = write_yaml(
        tmp_path / "model.yaml",
        {"features": "features.yaml", "model": {"name": "dcn_v2"}, "input": {"shuffle": False}},
    )
    pipeline = prepare_input(load_config(config).with_data_path(str(tmp_path / "data")), None, 1)
    hist, recent = history_lengths(pipeline)
    assert sorted(hist.lengths.tolist()) == sorted([5, 0, 0, 1, 3] * 20)
    assert sorted(recent.lengths.tolist()) == sorted([3, 0, 0, 1, 2] * 20)
    assert hist.line() == (
        "history  hist: length median 1, mean 1.8, p90 5, max 5 over 100 "
        "rows; 40.0% empty, 20.0% longer than max_length 3 (the newest 3 "
        "are read)"
    )
    assert "20.0% longer than max_length 2" in recent.line()
