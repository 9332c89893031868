"""The columns of the synthetic Criteo-like data (``data/synth.py`` generates the rows):
13 numeric and 26 categorical fields named as Criteo's, their cardinalities and missing
rates, and the Arrow schema of every file ``recsys-dist data synth`` writes."""

from __future__ import annotations

import pyarrow as pa

NUMERIC_FIELDS = [f"I{i}" for i in range(1, 14)]
CATEGORICAL_FIELDS = [f"C{i}" for i in range(1, 27)]
STRING_ID_FIELDS = CATEGORICAL_FIELDS[20:]

CARDINALITIES = dict(
    zip(
        CATEGORICAL_FIELDS,
        [
            1500,
            600,
            2_000_000,
            1_000_000,
            300,
            24,
            12_000,
            600,
            4,
            90_000,
            5_600,
            1_500_000,
            3_200,
            27,
            15_000,
            1_200_000,
            10,
            5_600,
            2_200,
            4,
            800_000,
            18,
            15,
            280_000,
            100,
            140_000,
        ],
    )
)
"""Base number of ids per categorical field (new ids from drift come on top)."""

NUMERIC_MISSING_RATES = dict(
    zip(
        NUMERIC_FIELDS,
        [
            0.40,
            0.0,
            0.21,
            0.22,
            0.03,
            0.22,
            0.04,
            0.005,
            0.04,
            0.40,
            0.04,
            0.35,
            0.22,
        ],
    )
)
"""Probability that a numeric field is NaN (missing) in a row."""

CATEGORICAL_MISSING_RATES = {f: 0.0 for f in CATEGORICAL_FIELDS} | {
    "C12": 0.03,
    "C16": 0.03,
    "C19": 0.15,
    "C20": 0.15,
    "C22": 0.20,
    "C25": 0.12,
    "C26": 0.12,
}
"""Probability that a categorical field is missing (id 0 or "") in a row."""

SCHEMA = pa.schema(
    [pa.field(f, pa.float32(), nullable=False) for f in NUMERIC_FIELDS]
    + [pa.field(f, pa.int64(), nullable=False) for f in CATEGORICAL_FIELDS[:20]]
    + [pa.field(f, pa.string(), nullable=False) for f in STRING_ID_FIELDS]
    + [
        pa.field("user_id", pa.int64(), nullable=False),
        pa.field("tags", pa.list_(pa.field("item", pa.int64(), nullable=False)), nullable=False),
        pa.field("topics", pa.string(), nullable=False),
        pa.field("click", pa.int64(), nullable=False),
        pa.field("conversion", pa.int64(), nullable=False),
        pa.field("oracle_logit", pa.float32(), nullable=False),
        pa.field("oracle_logit_conversion", pa.float32(), nullable=False),
    ]
)
"""Column names and types of every file :func:`synthesize` writes (no nulls)."""

# Numeric fields: (mu, sigma) of the underlying lognormal; integer-valued unless listed.
