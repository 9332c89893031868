"""The feature files the sequence benchmarks write for their sides
(``long_history.py``'s ``sim``, ``sequence_quality.py``'s ``din_gaps``) load as feature
configs and say what the sides claim; the benchmarks' refusals name the option."""

from __future__ import annotations

import pathlib

import pytest

from recsys_dist.config.model_inputs import history_problem
from recsys_dist.features.config import load_feature_config

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture
def benchmarks(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import long_history
    import sequence_quality

    return long_history, sequence_quality


def test_sim_reads_the_newest_50_and_the_same_columns_again_up_to_the_long_length(
    benchmarks, tmp_path
):
    long_history, _ = benchmarks
    path = long_history.with_long_history(long_history.ML1M_FEATURES, tmp_path, 1000)
    config = load_feature_config(path)
    for name in ("hist_item_id", "hist_genre_id", "hist_rating_id"):
        short, long = config.features[name], config.features[f"long_{name}"]
        assert (short.max_length, long.max_length) == (50, 1000)
        assert config.column_of(long) == config.column_of(short) == name
        assert long.target == short.target
    assert config.features["long_hist_genre_id"].side_of == "long_hist_item_id"
    groups = config.sequence_groups(list(config.features))
    assert [g.main for g in groups] == ["hist_item_id", "long_hist_item_id"]
    assert history_problem("din", config, list(config.features)) is None
    settings = long_history.side_settings("sim", tmp_path, 1000, "ml1m")
    assert "model.params.search_by=long_hist_genre_id" in settings


def test_din_gaps_puts_the_gap_beside_each_history_item(benchmarks, tmp_path):
    _, sequence_quality = benchmarks
    config = load_feature_config(
        sequence_quality.with_time_gaps(sequence_quality.ML1M_FEATURES, tmp_path)
    )
    gap = config.features["hist_gap_id"]
    assert (gap.side_of, gap.target, gap.max_length) == ("hist_item_id", "cand_gap_id", 50)
    assert config.tables["gap"].dim == config.tables["item"].dim
    assert history_problem("din", config, list(config.features)) is None


def test_the_benchmarks_refuse_what_their_data_cannot_give(benchmarks, tmp_path):
    _, sequence_quality = benchmarks
    with pytest.raises(SystemExit, match="--data ml1m: give --ml1m DIR .* or --raw RAW"):
        sequence_quality.prepare_data("ml1m", tmp_path, None, None, 0)


def test_din_gaps_is_refused_on_data_without_time_gaps(benchmarks, monkeypatch):
    _, sequence_quality = benchmarks
    monkeypatch.setattr(
        "sys.argv", ["sequence_quality.py", "--data", "amazon", "--sides", "din_gaps"]
    )
    with pytest.raises(SystemExit, match="--sides din_gaps: only --data ml1m has the time gaps"):
        sequence_quality.main()
