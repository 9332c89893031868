"""Synthetic behaviour histories: layout, nulls, the label model, reproducibility."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from recsys_dist.data.synth_behaviour import (
    HISTORY_SEEN,
    BehaviourGenerator,
    category_of,
    recent_matches,
)
from recsys_dist.data.synth_files import synthesize


def test_rows_hold_aligned_histories_and_the_oracle_follows_the_matches(tmp_path):
    report = synthesize(
        tmp_path, days=1, rows_per_day=4000, seed=3, generator_class=BehaviourGenerator
    )
    assert report.conversion_rate is None
    table = pq.read_table(report.files[0])
    items = table["hist_item_id"].to_pylist()
    cates = table["hist_cate_id"].to_pylist()
    assert table["hist_item_id"].null_count > 0  # some histories are stored as null
    for hist_items, hist_cates in zip(items, cates):
        if hist_items is not None:
            assert category_of(np.array(hist_items, np.int64)).tolist() == hist_cates
    assert (category_of(table["item_id"].to_numpy()) == table["cate_id"].to_numpy()).all()
    # The oracle rises with the matches of the candidate's category in the newest items.
    m, r = recent_matches([np.array(c or [], np.int64) for c in cates], table["cate_id"].to_numpy())
    logit = table["oracle_logit"].to_numpy()
    assert logit[m >= 3].mean() > logit[m == 0].mean() + 1.0
    assert 0.1 < report.click_rate < 0.4
    assert max(len(c or []) for c in cates) > HISTORY_SEEN  # longer than what counts


def test_the_same_seed_writes_the_same_rows(tmp_path):
    first = BehaviourGenerator(5).table(0, 0, 500)
    assert first.equals(BehaviourGenerator(5).table(0, 0, 500))
    assert not first.equals(BehaviourGenerator(6).table(0, 0, 500))
