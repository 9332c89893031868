"""Synthetic behaviour histories with a known label model (``data synth --dataset behaviour``).

Each row is one impression: a user, the user's recent behaviour (``hist_item_id``, the
items clicked before, oldest first and newest last, as ``list<int64>``, and
``hist_cate_id``, each of those items' category, aligned position by position), and a
candidate item (``item_id``, ``cate_id``). The click depends on how the candidate relates
to the history, in a way that pooling the history into one vector cannot express, so the
data rewards target attention; :class:`BehaviourGenerator` specifies the label model and
what a row looks like. Day ``d`` depends only on ``(seed, d)``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from recsys_dist.data.synth_random import hashed_normal, hashed_uniform, stream_key

ITEMS, CATEGORIES = 50_000, 200
ITEMS_PER_CATEGORY = ITEMS // CATEGORIES
#: History items the label model looks at (the newest ones), as ``max_length`` would.
HISTORY_SEEN = 50
MAX_HISTORY = 80
INTERESTS = 4
NULL_HISTORY_RATE = 0.02
_CLICK_BIAS = -1.9

SCHEMA = pa.schema(
    [
        pa.field("user_id", pa.int64(), nullable=False),
        pa.field("item_id", pa.int64(), nullable=False),
        pa.field("cate_id", pa.int64(), nullable=False),
        pa.field("hist_item_id", pa.list_(pa.int64())),
        pa.field("hist_cate_id", pa.list_(pa.int64())),
        pa.field("click", pa.int64(), nullable=False),
        pa.field("oracle_logit", pa.float32(), nullable=False),
    ]
)


def category_of(items: np.ndarray) -> np.ndarray:
    """The category id of each item id."""
    return 1 + (np.asarray(items) - 1) // ITEMS_PER_CATEGORY


def recent_matches(
    hist_cates: list[np.ndarray], cates: np.ndarray, seen: int = HISTORY_SEEN
) -> tuple[np.ndarray, np.ndarray]:
    """``(m, r)`` of the label model: matches of each row's category among its newest
    ``seen`` history categories (oldest first), and whether the newest one matches."""
    m = np.array([np.count_nonzero(h[-seen:] == c) for h, c in zip(hist_cates, cates)])
    r = np.array([len(h) > 0 and h[-1] == c for h, c in zip(hist_cates, cates)])
    return m, r.astype(np.float64)


class BehaviourGenerator:
    """Samples behaviour rows and labels for one seed (the ``table`` interface of
    :class:`recsys_dist.data.synth.RowGenerator`).

    The label model::

        click_logit = b + 0.4 * z(seed, "item", item) + 0.3 * z(seed, "user", user)
                    + 2.4 * (1 - exp(-m / 2)) + 1.2 * r - 0.9

    where ``m`` is the number of items among the newest ``HISTORY_SEEN`` (50) of the history
    whose category is the candidate's, and ``r`` is 1 when the newest item's category is the
    candidate's. ``P(click) = sigmoid(click_logit)``; ``oracle_logit`` stores it. The
    saturating count rewards a model that compares each history item with the candidate
    (target attention); a mean of the history's embeddings sees only the mixture of the
    user's categories, and ``r`` rewards knowing which item is the newest.

    What a row looks like: 50,000 items in 200 categories (item ``i`` is in category
    ``1 + (i - 1) // 250``), Zipf popular within each category; users (Zipf-Mandelbrot over
    ``users``) have four interest categories each, drawn from a Zipf over categories and
    fixed by hashing the user id; a history holds 0-80 items (uniform; 2% of rows store a
    null list, an empty history), 80% of them from the user's interests and 20% from
    anywhere; the candidate comes from one of the user's interests in 40% of rows, from
    anywhere otherwise. The click rate is about 22%. Day ``d`` depends only on
    ``(seed, d)``.

    With ``history_length`` N, a history holds 0-N items (uniform) and ``m`` counts the
    matches in all of them: long histories, of which the newest 50 tell less than the
    whole.
    """

    def __init__(self, seed: int, users: int = 100_000, history_length: int | None = None):
        self._seed, self._users = seed, users
        self._longest = history_length or MAX_HISTORY
        self._seen = history_length or HISTORY_SEEN
        ranks = np.arange(1, ITEMS_PER_CATEGORY + 1, dtype=np.float64)
        self._item_cdf = np.cumsum(ranks**-1.1) / np.sum(ranks**-1.1)
        cats = np.arange(1, CATEGORIES + 1, dtype=np.float64)
        self._cate_cdf = np.cumsum(cats**-0.8) / np.sum(cats**-0.8)
        user_ranks = np.arange(1, users + 1, dtype=np.float64)
        weights = (user_ranks + 20.0) ** -1.05
        self._user_cdf = np.cumsum(weights) / np.sum(weights)

    def _draw(self, cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
        return np.minimum(np.searchsorted(cdf, u), len(cdf) - 1) + 1

    def _interests(self, users: np.ndarray) -> np.ndarray:
        """``[n, INTERESTS]`` interest categories of each user (hash-derived, fixed)."""
        columns = []
        for k in range(INTERESTS):
            u = hashed_uniform(stream_key(self._seed, "interest", k), users)
            columns.append(self._draw(self._cate_cdf, u))
        return np.stack(columns, axis=1)

    def _items_in(self, rng: np.random.Generator, categories: np.ndarray) -> np.ndarray:
        ranks = self._draw(self._item_cdf, rng.random(categories.shape))
        return (categories - 1) * ITEMS_PER_CATEGORY + ranks

    def table(self, day: int, file_index: int, n: int) -> pa.Table:
        """Generates file ``file_index`` of ``day`` with ``n`` rows as an Arrow table."""
        rng = np.random.default_rng([self._seed, 7919, day, file_index])
        users = self._draw(self._user_cdf, rng.random(n))
        interests = self._interests(users)
        lengths = rng.integers(0, self._longest + 1, n)
        lengths[rng.random(n) < NULL_HISTORY_RATE] = 0
        null_history = lengths == 0
        null_history &= rng.random(n) < 0.5  # half the empty histories are stored as null
        rows = np.repeat(np.arange(n), lengths)
        pick = interests[rows, rng.integers(0, INTERESTS, len(rows))]
        anywhere = self._draw(self._cate_cdf, rng.random(len(rows)))
        hist_cates = np.where(rng.random(len(rows)) < 0.8, pick, anywhere)
        hist_items = self._items_in(rng, hist_cates)
        cand_cates = np.where(
            rng.random(n) < 0.4,
            interests[np.arange(n), rng.integers(0, INTERESTS, n)],
            self._draw(self._cate_cdf, rng.random(n)),
        )
        items = self._items_in(rng, cand_cates)
        splits = np.concatenate([[0], np.cumsum(lengths)])
        per_row = [hist_cates[splits[i] : splits[i + 1]] for i in range(n)]
        m, r = recent_matches(per_row, cand_cates, self._seen)
        logit = (
            _CLICK_BIAS
            + 0.4 * hashed_normal(stream_key(self._seed, "item"), items)
            + 0.3 * hashed_normal(stream_key(self._seed, "user"), users)
            + 2.4 * (1.0 - np.exp(-m / 2.0))
            + 1.2 * r
            - 0.9
        ).astype(np.float32)
        click = rng.random(n) < 1.0 / (1.0 + np.exp(-logit.astype(np.float64)))
        offsets = pa.array(splits.astype(np.int32))
        mask = pa.array(null_history)
        return pa.Table.from_arrays(
            [
                pa.array(users.astype(np.int64)),
                pa.array(items.astype(np.int64)),
                pa.array(cand_cates.astype(np.int64)),
                pa.ListArray.from_arrays(offsets, pa.array(hist_items.astype(np.int64)), mask=mask),
                pa.ListArray.from_arrays(offsets, pa.array(hist_cates.astype(np.int64)), mask=mask),
                pa.array(click.astype(np.int64)),
                pa.array(logit),
            ],
            schema=SCHEMA,
        )
