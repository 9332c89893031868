"""Converts MovieLens-1M ratings and movies into a behaviour set with long histories.

The raw folder holds ``ratings.dat`` (or ``ratings.dat.gz``; ``UserID::MovieID::Rating::
Timestamp``, as for ``ml1m_subset``) and ``movies.dat`` (``MovieID::Title::Genres``, genres
joined by ``|``). Every rating is a row: the candidate is the rated movie, ``click`` is 1
when the rating is 4 or 5, and the history is the user's movies rated before it (ratings
in time order, ties in file order), the newest ``--max-history`` (default 1,000), newest
last, with each one's genre, its rating and how long before the candidate it was rated.

Columns: ``user_id``, ``item_id``, ``genre_id`` (the movie's first genre, 1 to 18),
``cand_gap_id`` and ``cand_rating_id`` (always 0: the candidate is rated now, its rating
unknown), ``hist_item_id``, ``hist_genre_id``, ``hist_rating_id`` (1 to 5) and
``hist_gap_id`` (list<int64>, one entry per history item; the gap bucket is 1 +
floor(log2(1 + hours between the two ratings))), ``hist_length``, ``rating``,
``timestamp``, ``click``; ``rating`` and ``timestamp`` are never features.

Split as ``ml1m_subset``: every row in time order, cut into 10 equal slices, days 1 to 8
train, day 9 validation, day 10 test (benchmarks/datasets/common.py).

Usage::

    python -m benchmarks.datasets.ml1m_sequences --raw RAW_DIR --out OUT_DIR
        [--max-history 1000] [--overwrite]
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pyarrow as pa

from benchmarks.datasets import common, ml1m_subset

MOVIE_FILES = ["movies.dat"]
MOVIE_COLUMNS = ("MovieID", "Title", "Genres")
MOVIES = "MovieLens movies, one MovieID::Title::Genres per line"
GENRES = (
    "Action Adventure Animation Children's Comedy Crime Documentary Drama Fantasy "
    "Film-Noir Horror Musical Mystery Romance Sci-Fi Thriller War Western"
).split()
DEFAULT_MAX_HISTORY = 1000


def movie_genres(raw: pathlib.Path) -> dict[int, int]:
    """MovieID -> its first genre's number (1 to 18, :data:`GENRES` order)."""
    path = common.existing_file(raw, MOVIE_FILES, MOVIES)
    fields = common.read_fields(path, sep="::", names=MOVIE_COLUMNS, header=False, what=MOVIES)
    ids = fields.ints("MovieID", 1)
    genres = {}
    for number, (movie, text) in enumerate(zip(ids, fields.columns["Genres"]), fields.first_line):
        first = text.strip().split("|")[0]
        if first not in GENRES:
            common.fail(path, f"line {number}: unknown genre {first!r}; expected one of {GENRES}")
        genres[int(movie)] = GENRES.index(first) + 1
    return genres


def gap_bucket(seconds: np.ndarray) -> np.ndarray:
    """1 + floor(log2(1 + hours)) of non-negative whole ``seconds``, in integers: the bit
    length of floor(1 + hours), which ``frexp`` gives exactly (no logarithm's rounding)."""
    whole_hours_plus_one = (np.asarray(seconds, np.int64) + 3600) // 3600
    return np.frexp(whole_hours_plus_one)[1].astype(np.int64)


def histories(
    user: np.ndarray,
    item: np.ndarray,
    genre: np.ndarray,
    rating: np.ndarray,
    time: np.ndarray,
    longest: int,
) -> dict[str, pa.Array]:
    """Each row's history (the user's earlier rows in time order, ties in row order; the
    newest ``longest``, newest last) as list arrays of items, genres, ratings and gap
    buckets."""
    order = np.lexsort((np.arange(len(user)), time, user))  # by user, time, then row
    starts = np.flatnonzero(np.r_[True, user[order][1:] != user[order][:-1]])
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    lengths = np.empty(len(user), np.int64)
    lengths[order] = np.minimum(rank, longest)
    offsets = np.r_[0, np.cumsum(lengths)]
    position = np.empty(len(user), np.int64)
    position[order] = np.arange(len(order))
    # row r's history: the rows order[position[r] - lengths[r] : position[r]]
    source = np.repeat(position - lengths, lengths) + (
        np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths)
    )
    earlier = order[source]
    gaps = gap_bucket(np.repeat(time, lengths) - time[earlier])
    return {
        name: pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
        for name, values in (
            ("hist_item_id", item[earlier]),
            ("hist_genre_id", genre[earlier]),
            ("hist_rating_id", rating[earlier]),
            ("hist_gap_id", gaps),
        )
    } | {"hist_length": lengths}


def load(raw: pathlib.Path, longest: int) -> dict:
    """The columns written, from ``raw/ratings.dat`` and ``raw/movies.dat``."""
    ratings = ml1m_subset.load(raw)
    genres = movie_genres(raw)
    unknown = sorted(set(ratings["item_id"].tolist()) - set(genres))
    if unknown:
        common.fail(raw / MOVIE_FILES[0], f"no line for rated MovieID(s) {unknown[:10]}")
    genre = np.array([genres[int(m)] for m in ratings["item_id"]], np.int64)
    built = histories(
        ratings["user_id"],
        ratings["item_id"],
        genre,
        ratings["rating"],
        ratings["timestamp"],
        longest,
    )
    return {
        "user_id": ratings["user_id"],
        "item_id": ratings["item_id"],
        "genre_id": genre,
        "cand_gap_id": np.zeros(len(genre), np.int64),
        "cand_rating_id": np.zeros(len(genre), np.int64),
        **built,
        "rating": ratings["rating"],
        "timestamp": ratings["timestamp"],
        ml1m_subset.LABEL: ratings[ml1m_subset.LABEL],
    }


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def main(argv: list[str] | None = None) -> int:
    def more(parser):
        parser.add_argument(
            "--max-history",
            type=positive,
            default=DEFAULT_MAX_HISTORY,
            help="the newest items kept of each history (default %(default)s)",
        )

    args = common.parse_args(__doc__, argv, more)
    columns = load(args.raw, args.max_history)
    lengths = columns["hist_length"]
    print(
        f"history  {int(lengths.sum()):,} items; per row median {int(np.median(lengths))}, "
        f"mean {lengths.mean():.0f}, p90 {int(np.percentile(lengths, 90))}, max {lengths.max()}"
    )
    return common.finish(args, columns, common.ordered_slices(columns["timestamp"]), "click")


if __name__ == "__main__":
    sys.exit(main())
