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


def test_long_histories_count_every_match_in_the_oracle():
    from recsys_dist.data.synth_behaviour import _CLICK_BIAS
    from recsys_dist.data.synth_random import hashed_normal, stream_key

    table = BehaviourGenerator(3, users=1000, history_length=1000).table(0, 0, 1000)
    cates = [np.array(c or [], np.int64) for c in table["hist_cate_id"].to_pylist()]
    assert 900 < max(len(c) for c in cates) <= 1000
    candidate = table["cate_id"].to_numpy()
    m, r = recent_matches(cates, candidate, seen=1000)
    expected = (
        _CLICK_BIAS
        + 0.4 * hashed_normal(stream_key(3, "item"), table["item_id"].to_numpy())
        + 0.3 * hashed_normal(stream_key(3, "user"), table["user_id"].to_numpy())
        + 2.4 * (1.0 - np.exp(-m / 2.0))
        + 1.2 * r
        - 0.9
    ).astype(np.float32)
    # the generator's own float64 sum, stored as float32: equal
    np.testing.assert_array_equal(table["oracle_logit"].to_numpy(), expected)
    newest_only, _ = recent_matches(cates, candidate)  # 50 newest: fewer matches
    assert (newest_only < m).mean() > 0.5
