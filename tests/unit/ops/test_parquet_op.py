"""ParquetReadRows (recsys_dist.ops) against pyarrow as the reference.

Every file is written by the test itself. ``expected`` turns a pyarrow column slice into
what the op promises: scalar columns as values (nulls as 0 / "" / false) plus a validity
mask; list columns as flat elements (null elements kept, flagged), per-element validity
and row splits (a null list is empty).

The last tests cover the build of the op (``ops/build.py``): a missing compiler, and the
build key that rebuilds the library when the compiler, the sources or TensorFlow and
pyarrow change.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

from recsys_dist.ops import build, read_rows
from tests.support.data import upload_dir
from tests.support.paths import REPO

NUMPY = {
    tf.int32: np.int32,
    tf.int64: np.int64,
    tf.float32: np.float32,
    tf.float64: np.float64,
    tf.bool: np.bool_,
}
ARROW = {
    tf.int32: pa.int32(),
    tf.int64: pa.int64(),
    tf.float32: pa.float32(),
    tf.float64: pa.float64(),
    tf.bool: pa.bool_(),
}


# ---- the reference --------------------------------------------------------------------


def _flat(array: pa.Array, dtype: tf.DType) -> tuple[np.ndarray, np.ndarray]:
    """Values (nulls as 0 / b"" / False) and validity of a flat pyarrow array."""
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    if dtype == tf.string:
        values = np.array(
            [
                b"" if v is None else (v if isinstance(v, bytes) else v.encode())
                for v in array.to_pylist()
            ],
            dtype=object,
        )
        return values, valid
    zero = pa.scalar(False if dtype == tf.bool else 0, ARROW[dtype])
    values = pc.cast(array, ARROW[dtype], safe=False).fill_null(zero)
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=NUMPY[dtype]), valid


def expected(
    path: str,
    column: str,
    start: int,
    stop: int,
    dtype: tf.DType,
    ragged: bool = False,
    stride: int = 1,
):
    """(values, valid, row_splits or None) of rows start, start + stride, ... below stop
    as pyarrow reads them."""
    table = pq.read_table(path, columns=[column])
    start = min(start, table.num_rows)
    array = table.column(column).slice(start, max(0, min(stop, table.num_rows) - start))
    array = array.combine_chunks() if array.num_chunks else pa.array([], array.type)
    if stride > 1:  # by slices: pyarrow's take has no kernel for string views
        array = pa.concat_arrays([array.slice(i, 1) for i in range(0, len(array), stride)])
    if not ragged:
        return (*_flat(array, dtype), None)
    lengths = pc.list_value_length(array).fill_null(0).to_numpy(zero_copy_only=False)
    splits = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
    values, valid = _flat(pc.list_flatten(array), dtype)  # skips null lists, honours slices
    return values, valid, splits


def assert_same(path, got, column, start, stop, dtype, ragged=False, stride=1):
    values, valid, splits = expected(path, column, start, stop, dtype, ragged, stride)
    where = f"{column} [{start}, {stop}) by {stride} of {path}"
    got_values = got.values.numpy()
    if dtype == tf.string:
        assert got_values.tolist() == values.tolist(), where
    else:
        assert got_values.dtype == values.dtype, where
        np.testing.assert_array_equal(got_values, values, err_msg=where)
    np.testing.assert_array_equal(got.valid.numpy(), valid, err_msg=where)
    if ragged:
        np.testing.assert_array_equal(got.row_splits.numpy(), splits, err_msg=where)
    else:
        assert got.row_splits is None


def check_all(path, columns: dict, ranges, ragged=frozenset()):
    """Reads every range ``(start, stop)`` or ``(start, stop, stride)`` with all columns
    in one op call; compares each column."""
    for start, stop, *step in ranges:
        stride = step[0] if step else 1
        got = read_rows(path, start, stop, columns, ragged=set(ragged), stride=stride)
        for name, dtype in columns.items():
            assert_same(path, got[name], name, start, stop, dtype, name in ragged, stride)


# ---- data -----------------------------------------------------------------------------

ROWS, GROUP = 2000, 300  # row groups: 0-299, 300-599, 600-899 (all null), ...
NULL_GROUP = slice(600, 900)
RANGES = [
    (0, ROWS),
    (0, 1),
    (299, 301),
    (250, 950),
    (600, 900),
    (601, 602),
    (1999, 2000),
    (1234, 1800),
    (1500, 5000),
    (0, 0),
    (700, 700),
    (ROWS, ROWS),
    (2500, 3000),
    # strided, as training's items read their units: within a row group, across groups,
    # one row per group, past the end
    (1, 300, 7),
    (3, ROWS, 11),
    (250, 950, 300),
    (1990, 2500, 4),
    (0, ROWS, ROWS),
]


def null_mask(rng, n=ROWS, rate=0.1):
    """Random nulls plus the first row, the last row and a whole row group."""
    mask = rng.random(n) < rate
    mask[0] = mask[-1] = True
    mask[NULL_GROUP] = True
    return mask


def scalar_table(seed=0) -> pa.Table:
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}-é" for i in range(40)], dtype=object)

    def col(values, type_):
        return pa.array(values, type_, mask=null_mask(rng))

    return pa.table(
        {
            "i32": col(rng.integers(-(2**31), 2**31, ROWS), pa.int32()),
            "i64": col(rng.integers(-(2**62), 2**62, ROWS), pa.int64()),
            "f32": col(rng.standard_normal(ROWS).astype(np.float32), pa.float32()),
            "f64": col(rng.standard_normal(ROWS), pa.float64()),
            "flag": col(rng.random(ROWS) < 0.5, pa.bool_()),
            "str": col(rng.choice(words, ROWS), pa.string()),
            "i8": col(rng.integers(-128, 128, ROWS), pa.int8()),
            "i16": col(rng.integers(-(2**15), 2**15, ROWS), pa.int16()),
            "u32": col(rng.integers(0, 2**32, ROWS), pa.uint32()),
            "small": col(rng.integers(-1000, 1000, ROWS), pa.int64()),
            # Arrow dictionary arrays: written as Parquet dictionaries; the string one is
            # read back as an Arrow dictionary column.
            "dict_str": pa.DictionaryArray.from_arrays(
                pa.array(rng.integers(0, 40, ROWS), pa.int32(), mask=null_mask(rng)),
                pa.array(list(words), pa.string()),
            ),
            "dict_i64": pa.DictionaryArray.from_arrays(
                pa.array(rng.integers(0, 5, ROWS), pa.int8(), mask=null_mask(rng)),
                pa.array([7, -3, 2**40, 0, 11], pa.int64()),
            ),
            "view": col(rng.choice(words, ROWS), pa.string_view()),  # read back as a view
            "all_null": pa.nulls(ROWS, pa.int64()),
            "all_null_str": pa.nulls(ROWS, pa.string()),
        }
    )


SCALARS = {
    "i32": tf.int32,
    "i64": tf.int64,
    "f32": tf.float32,
    "f64": tf.float64,
    "flag": tf.bool,
    "str": tf.string,
    "i8": tf.int64,
    "i16": tf.int64,
    "u32": tf.int64,
    "dict_str": tf.string,
    "dict_i64": tf.int64,
    "view": tf.string,
    "all_null": tf.int64,
    "all_null_str": tf.string,
}


def list_column(rng, values_fn, large=False, value_type=None):
    """Lists of 0-5 elements; null lists at the ends, in a whole row group and at random;
    null elements at random."""
    lists = []
    nulls = null_mask(rng, rate=0.15)
    for i in range(ROWS):
        if nulls[i]:
            lists.append(None)
            continue
        items = list(values_fn(int(rng.integers(0, 6))))
        lists.append([None if rng.random() < 0.1 else v for v in items])
    type_ = (pa.large_list if large else pa.list_)(value_type)
    return pa.array(lists, type_)


def list_table(seed=1) -> pa.Table:
    rng = np.random.default_rng(seed)
    words = [f"tag{i}" for i in range(30)]
    ints = lambda k: rng.integers(-(2**40), 2**40, k).tolist()  # noqa: E731
    return pa.table(
        {
            "l_i64": list_column(rng, ints, value_type=pa.int64()),
            "l_str": list_column(
                rng, lambda k: rng.choice(words, k).tolist(), value_type=pa.string()
            ),
            "l_f32": list_column(
                rng,
                lambda k: rng.standard_normal(k).astype(np.float32).tolist(),
                value_type=pa.float32(),
            ),
            "l_f64": list_column(
                rng, lambda k: rng.standard_normal(k).tolist(), value_type=pa.float64()
            ),
            "ll_i64": list_column(rng, ints, large=True, value_type=pa.int64()),
            "ll_str": list_column(
                rng, lambda k: rng.choice(words, k).tolist(), large=True, value_type=pa.string()
            ),
            "l_i32": list_column(
                rng, lambda k: rng.integers(-100, 100, k).tolist(), value_type=pa.int32()
            ),
            "l_dict": pa.array(
                list_column(
                    rng, lambda k: rng.choice(words, k).tolist(), value_type=pa.string()
                ).to_pylist(),
                pa.list_(pa.dictionary(pa.int32(), pa.string())),
            ),
            "l_null": pa.nulls(ROWS, pa.list_(pa.int64())),
        }
    )


LISTS = {
    "l_i64": tf.int64,
    "l_str": tf.string,
    "l_f32": tf.float32,
    "l_f64": tf.float64,
    "ll_i64": tf.int64,
    "ll_str": tf.string,
    "l_i32": tf.int64,
    "l_dict": tf.string,
    "l_null": tf.int64,
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("parquet_op")


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "dictionary"])
def scalar_file(request, data_dir):
    path = data_dir / f"scalars-{request.param}.parquet"
    pq.write_table(scalar_table(), path, row_group_size=GROUP, use_dictionary=request.param)
    return str(path)


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "dictionary"])
def list_file(request, data_dir):
    path = data_dir / f"lists-{request.param}.parquet"
    pq.write_table(list_table(), path, row_group_size=GROUP, use_dictionary=request.param)
    return str(path)


@pytest.fixture(scope="module")
def plain_files(data_dir):
    """A scalar and a list file (plain encoding) for the tests that need one of each."""
    scalars, lists = data_dir / "scalars.parquet", data_dir / "lists.parquet"
    pq.write_table(scalar_table(), scalars, row_group_size=GROUP, use_dictionary=False)
    pq.write_table(list_table(), lists, row_group_size=GROUP, use_dictionary=["l_dict"])
    return str(scalars), str(lists)


# ---- values ---------------------------------------------------------------------------


def test_the_test_data_has_what_it_claims(scalar_file, list_file):
    meta = pq.ParquetFile(scalar_file).metadata
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [300] * 6 + [200]
    table = pq.read_table(scalar_file)
    assert pa.types.is_dictionary(table.schema.field("dict_str").type)
    assert pa.types.is_string_view(table.schema.field("view").type)
    for name in ("i32", "str", "flag"):
        column = table.column(name)
        assert column[0].is_valid is False and column[ROWS - 1].is_valid is False
        assert column.slice(600, 300).null_count == 300
    lists = pq.read_table(list_file)
    assert pa.types.is_large_list(lists.schema.field("ll_i64").type)
    flat = pc.list_flatten(lists.column("l_i64"))
    assert 0 < flat.null_count < len(flat)
    assert lists.column("l_str").slice(600, 300).null_count == 300


def test_scalar_types_match_pyarrow(scalar_file):
    check_all(scalar_file, SCALARS, RANGES)


def test_columns_one_at_a_time_and_in_other_order(scalar_file):
    for name in reversed(list(SCALARS)):
        check_all(scalar_file, {name: SCALARS[name]}, [(250, 950), (1999, 2500)])


def test_integers_read_as_other_widths_and_as_floats(scalar_file):
    check_all(
        scalar_file,
        {
            "small": tf.int32,
            "i8": tf.int32,
            "i32": tf.int64,
            "i16": tf.float32,
            "i64": tf.float64,
            "flag": tf.int64,
            "dict_i64": tf.float64,
            "u32": tf.float64,
        },
        RANGES[:5],
    )


def test_list_types_match_pyarrow(list_file):
    check_all(list_file, LISTS, RANGES, ragged=set(LISTS))


def test_list_values_by_hand(tmp_path):
    path = str(tmp_path / "hand.parquet")
    pq.write_table(
        pa.table(
            {
                "tags": pa.array([None, [1, None, 3], [], None, [5]], pa.list_(pa.int64())),
                "words": pa.array(
                    [["a"], None, [None, "bc"], [], None], pa.large_list(pa.string())
                ),
            }
        ),
        path,
        row_group_size=2,
    )
    got = read_rows(path, 1, 10, {"tags": tf.int64, "words": tf.string}, ragged={"tags", "words"})
    assert got["tags"].values.numpy().tolist() == [1, 0, 3, 5]
    assert got["tags"].valid.numpy().tolist() == [True, False, True, True]
    assert got["tags"].row_splits.numpy().tolist() == [0, 3, 3, 3, 4]
    assert got["words"].values.numpy().tolist() == [b"", b"bc"]
    assert got["words"].valid.numpy().tolist() == [False, True]
    assert got["words"].row_splits.numpy().tolist() == [0, 0, 2, 2, 2]
    assert got["tags"].ragged().to_list() == [[1, 0, 3], [], [], [5]]


def test_row_groups_of_different_sizes_and_empty_ones(tmp_path):
    path = str(tmp_path / "uneven.parquet")
    rng = np.random.default_rng(3)
    sizes = [0, 5, 1, 0, 137, 0, 2, 64, 1, 0]
    full = pa.table(
        {
            "x": pa.array(
                rng.integers(0, 1000, sum(sizes)), pa.int64(), mask=rng.random(sum(sizes)) < 0.2
            ),
            "s": pa.array([f"v{i}" for i in range(sum(sizes))]),
            "l": pa.array([[i] * (i % 3) for i in range(sum(sizes))], pa.list_(pa.int64())),
        }
    )
    with pq.ParquetWriter(path, full.schema) as writer:
        at = 0
        for size in sizes:
            writer.write_table(full.slice(at, size), row_group_size=max(size, 1))
            at += size
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == sizes
    bounds = np.cumsum([0] + sizes)
    ranges = [(a, b) for a in range(0, 212, 7) for b in (a, a + 1, a + 6, a + 70, 500)]
    ranges += [(int(b), int(b)) for b in bounds] + [(int(b), int(b) + 1) for b in bounds]
    for start, stop in ranges:
        got = read_rows(
            path, start, stop, {"x": tf.int64, "s": tf.string, "l": tf.int64}, ragged={"l"}
        )
        assert_same(path, got["x"], "x", start, stop, tf.int64)
        assert_same(path, got["s"], "s", start, stop, tf.string)
        assert_same(path, got["l"], "l", start, stop, tf.int64, ragged=True)


def test_file_with_no_rows(tmp_path):
    path = str(tmp_path / "none.parquet")
    pq.write_table(
        pa.table({"x": pa.array([], pa.int64()), "l": pa.array([], pa.list_(pa.string()))}), path
    )
    got = read_rows(path, 0, 10, {"x": tf.int64, "l": tf.string}, ragged={"l"})
    assert got["x"].values.shape == (0,) and got["x"].valid.shape == (0,)
    assert got["l"].values.shape == (0,) and got["l"].row_splits.numpy().tolist() == [0]


def test_large_row_group_read_in_parts_twice_and_rewritten(tmp_path):
    """Partial reads of one large row group go through the decoded-group cache: the
    second read of a range, and other ranges, give the same values; a file rewritten in
    place (same size) is read anew."""
    path = tmp_path / "big.parquet"
    n = 60_000
    nulls = np.random.default_rng(5).random(n) < 0.05

    def table(offset):
        return pa.table(
            {
                "x": pa.array(np.arange(n) + offset, pa.int64(), mask=nulls),
                "l": pa.array([[i + offset, i] for i in range(n)], pa.list_(pa.int64())),
            }
        )

    pq.write_table(table(0), path, row_group_size=n, use_dictionary=False, compression="none")
    ranges = [(100, 200), (100, 200), (59_990, 60_000), (0, 50), (30_000, 45_000), (100, 200)]
    for start, stop in ranges:
        got = read_rows(str(path), start, stop, {"x": tf.int64, "l": tf.int64}, ragged={"l"})
        assert_same(str(path), got["x"], "x", start, stop, tf.int64)
        assert_same(str(path), got["l"], "l", start, stop, tf.int64, ragged=True)
    size, mtime = path.stat().st_size, path.stat().st_mtime_ns
    pq.write_table(table(10**6), path, row_group_size=n, use_dictionary=False, compression="none")
    os.utime(path, ns=(mtime + 10**9, mtime + 10**9))
    assert path.stat().st_size == size
    got = read_rows(str(path), 100, 200, {"x": tf.int64, "l": tf.int64}, ragged={"l"})
    assert_same(str(path), got["x"], "x", 100, 200, tf.int64)
    assert got["l"].values.numpy()[0] == 10**6 + 100


def test_large_strings(tmp_path):
    path = str(tmp_path / "large.parquet")
    rng = np.random.default_rng(7)
    values = [None if i % 9 == 4 else (chr(97 + i % 26) * (100_000 + i)) for i in range(60)]
    lists = [
        None if i % 7 == 3 else [values[(i + k) % 60] for k in range(i % 3)] for i in range(60)
    ]
    pq.write_table(
        pa.table(
            {
                "s": pa.array(values),
                "b": pa.array(values, pa.large_binary()),
                "l": pa.array(lists, pa.list_(pa.string())),
            }
        ),
        path,
        row_group_size=7,
    )
    ranges = [(0, 60), (5, 6), (6, 22), (int(rng.integers(0, 30)), int(rng.integers(30, 70)))]
    ranges += [(1, 60, 3), (2, 60, 7), (6, 22, 5)]
    check_all(path, {"s": tf.string, "b": tf.string, "l": tf.string}, ranges, ragged={"l"})


# ---- in graphs ------------------------------------------------------------------------


def test_inside_a_tf_data_pipeline(plain_files):
    scalar_file, list_file = plain_files
    ranges = [r for r in RANGES if len(r) == 2]
    starts, stops = (list(column) for column in zip(*ranges))

    def read(path, start, stop):
        scalar = read_rows(path, start, stop, {"i64": tf.int64, "str": tf.string})
        lists = read_rows(list_file, start, stop, {"l_str": tf.string}, ragged={"l_str"})
        return {
            "i64": scalar["i64"].values,
            "i64_valid": scalar["i64"].valid,
            "str": scalar["str"].values,
            "l_str": lists["l_str"].ragged(),
            "l_str_valid": lists["l_str"].valid,
        }

    dataset = tf.data.Dataset.from_tensor_slices(([scalar_file] * len(ranges), starts, stops)).map(
        read, num_parallel_calls=4, deterministic=True
    )
    seen = 0
    for (start, stop), element in zip(ranges, dataset):
        want = expected(scalar_file, "i64", start, stop, tf.int64)
        np.testing.assert_array_equal(element["i64"].numpy(), want[0])
        np.testing.assert_array_equal(element["i64_valid"].numpy(), want[1])
        assert (
            element["str"].numpy().tolist()
            == expected(scalar_file, "str", start, stop, tf.string)[0].tolist()
        )
        values, valid, splits = expected(list_file, "l_str", start, stop, tf.string, True)
        ragged = element["l_str"]
        assert ragged.flat_values.numpy().tolist() == values.tolist()
        np.testing.assert_array_equal(ragged.row_splits.numpy(), splits)
        np.testing.assert_array_equal(element["l_str_valid"].numpy(), valid)
        seen += 1
    assert seen == len(ranges)


def test_inside_a_tf_function(plain_files):
    list_file = plain_files[1]

    @tf.function(
        input_signature=[
            tf.TensorSpec([], tf.string),
            tf.TensorSpec([], tf.int64),
            tf.TensorSpec([], tf.int64),
        ]
    )
    def read(path, start, stop):
        got = read_rows(
            path, start, stop, {"l_f32": tf.float32, "ll_i64": tf.int64}, ragged={"l_f32", "ll_i64"}
        )
        return got["l_f32"].values, got["l_f32"].row_splits, got["ll_i64"].ragged()

    for start, stop in [(250, 950), (0, 1), (1999, 3000), (5, 5)]:
        values, splits, ragged = read(tf.constant(list_file), start, stop)
        want = expected(list_file, "l_f32", start, stop, tf.float32, True)
        np.testing.assert_array_equal(values.numpy(), want[0])
        np.testing.assert_array_equal(splits.numpy(), want[2])
        want = expected(list_file, "ll_i64", start, stop, tf.int64, True)
        np.testing.assert_array_equal(ragged.flat_values.numpy(), want[0])
        np.testing.assert_array_equal(ragged.row_splits.numpy(), want[2])
    assert len(read.get_concrete_function().graph.get_operations()) > 0
    assert read.experimental_get_tracing_count() == 1


# ---- bad input ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def good_file(data_dir):
    path = data_dir / "good.parquet"
    pq.write_table(
        pa.table(
            {
                "id": pa.array(range(1000), pa.int64()),
                "name": pa.array([f"n{i}" for i in range(1000)]),
                "score": pa.array(np.linspace(0, 1, 1000)),
                "tags": pa.array([[i, i + 1] for i in range(1000)], pa.list_(pa.int64())),
            }
        ),
        path,
        row_group_size=100,
    )
    return str(path)


def read_error(path, start=0, stop=10, dtypes=None, ragged=frozenset()):
    with pytest.raises(tf.errors.OpError) as caught:
        read_rows(path, start, stop, dtypes or {"id": tf.int64}, ragged=set(ragged))
    return caught.value


def test_truncated_file(good_file, tmp_path):
    data = pathlib.Path(good_file).read_bytes()
    for keep in (len(data) // 2, len(data) - 3, 4, 12):
        path = tmp_path / f"truncated-{keep}.parquet"
        path.write_bytes(data[:keep])
        error = read_error(str(path))
        assert isinstance(error, tf.errors.InvalidArgumentError), error
        assert str(path) in error.message and "Parquet" in error.message, error.message


def test_garbage_and_empty_files(tmp_path):
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(np.random.default_rng(0).bytes(5000))
    error = read_error(str(garbage))
    assert isinstance(error, tf.errors.InvalidArgumentError)
    assert str(garbage) in error.message and "not a readable Parquet file" in error.message
    fake = tmp_path / "fake.parquet"  # the magic bytes at both ends, nothing valid between
    fake.write_bytes(b"PAR1" + b"\xff" * 100 + b"PAR1")
    error = read_error(str(fake))
    assert isinstance(error, tf.errors.InvalidArgumentError) and str(fake) in error.message
    empty = tmp_path / "empty.parquet"
    empty.write_bytes(b"")
    error = read_error(str(empty))
    assert isinstance(error, tf.errors.InvalidArgumentError)
    assert str(empty) in error.message and "0 bytes" in error.message


def test_missing_file_and_directory(tmp_path):
    missing = str(tmp_path / "nowhere" / "missing.parquet")
    error = read_error(missing)
    assert isinstance(error, tf.errors.NotFoundError) and missing in error.message
    error = read_error(str(tmp_path))
    assert isinstance(error, tf.errors.InvalidArgumentError)
    assert str(tmp_path) in error.message and "not a file" in error.message


@pytest.mark.parametrize(
    "dtypes, ragged, words",
    [
        ({"id": tf.int64, "clicks": tf.int64}, (), ["'clicks'", "missing"]),
        ({"name": tf.int64}, (), ["'name'", "string", "int64"]),
        ({"score": tf.int64}, (), ["'score'", "double", "int64"]),
        ({"id": tf.string}, (), ["'id'", "int64", "string"]),
        ({"id": tf.bool}, (), ["'id'", "bool"]),
        ({"tags": tf.int64}, (), ["'tags'", "list", "not a list"]),
        ({"id": tf.int64}, ("id",), ["'id'", "expected a list column"]),
        ({"tags": tf.string}, ("tags",), ["'tags'", "elements cannot be read as string"]),
    ],
    ids=[
        "missing-column",
        "string-as-int64",
        "double-as-int64",
        "int-as-string",
        "int-as-bool",
        "list-as-scalar",
        "scalar-as-list",
        "list-of-int-as-string",
    ],
)
def test_column_errors_name_file_and_column(good_file, dtypes, ragged, words):
    error = read_error(good_file, dtypes=dtypes, ragged=ragged)
    assert isinstance(error, tf.errors.InvalidArgumentError), error
    assert good_file in error.message, error.message
    for word in words:
        assert word in error.message, error.message


@pytest.mark.parametrize("start, stop", [(-1, 10), (-5, -1), (10, 5), (1, 0)])
def test_bad_ranges(good_file, start, stop):
    error = read_error(good_file, start, stop)
    assert isinstance(error, tf.errors.InvalidArgumentError)
    assert good_file in error.message and "bad row range" in error.message
    assert f"[{start}, {stop})" in error.message


HOSTILE_SCRIPT = """
import sys
import numpy as np
import pyarrow as pa, pyarrow.parquet as pq
import tensorflow as tf
from recsys_dist.ops import load, read_rows

def error_of(call):
    try:
        call()
    except tf.errors.InvalidArgumentError as e:
        return e.message
    raise AssertionError("no error")

directory = sys.argv[1]
good = directory + "/good.parquet"
pq.write_table(pa.table({"id": pa.array(range(10), pa.int64())}), good)
# Inputs that are not scalars (scalar<>() on them would abort the process).
assert "path must be a scalar" in error_of(
    lambda: read_rows(tf.constant([good, good]), 0, 1, {"id": tf.int64}))
assert "stop must be a scalar" in error_of(
    lambda: read_rows(good, 0, tf.constant([1, 2], tf.int64), {"id": tf.int64}))
assert "stride must be a scalar" in error_of(
    lambda: read_rows(good, 0, 1, {"id": tf.int64}, stride=tf.constant([1, 2], tf.int64)))
assert "bad row range [0, 5) with stride 0" in error_of(
    lambda: read_rows(good, 0, 5, {"id": tf.int64}, stride=0))
assert "N must equal" in error_of(lambda: load().parquet_read_rows(
    path=good, start=0, stop=1, stride=1, columns=["id"], dtypes=[tf.int64], ragged=[False],
    N=2))
# Two top-level columns of one name.
duplicated = directory + "/duplicated.parquet"
pq.write_table(pa.Table.from_arrays([pa.array([1, 2]), pa.array([3, 4])], ["a", "a"]),
               duplicated)
message = error_of(lambda: read_rows(duplicated, 0, 2, {"a": tf.int64}))
assert duplicated in message and "'a' appears 2 times" in message, message
# Random bytes overwritten anywhere in a file, compressed or not.
n = 20_000
table = pa.table({"x": pa.array(np.arange(n)), "s": [f"v{i}" for i in range(n)],
                  "l": pa.array([[i] * (i % 4) for i in range(n)])})
failed = ok = 0
for compression in ("none", "snappy"):
    path = f"{directory}/corrupt-{compression}.parquet"
    pq.write_table(table, path, row_group_size=5_000, compression=compression)
    data = open(path, "rb").read()
    for seed in range(40):
        rng = np.random.default_rng(seed)
        broken = bytearray(data)
        for at in rng.integers(4, len(data) - 8, 1 + seed % 30):
            broken[at:at + 4] = rng.bytes(4)
        open(path, "wb").write(bytes(broken))
        try:
            read_rows(path, 0, n, {"x": tf.int64, "s": tf.string, "l": tf.int64},
                      ragged={"l"})
            ok += 1
        except tf.errors.OpError as e:
            assert path in e.message, e.message
            failed += 1
assert failed > 0, "the corruption never made a read fail"
print("survived", ok, failed)
"""


def test_hostile_inputs_fail_without_crashing(tmp_path):
    """In a subprocess, so that a crash shows as one failed test: non-scalar inputs, a
    wrong N, duplicate column names, random bytes overwritten anywhere in files. Each
    gives an error naming the file (or, where the damage hit nothing checked, values)."""
    result = subprocess.run(
        [sys.executable, "-c", HOSTILE_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-3000:])
    assert "survived" in result.stdout


# ---- S3 -------------------------------------------------------------------------------

S3_EXIT_SCRIPT = """
import sys
import tensorflow as tf
from recsys_dist.ops import read_rows
got = read_rows(sys.argv[1], 0, 5, {"x": tf.int64})["x"].values.numpy().tolist()
try:
    read_rows(sys.argv[1] + ".missing", 0, 5, {"x": tf.int64})
except tf.errors.NotFoundError:
    pass
print("values", got, flush=True)
"""


# Whether the subprocess below read S3 without crashing: if not, the S3 tests of this
# process are skipped, so a crash there cannot take the rest of the test run with it.
_S3_IN_SUBPROCESS: dict[str, bool] = {}


def s3_safe_in_process():
    if _S3_IN_SUBPROCESS.get("ok") is False:
        pytest.skip(
            "reading S3 crashed a subprocess (test_a_process_that_read_s3_exits_"
            "cleanly); not tried in this process"
        )


def test_a_process_that_read_s3_exits_cleanly(s3_server, tmp_path):
    """The op initializes Arrow's S3 itself (the process has not touched pyarrow.fs)
    and finalizes it at exit: exit code 0, not a crash in static teardown."""
    pq.write_table(pa.table({"x": pa.array(range(10), pa.int64())}), tmp_path / "x.parquet")
    client, bucket = s3_server["client"], s3_server["bucket"]
    client.upload_file(str(tmp_path / "x.parquet"), bucket, "exit/x.parquet")
    for _ in range(2):
        result = subprocess.run(
            [sys.executable, "-c", S3_EXIT_SCRIPT, f"s3://{bucket}/exit/x.parquet"],
            env={**os.environ, **s3_server["env"]},
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        _S3_IN_SUBPROCESS["ok"] = result.returncode == 0
        assert result.returncode == 0, (result.returncode, result.stderr[-3000:])
        assert "values [0, 1, 2, 3, 4]" in result.stdout


def test_s3_reads_the_same_values_as_local(s3_server, plain_files, data_dir):
    s3_safe_in_process()
    scalar_file, list_file = plain_files
    local = data_dir / "s3-upload"
    local.mkdir()
    for source in plain_files:
        (local / os.path.basename(source)).write_bytes(pathlib.Path(source).read_bytes())
    url = upload_dir(s3_server["client"], s3_server["bucket"], local, "op-values")
    for source, columns, ragged in [(scalar_file, SCALARS, ()), (list_file, LISTS, LISTS)]:
        remote = f"{url}/{os.path.basename(source)}"
        for start, stop in [(0, ROWS), (250, 950), (1999, 5000), (7, 7)]:
            got = read_rows(remote, start, stop, columns, ragged=set(ragged))
            want = read_rows(source, start, stop, columns, ragged=set(ragged))
            for name in columns:
                for part in ("values", "valid", "row_splits"):
                    a, b = getattr(got[name], part), getattr(want[name], part)
                    assert (a is None) == (b is None)
                    if a is not None:
                        assert a.numpy().tolist() == b.numpy().tolist(), (remote, name, part)
            assert_same(
                source,
                got["l_str" if ragged else "str"],
                "l_str" if ragged else "str",
                start,
                stop,
                tf.string,
                bool(ragged),
            )


def test_s3_missing_key_and_bucket_name_the_uri(s3_server):
    s3_safe_in_process()
    for uri in (
        f"s3://{s3_server['bucket']}/no/such/key.parquet",
        "s3://no-such-bucket-recsys/key.parquet",
    ):
        error = read_error(uri)
        assert isinstance(error, tf.errors.NotFoundError), error
        assert uri in error.message, error.message


# ---- building -------------------------------------------------------------------------


def test_no_compiler_says_what_to_install(tmp_path, monkeypatch):
    directory = tmp_path / "ops"
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    monkeypatch.setenv("RECSYS_DIST_OPS_DIR", str(directory))
    with pytest.raises(build.OpBuildError) as caught:
        build.library_path()
    message = str(caught.value)
    assert "/nonexistent/g++" in message and "C++20 compiler" in message
    assert "apt-get install g++" in message and "dnf install gcc-c++" in message
    assert not directory.exists() or not list(directory.glob("*.so"))
    # The command-line entry point: exit code 2 and the same advice, no traceback.
    result = subprocess.run(
        [sys.executable, "-m", "recsys_dist.ops.build"],
        env={**os.environ, "CXX": "/nonexistent/g++", "RECSYS_DIST_OPS_DIR": str(directory)},
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "C++20 compiler" in result.stderr and "Traceback" not in result.stderr


def test_build_key_covers_the_compiler_and_the_source(monkeypatch, tmp_path):
    key = build.build_key("g++ (Debian 12.2.0-14) 12.2.0")
    assert key == build.build_key("g++ (Debian 12.2.0-14) 12.2.0")
    assert key != build.build_key("g++ (Debian 13.1.0-1) 13.1.0")
    assert key != build.build_key("clang version 17.0.6")
    for index, original in enumerate(build.SOURCES):  # each source file counts
        source = tmp_path / pathlib.Path(original).name
        source.write_bytes(pathlib.Path(original).read_bytes() + b"\n// changed\n")
        changed = list(build.SOURCES)
        changed[index] = str(source)
        monkeypatch.setattr(build, "SOURCES", changed)
        assert build.build_key("g++ (Debian 12.2.0-14) 12.2.0") != key
        monkeypatch.undo()


@pytest.mark.parametrize("package", ["tensorflow", "pyarrow"])
def test_build_key_covers_the_tensorflow_and_pyarrow_versions(monkeypatch, package):
    """A library built for another TensorFlow or pyarrow is never the one loaded."""
    module = __import__(package)
    key = build.build_key("g++ 12")
    monkeypatch.setattr(module, "__version__", module.__version__ + ".post1")
    assert build.build_key("g++ 12") != key


def _build_signals_and(monkeypatch, tmp_path, name: str, source: str) -> pathlib.Path:
    """Builds the library in ``tmp_path/ops`` (returned, not created) from two sources:
    the signal thread (the one without TensorFlow headers) and ``name`` with ``source``."""
    directory = tmp_path / "ops"
    monkeypatch.setenv("RECSYS_DIST_OPS_DIR", str(directory))
    monkeypatch.delenv("CXX", raising=False)
    (tmp_path / name).write_text(source)
    signals = next(s for s in build.SOURCES if s.endswith("exit_on_signals.cc"))
    monkeypatch.setattr(build, "SOURCES", [signals, str(tmp_path / name)])
    return directory


def test_a_changed_build_key_builds_a_new_library(monkeypatch, tmp_path):
    """One real compile and link into a fresh directory under a fake compiler version: the
    library is named by the new key; a library for another key is neither loaded nor
    kept; the next call finds the built one without compiling. The sources are the
    signal thread (the one without TensorFlow headers) and a one-line file beside it:
    objects compiled apart and linked, without a minute of compiling in the suite."""
    directory = _build_signals_and(
        monkeypatch, tmp_path, "second.cc", 'extern "C" int recsys_second_source() { return 2; }\n'
    )
    directory.mkdir()
    stale = directory / f"{build.NAME}-{build.build_key('g++ 1.0 (stale)')}.so"
    stale.write_bytes(b"not a library")
    monkeypatch.setattr(build, "_compiler_version", lambda cxx: "g++ 99.0 (a new one)")
    path = build.library_path()
    assert os.path.basename(path) == f"{build.NAME}-{build.build_key('g++ 99.0 (a new one)')}.so"
    assert pathlib.Path(path).read_bytes()[:4] == b"\x7fELF"
    library = ctypes.CDLL(path)
    assert library.recsys_second_source() == 2 and library.recsys_watch_signals
    assert not stale.exists()
    assert not list(directory.glob("*.tmp")) and not list(directory.glob(".objects-*"))
    built = os.stat(path).st_mtime_ns
    calls = []
    for name in ("run", "Popen"):  # the compiler's version and the compiles
        monkeypatch.setattr(
            build.subprocess, name, lambda *a, **k: calls.append(a) or pytest.fail("recompiled")
        )
    assert build.library_path() == path and os.stat(path).st_mtime_ns == built
    assert not calls


def test_a_source_that_does_not_compile_is_named_with_the_compiler_output(monkeypatch, tmp_path):
    directory = _build_signals_and(
        monkeypatch, tmp_path, "broken.cc", "int recsys_broken( { return 1; }\n"
    )
    broken = tmp_path / "broken.cc"
    with pytest.raises(build.OpBuildError) as caught:
        build.library_path()
    message = str(caught.value)
    assert "failed (exit 1)" in message and f"-c {broken} -o" in message
    assert "broken.cc:1" in message  # the compiler's own diagnostic, with the line
    assert not list(directory.glob("*.so")) and not list(directory.glob("*.tmp"))
    assert not list(directory.glob(".objects-*"))


def test_a_compile_that_fails_is_named_with_its_output_and_no_library_is_left(
    tmp_path, monkeypatch
):
    """The sources compile side by side; the first failing one (in the order of SOURCES)
    is the one named, with its compiler output, even when others also fail or finish
    later."""
    broken = tmp_path / "broken.cc"
    broken.write_text("int f() { return undeclared_name; }\n")
    also_broken = tmp_path / "also_broken.cc"
    also_broken.write_text("this is not C++\n")
    directory = tmp_path / "ops"
    monkeypatch.setenv("RECSYS_DIST_OPS_DIR", str(directory))
    monkeypatch.setattr(build, "SOURCES", [build.SOURCES[-1], str(broken), str(also_broken)])
    with pytest.raises(build.OpBuildError) as caught:
        build.library_path()
    message = str(caught.value)
    assert "failed (exit 1)" in message and "undeclared_name" in message
    assert "also_broken.cc -o" not in message  # the command named is the first failure's
    assert not list(directory.glob("*.so")) and not list(directory.glob("*.tmp"))
