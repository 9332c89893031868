"""Distinct table rows per training batch, read through the workers' input function."""

from __future__ import annotations

import pyarrow as pa

from recsys_dist.config import load_config
from recsys_dist.data.batch_rows import distinct_rows_per_batch
from recsys_dist.data.input_fn import prepare_input
from tests.support.data import small_table, write_parquet


def test_distinct_rows_per_batch_count_every_feature_of_a_table_together(small_config, tmp_path):
    config = load_config(small_config())  # batches of 32 in file order
    n = 64
    # batch 1: ad 7 and site s1 (2 rows of table ads), tags 3 and 4 (2 rows of tag);
    # batch 2: ads 1..5 and s1 (6 rows), no tags (padding is never looked up)
    write_parquet(
        tmp_path / "data" / "part.parquet",
        small_table(
            n,
            ad=pa.array([7] * 32 + [i % 5 + 1 for i in range(32)], pa.int64()),
            site=pa.array(["s1"] * n),
            tags=pa.array(["3|4"] * 32 + [""] * 32),
        ),
    )
    distinct, batches = distinct_rows_per_batch(prepare_input(config, None, 1), config.features, 10)
    assert batches == 2
    assert distinct == {"ads": (2 + 6) / 2, "tag": (2 + 0) / 2}
    assert distinct_rows_per_batch(prepare_input(config, None, 1), config.features, 1) == (
        {"ads": 2.0, "tag": 2.0},
        1,
    )
