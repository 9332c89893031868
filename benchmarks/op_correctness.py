"""Correctness of the ParquetReadRows op against pyarrow, on random files.

Writes files with randomly drawn schemas (each column one of the types below, with a
random null pattern: none, sparse, dense, runs, all null, a whole row group, first and
last rows), random encodings (plain / dictionary pages, compression), row groups of
random sizes (empty ones included), occasional large strings (100 KB+), and reads random
row ranges (crossing row-group boundaries, inside one group, empty, past the end, the
whole file) with the op; compares values, validity and row splits with what pyarrow
reads from the same file (``pq.read_table(...).slice(...)``). Continues until every type
has had at least ``--values`` values compared.

Prints the seed, per type the values compared and the mismatches, and a final line
``mismatches N``; exits 1 if N > 0.

Usage: ``python benchmarks/op_correctness.py [--seed S] [--values 1000000] [--files 40]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import tensorflow as tf  # noqa: E402

import recsys_dist  # noqa: F401  sets TF env defaults before TensorFlow loads
from recsys_dist.ops import read_rows  # noqa: E402

# type name -> (tf dtype the op reads it as, list column?)
TYPES = {
    "int32": (tf.int32, False),
    "int64": (tf.int64, False),
    "float": (tf.float32, False),
    "double": (tf.float64, False),
    "bool": (tf.bool, False),
    "string": (tf.string, False),
    "dictionary string": (tf.string, False),
    "int8/16/uint32 as int64": (tf.int64, False),
    "list<int64>": (tf.int64, True),
    "list<string>": (tf.string, True),
    "list<float>": (tf.float32, True),
}
ARROW = {
    tf.int32: pa.int32(),
    tf.int64: pa.int64(),
    tf.float32: pa.float32(),
    tf.float64: pa.float64(),
    tf.bool: pa.bool_(),
}
NUMPY = {
    tf.int32: np.int32,
    tf.int64: np.int64,
    tf.float32: np.float32,
    tf.float64: np.float64,
    tf.bool: np.bool_,
}


# ---- random data ----------------------------------------------------------------------


def null_mask(rng: np.random.Generator, n: int, group_bounds: list[int]) -> np.ndarray | None:
    kind = rng.choice(["none", "sparse", "dense", "runs", "all", "group", "ends"])
    if kind == "none" or n == 0:
        return None
    if kind == "all":
        return np.ones(n, bool)
    mask = rng.random(n) < {"sparse": 0.02, "dense": 0.7}.get(kind, 0.05)
    if kind == "runs":
        for _ in range(int(rng.integers(1, 6))):
            at = int(rng.integers(0, n))
            mask[at : at + int(rng.integers(1, max(2, n // 5)))] = True
    if kind == "group" and len(group_bounds) > 2:
        g = int(rng.integers(0, len(group_bounds) - 1))
        mask[group_bounds[g] : group_bounds[g + 1]] = True
    mask[0] |= rng.random() < 0.5
    mask[-1] |= rng.random() < 0.5
    return mask


def random_strings(rng, n: int, large: bool) -> list[str]:
    vocabulary = [f"s{i}" * int(rng.integers(0, 4)) for i in range(int(rng.integers(1, 500)))]
    values = [vocabulary[i] for i in rng.integers(0, len(vocabulary), n)]
    if large and n:
        for at in rng.integers(0, n, 3):
            values[at] = chr(97 + int(at) % 26) * int(rng.integers(100_000, 150_000))
    return values


def random_scalars(rng, kind: str, n: int) -> pa.Array:
    if kind == "int32":
        return pa.array(rng.integers(-(2**31), 2**31, n), pa.int32())
    if kind == "int64":
        return pa.array(rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64), pa.int64())
    if kind == "float":
        values = rng.standard_normal(n).astype(np.float32) * np.float32(10.0 ** rng.integers(-3, 6))
        values[rng.random(n) < 0.001] = np.nan
        return pa.array(values, pa.float32())
    if kind == "double":
        values = rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30)
        values[rng.random(n) < 0.001] = np.inf
        return pa.array(values, pa.float64())
    if kind == "bool":
        return pa.array(rng.random(n) < rng.random(), pa.bool_())
    if kind == "int8/16/uint32 as int64":
        numpy_type, type_ = [
            (np.int8, pa.int8()),
            (np.int16, pa.int16()),
            (np.uint32, pa.uint32()),
        ][int(rng.integers(0, 3))]
        info = np.iinfo(numpy_type)
        return pa.array(rng.integers(info.min, int(info.max) + 1, n), type_)
    return pa.array(random_strings(rng, n, large=rng.random() < 0.15), pa.string())


def random_column(rng, kind: str, n: int, group_bounds: list[int]) -> pa.Array:
    mask = null_mask(rng, n, group_bounds)
    if kind == "dictionary string":
        words = pa.array(random_strings(rng, int(rng.integers(1, 300)), large=False))
        indices = pa.array(rng.integers(0, len(words), n), pa.int32(), mask=mask)
        return pa.DictionaryArray.from_arrays(indices, words)
    if not kind.startswith("list"):
        values = random_scalars(rng, kind, n)
        return values if mask is None else pc.if_else(pa.array(mask), None, values)
    lengths = rng.integers(0, int(rng.integers(1, 12)), n)
    element_kind = {"list<int64>": "int64", "list<string>": "string", "list<float>": "float"}[kind]
    elements = random_scalars(rng, element_kind, int(lengths.sum()))
    element_nulls = rng.random(len(elements)) < rng.choice([0.0, 0.05, 0.5])
    if element_nulls.any():
        elements = pc.if_else(pa.array(element_nulls), None, elements)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    large = rng.random() < 0.3
    offsets = pa.array(
        offsets,
        pa.int64() if large else pa.int32(),
        mask=None if mask is None else np.append(mask, False),
    )
    array_type = pa.LargeListArray if large else pa.ListArray
    return array_type.from_arrays(offsets, elements)


def random_file(rng, path: str) -> tuple[dict, list[int]]:
    """Writes a random file; returns {column: type name} and the row-group bounds."""
    sizes = []
    while sum(sizes) < int(rng.integers(20_000, 150_000)):
        sizes.append(0 if rng.random() < 0.1 else int(rng.integers(1, 40_000)))
    bounds = np.cumsum([0] + sizes).tolist()
    n = bounds[-1]
    kinds = list(TYPES) + list(rng.choice(list(TYPES), int(rng.integers(0, 5))))
    columns = {
        f"c{i}_{kind.split('<')[0].split('/')[0].replace(' ', '_')}": kind
        for i, kind in enumerate(kinds)
    }
    table = pa.table({name: random_column(rng, kind, n, bounds) for name, kind in columns.items()})
    dictionary = [name for name in columns if rng.random() < 0.5]
    compression = str(rng.choice(["none", "snappy", "zstd"]))
    with pq.ParquetWriter(
        path, table.schema, use_dictionary=dictionary, compression=compression
    ) as writer:
        for g, size in enumerate(sizes):
            writer.write_table(table.slice(bounds[g], size), row_group_size=max(size, 1))
    return columns, bounds


def random_ranges(rng, bounds: list[int], count: int) -> list[tuple[int, int]]:
    n = bounds[-1]
    ranges = [(0, n), (n, n + 5), (0, 0)]
    inner = [b for b in bounds[1:-1]]
    while len(ranges) < count:
        kind = rng.integers(0, 5)
        if kind == 0 and inner:  # across one or more group boundaries
            b = inner[int(rng.integers(0, len(inner)))]
            ranges.append(
                (max(0, b - int(rng.integers(1, 5000))), b + int(rng.integers(1, 20_000)))
            )
        elif kind == 1:  # inside one group (served by the decoded-group cache)
            g = int(rng.integers(0, len(bounds) - 1))
            lo, hi = bounds[g], bounds[g + 1]
            if hi > lo:
                a = int(rng.integers(lo, hi))
                ranges.append((a, int(rng.integers(a, hi + 1))))
        elif kind == 2:  # empty
            a = int(rng.integers(0, n + 10))
            ranges.append((a, a))
        elif kind == 3:  # past the end
            ranges.append((int(rng.integers(0, n)), n + int(rng.integers(1, 10**6))))
        else:
            a = int(rng.integers(0, n))
            ranges.append((a, min(n, a + int(rng.integers(1, 30_000)))))
    return ranges


# ---- the reference and the comparison -------------------------------------------------


def flat(array: pa.Array, dtype: tf.DType) -> tuple[np.ndarray, np.ndarray]:
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), bool)
    if dtype == tf.string:
        values = array.cast(pa.large_binary()).fill_null(b"").to_numpy(zero_copy_only=False)
        return values.astype(object), valid
    zero = pa.scalar(False if dtype == tf.bool else 0, ARROW[dtype])
    values = pc.cast(array, ARROW[dtype], safe=False).fill_null(zero)
    return np.asarray(values.to_numpy(zero_copy_only=False), NUMPY[dtype]), valid


def reference(column: pa.ChunkedArray, start: int, stop: int, dtype, ragged):
    n = len(column)
    start = min(start, n)
    array = column.slice(start, max(0, min(stop, n) - start))
    array = array.combine_chunks() if array.num_chunks else pa.array([], column.type)
    if not ragged:
        return (*flat(array, dtype), None)
    lengths = pc.list_value_length(array).fill_null(0).to_numpy(zero_copy_only=False)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return (*flat(pc.list_flatten(array), dtype), splits)


def differences(got: np.ndarray, want: np.ndarray, dtype) -> int:
    if got.shape != want.shape:
        return max(len(got), len(want))
    if dtype in (tf.float32, tf.float64):  # bit for bit: NaN == NaN, -0.0 != 0.0
        view = np.uint32 if dtype == tf.float32 else np.uint64
        return int(np.count_nonzero(got.view(view) != want.view(view)))
    if dtype == tf.string:
        return int(np.count_nonzero(got.astype(object) != want))
    return int(np.count_nonzero(got != want))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--values", type=int, default=1_000_000, help="values to compare per type, at least"
    )
    parser.add_argument(
        "--files",
        type=int,
        default=40,
        help="random files to write, at least (more if --values needs)",
    )
    parser.add_argument("--ranges", type=int, default=24, help="row ranges per file")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}", flush=True)
    rng = np.random.default_rng(seed)
    compared = dict.fromkeys(TYPES, 0)
    mismatched = dict.fromkeys(TYPES, 0)
    nulls = dict.fromkeys(TYPES, 0)
    began = time.monotonic()
    files = reads = 0
    with tempfile.TemporaryDirectory() as directory:
        while files < args.files or min(compared.values()) < args.values:
            path = os.path.join(directory, f"file{files}.parquet")
            columns, bounds = random_file(rng, path)
            files += 1
            table = pq.read_table(path)
            dtypes = {name: TYPES[kind][0] for name, kind in columns.items()}
            ragged = {name for name, kind in columns.items() if TYPES[kind][1]}
            for start, stop in random_ranges(rng, bounds, args.ranges):
                got = read_rows(path, start, stop, dtypes, ragged)
                reads += 1
                for name, kind in columns.items():
                    dtype, is_list = TYPES[kind]
                    values, valid, splits = reference(
                        table.column(name), start, stop, dtype, is_list
                    )
                    bad = differences(got[name].values.numpy(), values, dtype)
                    bad += differences(got[name].valid.numpy(), valid, tf.bool)
                    if is_list:
                        bad += differences(got[name].row_splits.numpy(), splits, tf.int64)
                    if bad:
                        print(
                            f"MISMATCH {kind} column {name} rows [{start}, {stop}) of "
                            f"file {files - 1}: {bad}",
                            flush=True,
                        )
                    compared[kind] += len(values)
                    nulls[kind] += int(np.count_nonzero(~valid))
                    mismatched[kind] += bad
            os.remove(path)
    print(f"{files} files, {reads} reads, {time.monotonic() - began:.0f} s")
    print(f"{'type':<26}{'values':>12}{'of them null':>14}{'mismatches':>12}")
    for kind in TYPES:
        print(f"{kind:<26}{compared[kind]:>12,}{nulls[kind]:>14,}{mismatched[kind]:>12}")
    total = sum(mismatched.values())
    print(f"mismatches {total}")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
