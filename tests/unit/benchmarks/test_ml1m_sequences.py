"""The MovieLens-1M behaviour converter (``benchmarks/datasets/ml1m_sequences.py``) on a few
dozen ratings made up here: each row's history is the user's earlier ratings in time
order (ties in file order), newest last and cut to ``--max-history``, with each movie's
first genre and the gap bucket; the columns its feature config reads; bad input refused
with a message naming the file."""

from __future__ import annotations

import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.datasets import ml1m_sequences
from recsys_dist.features.config import load_feature_config
from tests.support.paths import REPO

GENRES = ["Animation|Children's|Comedy", "Action|Crime|Thriller", "Comedy|Romance", "Drama"]
MOVIES = [f"{m}::Movie {m} (1995)::{GENRES[m % 4]}" for m in range(1, 41)]
#: movie -> its first genre's place in ml1m_sequences.GENRES, from 1
GENRE = {m: [3, 1, 5, 8][m % 4] for m in range(1, 41)}


def write_raw(raw: pathlib.Path, ratings: list[tuple[int, int, int, int]], movies=MOVIES):
    raw.mkdir(parents=True, exist_ok=True)
    (raw / "ratings.dat").write_text("".join("::".join(map(str, r)) + "\n" for r in ratings))
    (raw / "movies.dat").write_text("".join(line + "\n" for line in movies))


def made_up_ratings(rows: int = 40, seed: int = 0) -> list[tuple[int, int, int, int]]:
    """Grouped by user as the MovieLens file is, times repeated within a user; a user
    rates a movie once."""
    rng = np.random.default_rng(seed)
    users = np.sort(rng.integers(1, 5, rows))
    movies = rng.permutation(40)[:rows] + 1
    times = 978_300_000 + 1800 * rng.integers(0, 30, rows)
    return [
        (int(u), int(m), int(rng.integers(1, 6)), int(t)) for u, m, t in zip(users, movies, times)
    ]


def test_each_row_holds_the_users_earlier_ratings_newest_last(tmp_path):
    raw = made_up_ratings()
    write_raw(tmp_path / "raw", raw)
    out = tmp_path / "out"
    argv = ["--raw", str(tmp_path / "raw"), "--out", str(out), "--max-history", "3"]
    assert ml1m_sequences.main(argv) == 0
    days = sorted(out.glob("dt=*/part-00000.parquet"))
    assert len(days) == 10
    table = pa.concat_tables(pq.read_table(p) for p in days)
    assert table.num_rows == len(raw)
    for row in table.to_pylist():
        user, time = row["user_id"], row["timestamp"]
        mine = [(t, i, m) for i, (u, m, _, t) in enumerate(raw) if u == user]
        here = next(
            k for k, (t, _, m) in enumerate(sorted(mine)) if m == row["item_id"] and t == time
        )
        earlier = sorted(mine)[max(0, here - 3) : here]  # time order, ties in file order
        assert row["hist_item_id"] == [m for _, _, m in earlier]
        assert row["hist_genre_id"] == [GENRE[m] for _, _, m in earlier]
        assert row["hist_rating_id"] == [raw[i][2] for _, i, _ in earlier]
        # 1 + floor(log2(1 + hours)) is the bit length of floor(1 + hours)
        assert row["hist_gap_id"] == [((time - t) // 3600 + 1).bit_length() for t, _, _ in earlier]
        assert row["hist_length"] == len(earlier)
        assert row["cand_gap_id"] == row["cand_rating_id"] == 0
        assert row["genre_id"] == GENRE[row["item_id"]]
        assert row["click"] == int(row["rating"] >= 4)
    config = load_feature_config(REPO / "features" / "ml1m_sequences.yaml")
    sequences = [s for n, s in config.features.items() if n.startswith("hist_")]
    for spec in [*config.features.values(), *config.labels.values()]:
        expected = pa.list_(pa.int64()) if spec in sequences else pa.int64()
        assert table.schema.field(config.column_of(spec)).type == expected


def test_the_gap_buckets_change_exactly_where_1_plus_hours_reaches_a_power_of_two():
    seconds = np.array([0, 3599, 3600, 3 * 3600 - 1, 3 * 3600, 7 * 3600, 1000 * 3600])
    np.testing.assert_array_equal(ml1m_sequences.gap_bucket(seconds), [1, 1, 2, 2, 3, 4, 10])


@pytest.mark.parametrize(
    "movies, expected",
    [
        ([*MOVIES[:3], "4::Nixon (1995)::Biopic"], "line 4: unknown genre 'Biopic'"),
        (MOVIES[:3], "no line for rated MovieID(s) [4]"),
        ([*MOVIES[:3], "4::Nixon (1995)"], "line 4: expected 3 fields separated by '::'"),
        ([*MOVIES[:3], "4::Nixon (1995)::Drama::x"], "line 4: expected 3 fields"),
    ],
)
def test_bad_movies_are_refused_naming_the_file(tmp_path, movies, expected):
    write_raw(tmp_path / "raw", [(1, 4, 5, 978300000), (1, 1, 3, 978300001)], movies)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as failure:
        ml1m_sequences.main(["--raw", str(tmp_path / "raw"), "--out", str(out)])
    message = str(failure.value.code)
    assert message.startswith(f"error: {tmp_path / 'raw' / 'movies.dat'}"), message
    assert expected in message and not out.exists()


def test_a_max_history_below_one_is_refused(tmp_path, capsys):
    write_raw(tmp_path / "raw", made_up_ratings())
    with pytest.raises(SystemExit):
        ml1m_sequences.main(
            ["--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "o"), "--max-history", "0"]
        )
    assert "--max-history: invalid positive value: '0'" in capsys.readouterr().err
