"""Reproducible Criteo-like synthetic CTR data with a known ("oracle") label model.

:func:`synthesize` writes ``out_dir/dt=YYYY-MM-DD/part-NNNNN.parquet`` files whose
columns look like the Criteo display-ads data (13 heavy-tailed numeric fields with NaN
for missing, 26 Zipf-distributed categorical fields) plus a user id, two multi-valued
string features and two labels. The labels are sampled from a logistic model whose
logit is stored next to each row, so the best AUC any model can reach on the data is
known exactly (score the rows with ``oracle_logit``).

Every random quantity comes either from ``np.random.default_rng([seed, day, file])``
(what a row looks like) or from a stateless 64-bit hash of ``(seed, name, id, ...)``
(what an id *means*), so day ``d`` depends only on ``(seed, d)`` and ids first seen on
later days get effects without a stored table. :class:`RowGenerator` specifies the label
model and the ids' drift; docs/data.md#synthetic-data describes the columns.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recsys_dist.data.synth_columns import (
    MISSING_HEX,
    distinct_per_row,
    hex_strings,
    join_lists,
    list_column,
)
from recsys_dist.data.synth_effects import (
    CLICK_FIELD_SIGMAS,
    CLICK_PAIR_SIGMAS,
    CVR_FIELD_SIGMAS,
    CVR_USER_SIGMA,
    NO_TAG_EFFECT,
    NUMERIC_EFFECTS,
    TAG_SIGMA,
    TOPIC_SIGMA,
    USER_SIGMA,
    affinity,
    effect_scale,
    sigmoid,
    softplus,
    solve_bias,
)
from recsys_dist.data.synth_random import (
    hash64,
    hashed_normal,
    stream_key,
    unit_interval,
)
from recsys_dist.data.synth_schema import (
    CARDINALITIES,
    CATEGORICAL_FIELDS,
    CATEGORICAL_MISSING_RATES,
    NUMERIC_FIELDS,
    NUMERIC_MISSING_RATES,
    SCHEMA,
    STRING_ID_FIELDS,
)

_NUMERIC_LOGNORMAL = dict(
    zip(
        NUMERIC_FIELDS,
        [
            (0.5, 1.3),
            (1.5, 2.0),
            (2.0, 1.5),
            (1.5, 1.0),
            (7.5, 2.0),
            (3.5, 1.8),
            (1.5, 1.5),
            (2.3, 1.0),
            (3.5, 1.5),
            (-0.5, 0.8),
            (0.5, 1.2),
            (-1.0, 1.5),
            (1.5, 1.2),
        ],
    )
)
_CONTINUOUS_FIELDS = {"I12"}
_I2_NEGATIVE_RATE = 0.03

# Zipf exponents between 1.05 and 1.2, spread over the fields.
_ZIPF_EXPONENTS = {f: 1.05 + 0.15 * ((7 * i) % 26) / 25 for i, f in enumerate(CATEGORICAL_FIELDS)}

_TARGET_CLICK_RATE = 0.25
_TARGET_CONVERSION_RATE = 0.035
_PILOT_ROWS = 20_000

#: Users by default; ``users`` (``data synth --users``) draws from a larger or smaller
#: pool, e.g. a long tail of ids that collide in a hashed table.
USERS = 200_000
_USER_ZIPF, _USER_OFFSET = 0.85, 20.0
_TAGS, _TAG_ZIPF = 5_000, 1.0
_TAG_COUNT_PROBS = [0.06, 0.26, 0.27, 0.19, 0.11, 0.06, 0.03, 0.015, 0.005]
_TOPICS, _TOPIC_ZIPF = 200, 0.9
_TOPIC_COUNT_PROBS = [0.5, 0.35, 0.15]

_NEW_ID_RATE_PER_DAY, _NEW_ID_LIFETIME = 0.02, 10  # days; at most 20% new-id slots
_NEW_ID_MIN_SLOT = 20  # the most popular slots never retire
_SWAP_HEAD, _SWAP_RATE, _SWAP_MAX_DISTANCE = 10_000, 0.01, 10

_WEIGHT_STRINGS = pa.array([f"{c / 100:.2f}" for c in range(101)])


# ------------------------------------------------------------------------------ batches


@dataclasses.dataclass
class _Batch:
    """The features of ``n`` rows before labelling.

    ``categorical`` holds int64 ids for C1..C20 and, for C21..C26, the 32-bit value
    behind the hex string (``MISSING_HEX`` when missing). Tags and topics are flat
    arrays sorted by row; ``*_counts`` give the entries per row.
    """

    n: int
    numeric: dict[str, np.ndarray]
    categorical: dict[str, np.ndarray]
    slots: dict[str, np.ndarray]
    user_id: np.ndarray
    user_slot: np.ndarray
    tag_rows: np.ndarray
    tag_ids: np.ndarray
    tag_counts: np.ndarray
    topic_rows: np.ndarray
    topic_ids: np.ndarray
    topic_cents: np.ndarray
    topic_counts: np.ndarray


@dataclasses.dataclass(frozen=True)
class IdTerm:
    """One per-id term of the click logit, per row.

    Attributes:
      ids: The id arrays the term is a function of: one for a field or the user, two for
        an interaction (each id has its own latent vector).
      scale: The term's standard deviation for the row's ids (``s * w(p)``).
      effect: The term's value.
    """

    ids: tuple[np.ndarray, ...]
    scale: np.ndarray
    effect: np.ndarray


class RowGenerator:
    """Samples rows and labels for one seed, caching per-run tables.

    Label model
    -----------
    Write ``z(key)`` for a standard normal drawn by hashing ``key`` (Box-Muller on two
    hash-derived uniforms), ``x_j`` for the numeric field ``Ij`` and ``c_f`` for the id of
    categorical field ``Cf`` (for ``C21``..``C26`` the 32-bit value behind the hex string,
    so every effect is a function of what is stored in the row)::

        click_logit = b
            + sum_{f in F}        s_f  * w(p_f)       * z(seed, f, c_f)            # ~15 fields
            + s_u                      * w(p_u)       * z(seed, "user", user_id)
            + sum_{(f,g) in P}    s_fg * sqrt(w(p_f) w(p_g)) * a_fg(c_f, c_g)      # interactions
            + s_tag   * mean_{t in tags} z(seed, "tag", t)      (m_tag if no tags)
            + s_topic * sum_{(k, w) in topics} w * z(seed, "topic", k)
            + sum_j g_j(x_j)                                    (m_j if x_j is NaN)

        P(click = 1 | row) = sigmoid(click_logit)

    Rare ids carry smaller effects, as in real logs where the long tail sits close to its
    field's average: ``p_f`` is the popularity slot of ``c_f`` (0 for the most popular id and
    for a missing value, see below), ``p_u`` the user's popularity rank, and
    ``w(p) = (1 + p / 300) ** -0.5``. So the ids a few million rows show often carry most
    of the signal, and a model trained on such data can get close to the oracle
    (docs/data.md#synthetic-data; ``benchmarks/studies/learnable_ceiling.py`` estimates it).

    The interactions ``P = {(C2,C17), (C5,C8), (C6,C14), (C9,C13)}`` are affinities of
    rank 4, like a user's taste for an item: ``a_fg(c, d) = sum_k u_k(c) v_k(d) / 2`` with
    ``u_k(c) = z(seed, f, g, "u", k, c)`` and ``v_k(d) = z(seed, f, g, "v", k, d)``. They are
    independent of the per-field effects, so a linear model over the ids cannot express them,
    while models with embeddings (FM, cross layers, dot interactions) can learn them from each
    id's own rows. The numeric terms are non-monotone or non-linear::

        g_1(x)  = 0.55 * sin(1.7 * log1p(x))                        # oscillating
        g_2(x)  = 0.25 * tanh(log1p(max(x, 0)) - 2) - 0.4 * [x < 0] # saturating + sign
        g_3(x)  = 0.75 * exp(-(log1p(x) - 2.2)^2 / 0.4) - 0.2       # bump
        g_5(x)  = 0.45 * [x < 300]                                  # threshold
        g_7(x)  = 0.9 * (1 - exp(-x / 4)) - 0.45                    # saturating
        g_12(x) = 0.35 * cos(2 * log1p(x))                          # oscillating

    Conversion uses a smaller, separately hashed set of effects::

        cvr_logit = b_c + sum_{f in {C4, C11, C16, C24}} r_f * w(p_f) * z(seed, "cvr", f, c_f)
                        + 0.45 * w(p_u) * z(seed, "cvr", "user", user_id)
                        + 0.5 * tanh(log1p(x_6) - 3)            (-0.3 if x_6 is NaN)
        P(conversion = 1 | row) = sigmoid(click_logit) * sigmoid(cvr_logit)
        conversion = click AND bernoulli(sigmoid(cvr_logit))

    ``oracle_logit`` stores ``click_logit`` (as float32; ``click`` is sampled from that
    float32 value) and ``oracle_logit_conversion`` stores ``logit`` of the product above.
    The biases ``b`` and ``b_c`` are solved per seed by bisection on a fixed pilot sample
    of day 0 so that the click rate is about 25% and the conversion rate about 3.5%.

    Categorical ids and drift
    -------------------------
    Field ``Cf`` has ``N_f`` base ids (:data:`CARDINALITIES`). A row draws a popularity
    rank ``r`` from Zipf(``N_f``, ``a_f``) with ``a_f`` in [1.05, 1.2], by inverse-CDF
    sampling. The rank goes through two day-dependent maps before becoming an id:

    * Popularity shifts: each day ``1..d`` swaps ``round(0.01 * min(N_f, 10000))`` head
      ranks with a rank at most 10 places lower (deterministic from ``(seed, f, day)``);
      the swaps accumulate over days. Fields with fewer than 50 ids never shift.
    * New ids: slot ``p >= 20`` gets birth day ``B_p = floor(u_p / 0.02) + 1`` where
      ``u_p`` is a hash-uniform of ``(seed, f, p)``. Slots with ``B_p <= 10`` change id on
      days ``B_p, B_p + 10, B_p + 20, ...``: on day ``d >= B_p`` they serve the brand-new id
      ``N_f * D + pi(p) + 1`` where ``D`` is the latest such day (``> N_f`` and never seen
      before day ``D``). So a fraction ``min(0.02 d, 0.2)`` of slots serve new ids on day
      ``d``, and from day 10 on, 2% of slots get a fresh id every day while new ids live
      10 days. The 20 most popular slots never change, so fields with few ids (``C9``,
      ``C20``, ...) get few or no new ids. Base ids are ``pi(p) + 1`` where ``pi`` is
      a fixed affine permutation ``(a p + b) mod N_f``, so id order carries no popularity.

    ``C21``..``C26`` hold the 8 lowercase hex digits of a 32-bit hash of the field name
    and the id (the same id always gives the same string, whatever the seed).
    Missing categorical values (a few fields, :data:`CATEGORICAL_MISSING_RATES`) are stored
    as id ``0`` or the empty string. ``user_id`` is Zipf-Mandelbrot over 200,000 users (``users``),
    ``tags`` (a ``list<int64>`` column) holds 0-8 distinct Zipf tag ids out of 5,000 and
    ``topics`` (a delimited string) 1-3 distinct ``id:weight`` pairs out of 200 topics with
    weights in hundredths summing to about 1.
    """

    def __init__(self, seed: int, users: int = USERS):
        self._seed, self._users = seed, users
        self._cdfs: dict[tuple[int, float, float], np.ndarray] = {}
        self._head_maps: dict[str, tuple[int, np.ndarray]] = {}  # field -> latest day
        self._permutations = {
            name: self._permutation(name, n)
            for name, n in [*CARDINALITIES.items(), ("user_id", users), ("tags", _TAGS)]
        }
        self._click_bias, self._cvr_bias = self._calibrate()

    def clicks(
        self, day: int, file_index: int, n: int
    ) -> tuple[_Batch, np.ndarray, np.ndarray, np.random.Generator]:
        """The features, float32 click logits and click labels of file ``file_index`` of
        ``day`` (``n`` rows), and the file's random generator for what is drawn next."""
        rng = np.random.default_rng([self._seed, day, file_index])
        batch = self._features(day, rng, n)
        click_logit = (self._click_logit(batch) + self._click_bias).astype(np.float32)
        click = rng.random(n) < sigmoid(click_logit.astype(np.float64))
        return batch, click_logit, click, rng

    def features(self, day: int, file_index: int, n: int) -> _Batch:
        """The features of file ``file_index`` of ``day`` (``n`` rows), the rows :meth:`clicks`
        labels, without drawing their labels."""
        return self._features(day, np.random.default_rng([self._seed, day, file_index]), n)

    def table(self, day: int, file_index: int, n: int) -> pa.Table:
        """Generates file ``file_index`` of ``day`` with ``n`` rows as an Arrow table."""
        batch, click_logit, click, rng = self.clicks(day, file_index, n)
        cvr_logit = self._cvr_logit(batch) + self._cvr_bias
        conversion = click & (rng.random(n) < sigmoid(cvr_logit))
        log_p = -softplus(-click_logit.astype(np.float64)) - softplus(-cvr_logit)
        conversion_logit = log_p - np.log(-np.expm1(log_p))
        columns = [pa.array(batch.numeric[f]) for f in NUMERIC_FIELDS]
        columns += [pa.array(batch.categorical[f]) for f in CATEGORICAL_FIELDS[:20]]
        columns += [hex_strings(batch.categorical[f]) for f in STRING_ID_FIELDS]
        columns += [
            pa.array(batch.user_id),
            list_column(pa.array(batch.tag_ids, pa.int64()), batch.tag_counts),
            join_lists(_topic_entries(batch), batch.topic_counts),
            pa.array(click.astype(np.int64)),
            pa.array(conversion.astype(np.int64)),
            pa.array(click_logit),
            pa.array(conversion_logit.astype(np.float32)),
        ]
        return pa.Table.from_arrays(columns, schema=SCHEMA)

    # -- features

    def _features(self, day: int, rng: np.random.Generator, n: int) -> _Batch:
        numeric = {f: self._numeric(f, rng, n) for f in NUMERIC_FIELDS}
        categorical, slots = {}, {}
        for f in CATEGORICAL_FIELDS:
            categorical[f], slots[f] = self._categorical(f, day, rng, n)
        user_rank = self._zipf(rng, n, self._users, _USER_ZIPF, _USER_OFFSET)
        user_id = self._scramble("user_id", user_rank, self._users) + 1
        tag_counts = rng.choice(len(_TAG_COUNT_PROBS), size=n, p=_TAG_COUNT_PROBS)
        tag_rows = np.repeat(np.arange(n, dtype=np.int64), tag_counts)
        tag_ranks = self._zipf(rng, tag_rows.size, _TAGS, _TAG_ZIPF)
        tag_rows, tag_ids = distinct_per_row(
            tag_rows, self._scramble("tags", tag_ranks, _TAGS) + 1, _TAGS + 1
        )
        topic_counts = 1 + rng.choice(len(_TOPIC_COUNT_PROBS), size=n, p=_TOPIC_COUNT_PROBS)
        topic_rows = np.repeat(np.arange(n, dtype=np.int64), topic_counts)
        topic_rows, topic_ids = distinct_per_row(
            topic_rows, self._zipf(rng, topic_rows.size, _TOPICS, _TOPIC_ZIPF) + 1, _TOPICS + 1
        )
        raw = rng.gamma(1.0, size=topic_rows.size)
        share = raw / np.bincount(topic_rows, weights=raw, minlength=n)[topic_rows]
        topic_cents = np.clip(np.rint(share * 100), 1, 100).astype(np.int64)
        return _Batch(
            n=n,
            numeric=numeric,
            categorical=categorical,
            slots=slots,
            user_id=user_id,
            user_slot=user_rank,
            tag_rows=tag_rows,
            tag_ids=tag_ids,
            tag_counts=np.bincount(tag_rows, minlength=n),
            topic_rows=topic_rows,
            topic_ids=topic_ids,
            topic_cents=topic_cents,
            topic_counts=np.bincount(topic_rows, minlength=n),
        )

    @staticmethod
    def _numeric(field: str, rng: np.random.Generator, n: int) -> np.ndarray:
        mu, sigma = _NUMERIC_LOGNORMAL[field]
        value = np.exp(mu + sigma * rng.standard_normal(n))
        if field not in _CONTINUOUS_FIELDS:
            value = np.floor(value)
        if field == "I2":
            negative = rng.random(n) < _I2_NEGATIVE_RATE
            value[negative] = -1.0 - rng.integers(0, 3, size=int(negative.sum()))
        value[rng.random(n) < NUMERIC_MISSING_RATES[field]] = np.nan
        return value.astype(np.float32)

    def _categorical(
        self, field: str, day: int, rng: np.random.Generator, n: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids of ``field`` on ``day`` (for string fields the 32-bit hex value) and each
        row's popularity slot (0 where the value is missing)."""
        cardinality = CARDINALITIES[field]
        rank = self._zipf(rng, n, cardinality, _ZIPF_EXPONENTS[field])
        head = self._head_map(field, day)
        slot = np.where(rank < head.size, head[np.minimum(rank, head.size - 1)], rank)
        ids = self._scramble(field, slot, cardinality) + 1
        if day > 0:
            birth = (
                np.floor(
                    unit_interval(hash64(stream_key(self._seed, "new", field), slot))
                    / _NEW_ID_RATE_PER_DAY
                ).astype(np.int64)
                + 1
            )
            new = (birth <= min(day, _NEW_ID_LIFETIME)) & (slot >= _NEW_ID_MIN_SLOT)
            latest_birth = birth + (day - birth) // _NEW_ID_LIFETIME * _NEW_ID_LIFETIME
            ids = np.where(new, ids + latest_birth * cardinality, ids)
        missing = rng.random(n) < CATEGORICAL_MISSING_RATES[field]
        slot = np.where(missing, 0, slot)
        if field in STRING_ID_FIELDS:
            value = (hash64(stream_key(0, "hex", field), ids) >> np.uint64(32)).astype(np.int64)
            return np.where(missing, MISSING_HEX, value), slot
        return np.where(missing, 0, ids), slot

    def _zipf(
        self,
        rng: np.random.Generator,
        n: int,
        cardinality: int,
        exponent: float,
        offset: float = 0.0,
    ) -> np.ndarray:
        """Draws 0-based ranks with P(r) proportional to (r + 1 + offset)^-exponent."""
        cache_key = (cardinality, exponent, offset)
        cdf = self._cdfs.get(cache_key)
        if cdf is None:
            cdf = np.cumsum((np.arange(1, cardinality + 1) + offset) ** -exponent)
            cdf /= cdf[-1]
            self._cdfs[cache_key] = cdf
        return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), cardinality - 1)

    def _head_map(self, field: str, day: int) -> np.ndarray:
        """Slot of each head rank after the popularity swaps of days 1..day."""
        done, head = self._head_maps.get(field, (day + 1, None))
        if done > day:
            done, head = 0, np.arange(min(CARDINALITIES[field], _SWAP_HEAD))
        for d in range(done + 1, day + 1):
            head = head.copy()
            rng = np.random.default_rng([self._seed, d, stream_key(0, "swap", field)])
            swaps = round(_SWAP_RATE * head.size)
            first = rng.integers(0, head.size, size=swaps)
            second = np.minimum(
                first + rng.integers(1, _SWAP_MAX_DISTANCE + 1, swaps), head.size - 1
            )
            for a, b in zip(first.tolist(), second.tolist()):
                head[a], head[b] = head[b], head[a]
        self._head_maps[field] = (day, head)
        return head

    def _permutation(self, name: str, cardinality: int) -> tuple[int, int]:
        """Multiplier (coprime to ``cardinality``) and shift of a fixed id permutation."""
        key = stream_key(self._seed, "permutation", name)
        multiplier = key % (1 << 31) | 1
        while math.gcd(multiplier, cardinality) != 1:
            multiplier += 2
        return multiplier, (key >> 32) % cardinality

    def _scramble(self, name: str, rank: np.ndarray, cardinality: int) -> np.ndarray:
        """Applies the permutation ``r -> (a r + b) mod cardinality`` of ``name``."""
        multiplier, shift = self._permutations[name]
        return (rank.astype(np.int64) * multiplier + shift) % cardinality

    # -- labels

    def click_id_terms(self, b: _Batch) -> dict[str, IdTerm]:
        """The click logit's per-id terms: every field, interaction and user effect."""
        seed, terms = self._seed, {}
        for field, sigma in CLICK_FIELD_SIGMAS.items():
            ids, scale = b.categorical[field], sigma * effect_scale(b.slots[field])
            effect = hashed_normal(stream_key(seed, "click", field), ids)
            terms[field] = IdTerm((ids,), scale, scale * effect)
        for (f, g), sigma in CLICK_PAIR_SIGMAS.items():
            scale = sigma * np.sqrt(effect_scale(b.slots[f]) * effect_scale(b.slots[g]))
            terms[f"{f} x {g}"] = IdTerm(
                (b.categorical[f], b.categorical[g]),
                scale,
                scale
                * affinity(stream_key(seed, "click", f, g), b.categorical[f], b.categorical[g]),
            )
        scale = USER_SIGMA * effect_scale(b.user_slot)
        terms["user"] = IdTerm(
            (b.user_id,), scale, scale * hashed_normal(stream_key(seed, "click", "user"), b.user_id)
        )
        return terms

    def click_terms(self, b: _Batch) -> dict[str, np.ndarray]:
        """Every term of the click logit (without the bias), by name: the per-id terms of
        :meth:`click_id_terms`, ``tags``, ``topics`` and ``num Ij`` per numeric field."""
        seed = self._seed
        terms = {name: term.effect for name, term in self.click_id_terms(b).items()}
        tag_effect = np.bincount(
            b.tag_rows,
            minlength=b.n,
            weights=hashed_normal(stream_key(seed, "click", "tag"), b.tag_ids),
        )
        terms["tags"] = np.where(
            b.tag_counts > 0, TAG_SIGMA * tag_effect / np.maximum(b.tag_counts, 1), NO_TAG_EFFECT
        )
        terms["topics"] = TOPIC_SIGMA * np.bincount(
            b.topic_rows,
            minlength=b.n,
            weights=(
                b.topic_cents / 100 * hashed_normal(stream_key(seed, "click", "topic"), b.topic_ids)
            ),
        )
        for field, (effect, missing_effect) in NUMERIC_EFFECTS.items():
            x = b.numeric[field].astype(np.float64)
            missing = np.isnan(x)
            terms[f"num {field}"] = np.where(
                missing, missing_effect, effect(np.where(missing, 0.0, x))
            )
        return terms

    def _click_logit(self, b: _Batch) -> np.ndarray:
        """The click logit without the bias (see the class docstring)."""
        logit = np.zeros(b.n)
        for effect in self.click_terms(b).values():
            logit += effect
        return logit

    def _cvr_logit(self, b: _Batch) -> np.ndarray:
        """The post-click conversion logit without the bias."""
        seed = self._seed
        logit = np.zeros(b.n)
        for field, sigma in CVR_FIELD_SIGMAS.items():
            logit += (
                sigma
                * effect_scale(b.slots[field])
                * hashed_normal(stream_key(seed, "cvr", field), b.categorical[field])
            )
        logit += (
            CVR_USER_SIGMA
            * effect_scale(b.user_slot)
            * hashed_normal(stream_key(seed, "cvr", "user"), b.user_id)
        )
        x6 = b.numeric["I6"].astype(np.float64)
        missing = np.isnan(x6)
        logit += np.where(missing, -0.3, 0.5 * np.tanh(np.log1p(np.where(missing, 0, x6)) - 3))
        return logit

    def _calibrate(self) -> tuple[float, float]:
        """Biases giving the target click and conversion rates on a day-0 pilot sample."""
        batch = self._features(
            0, np.random.default_rng([self._seed, stream_key(0, "pilot")]), _PILOT_ROWS
        )
        click_raw = self._click_logit(batch)
        click_bias = solve_bias(lambda b: sigmoid(click_raw + b).mean(), _TARGET_CLICK_RATE)
        p_click = sigmoid(click_raw + click_bias)
        cvr_raw = self._cvr_logit(batch)
        cvr_bias = solve_bias(
            lambda b: (p_click * sigmoid(cvr_raw + b)).mean(), _TARGET_CONVERSION_RATE
        )
        return click_bias, cvr_bias


def _topic_entries(b: _Batch) -> pa.Array:
    """``"id:weight"`` strings, one per topic entry."""
    ids = pc.cast(pa.array(b.topic_ids), pa.string())
    weights = _WEIGHT_STRINGS.take(pa.array(b.topic_cents))
    return pc.binary_join_element_wise(ids, weights, ":")
