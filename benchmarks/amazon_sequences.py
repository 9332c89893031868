"""Converts the Amazon Video Games interactions into a leave-one-out CTR set for sequence
models (DIN, BST): one Parquet dataset per split, with the user's history as a list column.

The source (``../shared/data/amazon_video_games/Video.txt`` from the repository root, see the
README next to it) has one ``user item`` pair per line, each user's lines in time order,
oldest first. For a user with items i_1 .. i_n, every position t >= 2 gives two rows with the
same history, the last up to ``--max-history`` items before t (i_{t-L} .. i_{t-1}, newest
last):

- a positive: candidate i_t, ``click`` 1;
- a negative: a candidate drawn uniformly from the items of the data the user never touched
  (at any time), ``click`` 0; draws are seeded (``--seed``).

Position t = n goes to ``test``, t = n - 1 to ``validation``, the rest (2 .. n - 2) to
``train``. Train rows are shuffled with the seed and split into files of about 100k rows
(``OUT/train/part-00000.parquet`` ...), so that workers can shard them; validation and test
are one file each, in user order (positive then negative). Row groups hold up to 25k rows.

Columns, exactly: ``user_id`` int64, ``item_id`` int64 (the candidate), ``hist_item_id``
list<int64> (newest last), ``hist_length`` int64, ``click`` int64.

Printed (and written to ``OUT/summary.json``): rows per split and their positive share,
the history length's min/median/mean/p90/max and share of empty histories (per split),
distinct users and items, and for hashed item tables of 2x, 10x and 100x the distinct item
count the share of candidate lookups whose table row holds another item id of the data
too. Rows are computed as the project does for a hashed integer categorical: splitmix64 of
the int64 id (``recsys_dist.hashing``, called here) modulo ``rows - 1`` (the last row is the
missing row). The ids that can share a row are every distinct item of the
data (candidates and histories read the same table).

Usage::

    python benchmarks/amazon_sequences.py --out /tmp/amazon_seq [--source FILE]
        [--max-history 50] [--seed 0]

The data must not enter the repository: ``--out`` is refused inside the checkout unless git
ignores it (``data/...`` is ignored).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from recsys_dist import hashing

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.datasets.common import unignored_in_repository  # noqa: E402

DEFAULT_SOURCE = "../shared/data/amazon_video_games/Video.txt"
TRAIN_FILE_ROWS = 100_000
ROW_GROUP_ROWS = 25_000
TABLE_FACTORS = (2, 10, 100)

SCHEMA = pa.schema(
    [
        ("user_id", pa.int64()),
        ("item_id", pa.int64()),
        ("hist_item_id", pa.list_(pa.int64())),
        ("hist_length", pa.int64()),
        ("click", pa.int64()),
    ]
)


def hashed_rows(ids: np.ndarray, table_rows: int) -> np.ndarray:
    """The row of each integer id in a hashed table of ``table_rows`` rows, computed by the
    project's own hashing (what training looks up)."""
    return hashing.to_bucket(
        hashing.hash_int64(np.asarray(ids, np.int64)), max(table_rows - 1, 1)
    ).numpy()


def read_source(path: pathlib.Path) -> tuple[np.ndarray, np.ndarray]:
    """``(users, items)`` int64 in file order."""
    table = pacsv.read_csv(
        path,
        read_options=pacsv.ReadOptions(column_names=["user", "item"]),
        parse_options=pacsv.ParseOptions(delimiter=" "),
        convert_options=pacsv.ConvertOptions(column_types={"user": pa.int64(), "item": pa.int64()}),
    )
    return (
        table.column("user").to_numpy().astype(np.int64),
        table.column("item").to_numpy().astype(np.int64),
    )


def build_rows(
    users: np.ndarray, items: np.ndarray, max_history: int, rng: np.random.Generator
) -> dict[str, dict[str, np.ndarray]]:
    """Per split, the row arrays: user, candidate, click, and each row's history as
    ``hist_start`` (index into ``items`` of the users' time-ordered sequence) and
    ``hist_length``. ``items`` must be grouped by user, each user's items in time order."""
    n = len(users)
    starts_mask = np.ones(n, bool)
    starts_mask[1:] = users[1:] != users[:-1]
    user_start = np.flatnonzero(starts_mask)
    counts = np.diff(np.append(user_start, n))
    pos = np.arange(n) - np.repeat(user_start, counts)  # 0-based position t - 1
    seq_len = np.repeat(counts, counts)
    keep = pos >= 1  # t >= 2
    idx = np.flatnonzero(keep)
    p = pos[idx]
    hist_len = np.minimum(p, max_history)
    hist_start = idx - hist_len
    last = seq_len[idx] - 1
    split = np.where(p == last, 2, np.where(p == last - 1, 1, 0))  # 0 train, 1 val, 2 test

    # Negatives: uniform over the data's items, redrawn while the user touched the item.
    universe = np.unique(items)
    touched = np.unique(users * (universe.max() + 1) + items)
    row_users = users[idx]
    neg = universe[rng.integers(0, len(universe), len(idx))]
    bad = np.isin(row_users * (universe.max() + 1) + neg, touched, assume_unique=False)
    while bad.any():
        where = np.flatnonzero(bad)
        neg[where] = universe[rng.integers(0, len(universe), len(where))]
        bad[where] = np.isin(row_users[where] * (universe.max() + 1) + neg[where], touched)

    out = {}
    for code, name in enumerate(("train", "validation", "test")):
        s = split == code
        m = int(s.sum())
        # Interleave: positive then negative of each position.
        rows = {
            "user_id": np.repeat(row_users[s], 2),
            "item_id": np.stack([items[idx[s]], neg[s]], axis=1).reshape(-1),
            "hist_start": np.repeat(hist_start[s], 2),
            "hist_length": np.repeat(hist_len[s], 2).astype(np.int64),
            "click": np.tile(np.array([1, 0], np.int64), m),
        }
        if name == "train":
            perm = rng.permutation(2 * m)
            rows = {k: v[perm] for k, v in rows.items()}
        out[name] = rows
    return out


def to_table(rows: dict[str, np.ndarray], items: np.ndarray, lo: int, hi: int) -> pa.Table:
    """Rows ``lo:hi`` as an Arrow table of :data:`SCHEMA`; the history values are gathered
    from ``items`` at once."""
    starts = rows["hist_start"][lo:hi]
    lengths = rows["hist_length"][lo:hi]
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    gather = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    hist = pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)), pa.array(items[gather], pa.int64())
    )
    return pa.Table.from_arrays(
        [
            pa.array(rows["user_id"][lo:hi], pa.int64()),
            pa.array(rows["item_id"][lo:hi], pa.int64()),
            hist,
            pa.array(lengths, pa.int64()),
            pa.array(rows["click"][lo:hi], pa.int64()),
        ],
        schema=SCHEMA,
    )


def write_split(
    name: str, rows: dict[str, np.ndarray], items: np.ndarray, out: pathlib.Path
) -> list[str]:
    total = len(rows["click"])
    files = max(1, round(total / TRAIN_FILE_ROWS)) if name == "train" else 1
    bounds = np.linspace(0, total, files + 1).astype(int)
    directory = out / name
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("part-*.parquet"):  # of an earlier run with other sizes
        stale.unlink()
    paths = []
    for i in range(files):
        path = directory / f"part-{i:05d}.parquet"
        pq.write_table(
            to_table(rows, items, bounds[i], bounds[i + 1]), path, row_group_size=ROW_GROUP_ROWS
        )
        paths.append(str(path))
    return paths


def length_stats(lengths: np.ndarray) -> dict[str, float]:
    return {
        "min": int(lengths.min()),
        "median": float(np.median(lengths)),
        "mean": round(float(lengths.mean()), 3),
        "p90": float(np.percentile(lengths, 90)),
        "max": int(lengths.max()),
        "empty_share": round(float((lengths == 0).mean()), 6),
    }


def shared_lookups(
    candidates: np.ndarray, vocabulary: np.ndarray, table_rows: int
) -> dict[str, float]:
    """Share of candidate lookups (and of distinct ids) whose row holds another id of
    ``vocabulary`` in a hashed table of ``table_rows`` rows."""
    vocab_rows = hashed_rows(vocabulary, table_rows)
    per_row = np.bincount(vocab_rows, minlength=table_rows)
    shared_id = per_row[vocab_rows] > 1
    position = np.searchsorted(vocabulary, candidates)
    return {
        "table_rows": int(table_rows),
        "shared_lookup_share": round(float(shared_id[position].mean()), 6),
        "shared_id_share": round(float(shared_id.mean()), 6),
    }


def convert(source: pathlib.Path, out: pathlib.Path, max_history: int, seed: int) -> dict:
    t0 = time.perf_counter()
    users, items = read_source(source)
    order = np.argsort(users, kind="stable")  # group by user, keep time order
    users, items = users[order], items[order]
    rng = np.random.default_rng(seed)
    splits = build_rows(users, items, max_history, rng)
    vocabulary = np.unique(items)
    summary: dict = {
        "source": str(source),
        "max_history": max_history,
        "seed": seed,
        "interactions": int(len(items)),
        "users": int(len(np.unique(users))),
        # The source's README says every user has at least 5; not so in the file.
        "users_by_interactions_under_5": {
            str(k): int(v)
            for k, v in enumerate(
                np.bincount(np.bincount(users)[np.unique(users)], minlength=5)[:5]
            )
            if k > 0
        },
        "distinct_items": int(len(vocabulary)),
        "splits": {},
        "hashed_item_tables": {},
    }
    all_candidates = []
    for name, rows in splits.items():
        files = write_split(name, rows, items, out)
        all_candidates.append(rows["item_id"])
        summary["splits"][name] = {
            "rows": int(len(rows["click"])),
            "users": int(len(np.unique(rows["user_id"]))),
            "files": len(files),
            "positive_share": round(float(rows["click"].mean()), 6),
            "distinct_candidates": int(len(np.unique(rows["item_id"]))),
            "hist_length": length_stats(rows["hist_length"]),
        }
    candidates = np.concatenate(all_candidates)
    summary["all_rows"] = int(len(candidates))
    summary["hist_length_all"] = length_stats(
        np.concatenate([r["hist_length"] for r in splits.values()])
    )
    for factor in TABLE_FACTORS:
        summary["hashed_item_tables"][f"{factor}x"] = shared_lookups(
            candidates, vocabulary, factor * len(vocabulary)
        )
    summary["seconds"] = round(time.perf_counter() - t0, 2)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def print_summary(s: dict) -> None:
    print(
        f"source {s['source']}: {s['interactions']:,} interactions, {s['users']:,} users, "
        f"{s['distinct_items']:,} distinct items; max history {s['max_history']}, "
        f"seed {s['seed']}"
    )
    print(
        "users with 1 / 2 / 3 / 4 interactions: "
        + " / ".join(f"{v:,}" for v in s["users_by_interactions_under_5"].values())
        + " (no rows for 1, no validation row for 2)"
    )
    print(
        f"{'split':<11} {'rows':>9} {'users':>7} {'files':>5} {'pos share':>9} "
        f"{'cand items':>10}   history length min / median / mean / p90 / max, empty"
    )
    for name, x in s["splits"].items():
        h = x["hist_length"]
        print(
            f"{name:<11} {x['rows']:>9,} {x['users']:>7,} {x['files']:>5} "
            f"{x['positive_share']:>9.3f} {x['distinct_candidates']:>10,}   "
            f"{h['min']} / {h['median']:g} / "
            f"{h['mean']:.2f} / {h['p90']:g} / {h['max']}, {h['empty_share']:.1%}"
        )
    h = s["hist_length_all"]
    print(
        f"{'all':<11} {s['all_rows']:>9,} {'':>7} {'':>5} {'':>9} {'':>10}   {h['min']} / "
        f"{h['median']:g} / {h['mean']:.2f} / {h['p90']:g} / {h['max']}, "
        f"{h['empty_share']:.1%}"
    )
    print(
        "hashed item table (splitmix64 % (rows - 1)): share of candidate lookups whose row "
        "holds another item id"
    )
    for factor, x in s["hashed_item_tables"].items():
        print(
            f"  {factor:>4} = {x['table_rows']:>9,} rows: lookups {x['shared_lookup_share']:.2%}"
            f", distinct ids {x['shared_id_share']:.2%}"
        )
    print(f"done in {s['seconds']} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--source",
        default=DEFAULT_SOURCE,
        help="Video.txt (relative paths: from the repository root)",
    )
    parser.add_argument("--out", required=True, help="output directory (outside the repo)")
    parser.add_argument("--max-history", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    source = pathlib.Path(args.source)
    if not source.is_absolute():
        source = (ROOT / source).resolve()
    out = pathlib.Path(args.out).resolve()
    if unignored_in_repository(out):
        parser.error(
            f"--out {out} is inside the repository and not ignored by git; "
            "write the data elsewhere (or under data/)"
        )
    if not source.is_file():
        parser.error(f"--source {source} not found")
    if args.max_history < 1:
        parser.error("--max-history must be at least 1")
    out.mkdir(parents=True, exist_ok=True)
    print_summary(convert(source, out, args.max_history, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
