"""The rows a split with ``hash_share`` keeps (``data/hashed_rows.py``): the coordinator's
count and the workers' in-graph filter agree row by row, the share is the share of the
hash space, files keep their rows when the data moves, and two splits of one glob with
shares that do not overlap read every row once between them, through the dispatcher and
in every item's count."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist.cluster.mirrored import SynchronousCoordinator
from recsys_dist.cluster.read_check import read_split
from recsys_dist.config import load_config
from recsys_dist.data import hashed_rows
from recsys_dist.data.input_fn import prepare_input
from recsys_dist.data.read_pass import check_exactly_once
from tests.support.configs import small_config
from tests.support.data import small_table, write_parquet


def test_the_count_and_the_in_graph_filter_agree_row_by_row():
    key = hashed_rows.file_keys(("/data/dt=2026-01-01/part-0.parquet",))[0]
    rows = np.arange(3, 50_000, 7, dtype=np.int64)
    share = (0.25, 0.6)
    in_graph = hashed_rows.kept_in_graph(tf.constant(key, tf.uint64), tf.constant(rows), share)
    kept = hashed_rows.kept(key, rows, share)
    np.testing.assert_array_equal(in_graph.numpy(), kept)
    assert hashed_rows.kept_count(key, 3, 50_000, 7, share) == kept.sum()
    # a share of the hash space: 0.35 of 7,143 rows, within four binomial deviations
    n, p = len(rows), 0.35
    assert abs(kept.sum() - n * p) < 4 * np.sqrt(n * p * (1 - p))


def test_files_keep_their_rows_wherever_the_data_lives():
    local = ("/srv/data/dt=2026-01-01/a.parquet", "/srv/data/dt=2026-01-02/a.parquet")
    moved = ("s3://bucket/copy/dt=2026-01-01/a.parquet", "s3://bucket/copy/dt=2026-01-02/a.parquet")
    keys = hashed_rows.file_keys(local)
    assert keys == hashed_rows.file_keys(moved)
    assert keys[0] != keys[1]  # same name, other partition: other rows


@pytest.mark.parametrize("steps_per_call", [1, 100])
def test_two_splits_of_one_glob_read_every_row_once_between_them(tmp_path, steps_per_call):
    for i, rows in enumerate([150, 70]):
        write_parquet(tmp_path / "data" / f"part-{i}.parquet", small_table(rows, seed=i), 40)
    path = small_config(tmp_path, train={"glob": "part-*.parquet"})
    config = load_config(path, [f"train.steps_per_call={steps_per_call}"])
    assert config.data.validation_carved
    read = {}
    for split in ("train", "validation"):
        pipeline = prepare_input(config, split, 1)
        result = read_split(
            pipeline,
            SynchronousCoordinator(),
            1,
            steps_per_call,
            scoring=split == "validation",
            collect_rows=True,
        )
        check_exactly_once(pipeline.plan, result.row_ids, pipeline.hash_share)
        read[split] = set(result.row_ids.tolist())
        assert result.rows == len(read[split]) == pipeline.total_rows  # each item's count
        assert pipeline.describe_rows() == (
            f"{len(read[split]):,} of the files' 220 rows (hash_share "
            f"[{', '.join(f'{x:g}' for x in pipeline.hash_share)}])"
        )
    assert not read["train"] & read["validation"]
    assert len(read["train"]) + len(read["validation"]) == 220
    assert 0 < len(read["validation"]) < 60  # about a tenth
