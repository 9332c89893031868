"""The dataset converters of ``benchmarks/datasets/`` (``ml1m_subset``, ``ciao``,
``talkingdata``, ``yahoo_r3`` and what they share in ``common``), each run on a few dozen
rows made up here in its dataset's raw format: ten ``dt=`` partitions of one file each,
the rows per split, the time order, the label rule, the columns its feature config in
``features/`` reads, and bad input refused with one message naming the file, leaving no
output behind."""

from __future__ import annotations

import datetime
import gzip
import pathlib
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.io

from benchmarks.datasets import ciao, common, ml1m_subset, talkingdata, yahoo_r3
from recsys_dist.features.config import load_feature_config
from tests.support.paths import REPO

DATES = [f"2026-01-{day:02d}" for day in range(1, 11)]
#: Rows of train (days 1-8), validation (day 9) and test (day 10) for 43 time-ordered rows:
#: slices of 5, 5, 5, then 4.
SPLIT_43 = (35, 4, 4)


def read_days(out: pathlib.Path) -> list[pa.Table]:
    """The ten days' tables, after checking that each day is one file and nothing else."""
    assert sorted(p.name for p in out.iterdir()) == [f"dt={d}" for d in DATES]
    for date in DATES:
        assert [p.name for p in (out / f"dt={date}").iterdir()] == ["part-00000.parquet"]
    return [pq.read_table(out / f"dt={d}" / "part-00000.parquet") for d in DATES]


def split_rows(days: list[pa.Table]) -> tuple[int, int, int]:
    return sum(t.num_rows for t in days[:8]), days[8].num_rows, days[9].num_rows


def assert_in_time_order(days: list[pa.Table]) -> None:
    """Every row of a day is not later than any row of the next day, nor of the next row."""
    times = [t["timestamp"].to_numpy() for t in days]
    for before, after in zip(times, times[1:]):
        assert before.max() <= after.min()
    assert (np.diff(np.concatenate(times)) >= 0).all()


def assert_feature_config_reads(name: str, table: pa.Table) -> None:
    """Every column ``features/<name>.yaml`` reads is an int64 column of the output."""
    config = load_feature_config(REPO / "features" / f"{name}.yaml")
    for spec in [*config.features.values(), *config.labels.values()]:
        assert table.schema.field(config.column_of(spec)).type == pa.int64()


def refused(module, raw: pathlib.Path, out: pathlib.Path, *names: str) -> str:
    """The message of a refused run, checked to name each of ``names`` and to leave no
    output."""
    with pytest.raises(SystemExit) as failure:
        module.main(["--raw", str(raw), "--out", str(out)])
    message = str(failure.value.code)
    assert message.startswith("error: "), message
    assert all(name in message for name in names), message
    assert not out.exists() and not list(out.parent.glob(f".{out.name}*"))
    return message


def write_lines(path: pathlib.Path, lines: list[str]) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def ratings(rows: int, seed: int, time_base: int = 978_300_000) -> np.ndarray:
    """``rows`` x (user, item, rating, time) with repeated times, grouped by user as the
    MovieLens file is (so not in time order)."""
    rng = np.random.default_rng(seed)
    data = np.stack(
        [
            np.sort(rng.integers(1, 6, rows)),
            rng.integers(1, 30, rows),
            rng.integers(1, 6, rows),
            time_base + 60 * rng.integers(0, 25, rows),
        ],
        axis=1,
    )
    data[:5, 2] = [1, 3, 4, 5, 2]  # every rating value, for the label rule
    return data


def test_ml1m_subset_splits_in_time_order_with_ties_in_file_order(tmp_path):
    raw = ratings(43, seed=1)
    write_lines(tmp_path / "raw" / "ratings.dat", ["::".join(map(str, r)) for r in raw])
    assert ml1m_subset.main(["--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "out")]) == 0
    days = read_days(tmp_path / "out")
    assert split_rows(days) == SPLIT_43
    assert_in_time_order(days)
    table = pa.concat_tables(days)
    assert table.column_names == ["user_id", "item_id", "rating", "timestamp", "click"]
    expected = sorted(raw.tolist(), key=lambda r: r[3])  # a stable sort: ties in file order
    assert [list(r) for r in zip(*(table[c].to_pylist() for c in table.column_names[:4]))] == (
        expected
    )
    assert table["click"].to_pylist() == [int(r >= 4) for r in table["rating"].to_pylist()]
    assert_feature_config_reads("ml1m_subset", table)


def test_ml1m_subset_reads_the_gzip_file(tmp_path):
    text = "".join("::".join(map(str, r)) + "\n" for r in ratings(20, seed=2))
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "ratings.dat.gz").write_bytes(gzip.compress(text.encode()))
    ml1m_subset.main(["--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "out")])
    assert split_rows(read_days(tmp_path / "out")) == (16, 2, 2)


@pytest.mark.parametrize(
    "line, expected",
    [
        ("1::2::5", "line 3: expected 4 fields separated by '::'"),
        ("1::2::5::97830000::7", "line 3: expected 4 fields"),
        ("1::2::five::978300000", "line 3: Rating: expected an integer, got 'five'"),
        ("1::2::6::978300000", "line 3: Rating: expected an integer in 1..5, got '6'"),
        ("", "line 3: expected 4 fields"),
    ],
)
def test_ml1m_subset_refuses_a_malformed_line(tmp_path, line, expected):
    good = ["1::2::5::978300000", "1::3::4::978300001"]
    path = write_lines(tmp_path / "raw" / "ratings.dat", [*good, line, *good])
    refused(ml1m_subset, tmp_path / "raw", tmp_path / "out", str(path), expected)


def test_a_missing_raw_file_or_folder_is_refused(tmp_path):
    (tmp_path / "raw").mkdir()
    refused(ml1m_subset, tmp_path / "raw", tmp_path / "out", "ratings.dat", "no such file")
    refused(ml1m_subset, tmp_path / "nowhere", tmp_path / "out", "nowhere", "no such directory")
    refused(ciao, tmp_path / "raw", tmp_path / "out", "rating_with_timestamp.mat", "ratings.csv")
    refused(yahoo_r3, tmp_path / "raw", tmp_path / "out", "user.txt", "no such file")
    write_lines(tmp_path / "raw" / "user.txt", ["0,1,5"])
    refused(yahoo_r3, tmp_path / "raw", tmp_path / "out", "random.txt", "no such file")


def test_a_refusal_exits_1_with_one_line_and_no_traceback(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.datasets.talkingdata"]
        + ["--raw", str(tmp_path), "--out", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == f"error: {tmp_path / 'train_sample_a.csv'}: no such file; expected " + (
        f"{talkingdata.WHAT}\n"
    )


def ciao_rows(rows: int, seed: int) -> np.ndarray:
    """``rows`` x (user, item, category, rating, helpfulness, time), times at day
    resolution with ties, not in time order."""
    data = ratings(rows, seed, time_base=959_670_000)
    rng = np.random.default_rng(seed)
    data[:, 3] = 959_670_000 + 86_400 * rng.integers(0, 12, rows)
    data[5, 2] = 0  # a rating of 0 is in the data: a negative
    extra = np.stack([rng.integers(1, 29, rows), rng.integers(0, 6, rows)], axis=1)
    return np.concatenate([data[:, :2], extra[:, :1], data[:, 2:3], extra[:, 1:], data[:, 3:]], 1)


def test_ciao_reads_the_mat_file_and_the_csv_alike(tmp_path):
    raw = ciao_rows(43, seed=3)
    (tmp_path / "mat").mkdir()
    scipy.io.savemat(
        tmp_path / "mat" / "rating_with_timestamp.mat", {"rating": raw.astype(np.int32)}
    )
    header = ",".join(ciao.RAW_COLUMNS)
    write_lines(tmp_path / "csv" / "ratings.csv", [header] + [",".join(map(str, r)) for r in raw])
    for source in ("mat", "csv"):
        ciao.main(["--raw", str(tmp_path / source), "--out", str(tmp_path / f"out_{source}")])
    days = read_days(tmp_path / "out_mat")
    assert pa.concat_tables(days).equals(pa.concat_tables(read_days(tmp_path / "out_csv")))
    assert split_rows(days) == SPLIT_43
    assert_in_time_order(days)
    table = pa.concat_tables(days)
    assert table.column_names == [
        "user_id", "item_id", "category_id", "rating", "timestamp", "click"
    ]  # fmt: skip
    assert table["click"].to_pylist() == [int(r >= 4) for r in table["rating"].to_pylist()]
    assert sorted(table["category_id"].to_pylist()) == sorted(raw[:, 2].tolist())
    assert_feature_config_reads("ciao", table)


@pytest.mark.parametrize(
    "matrix, expected",
    [
        (np.ones((4, 5), np.int32), "variable 'rating' has shape (4, 5); expected N x 6"),
        (np.full((4, 6), 0.5), "variable 'rating' holds float64; expected integers"),
        (np.full((4, 6), 9, np.int32), "row 1 of 'rating': rating 9 is outside 0..5"),
        ({"other": np.ones((4, 6), np.int32)}, "no variable 'rating'"),
    ],
    ids=["columns", "floats", "rating", "variable"],
)
def test_ciao_refuses_a_mat_file_of_another_shape(tmp_path, matrix, expected):
    (tmp_path / "raw").mkdir()
    path = tmp_path / "raw" / "rating_with_timestamp.mat"
    scipy.io.savemat(path, matrix if isinstance(matrix, dict) else {"rating": matrix})
    refused(ciao, tmp_path / "raw", tmp_path / "out", str(path), expected)


def test_ciao_refuses_a_file_that_is_no_mat_file_and_a_csv_of_another_header(tmp_path):
    path = write_lines(tmp_path / "raw" / "rating_with_timestamp.mat", ["1,2,3"])
    refused(ciao, tmp_path / "raw", tmp_path / "out", str(path), "not a MATLAB file")
    path.unlink()
    path = write_lines(tmp_path / "raw" / "ratings.csv", ["user,item,rating", "1,2,3"])
    refused(ciao, tmp_path / "raw", tmp_path / "out", str(path), "line 1: expected the header")


def talkingdata_lines(rows: int, start: str, seed: int) -> list[str]:
    """A header and ``rows`` clicks within 20 minutes from ``start``, not in time order;
    ``attributed_time`` is set on the clicks with a download only."""
    rng = np.random.default_rng(seed)
    first = datetime.datetime.fromisoformat(start)
    lines = [",".join(talkingdata.RAW_COLUMNS)]
    for row in range(rows):
        clicked = first + datetime.timedelta(seconds=int(rng.integers(0, 1200)))
        attributed = int(row % 7 == 0)
        later = str(clicked + datetime.timedelta(seconds=60)) if attributed else ""
        ids = rng.integers(0, 500, 5)
        lines.append(",".join([*map(str, ids), str(clicked), later, str(attributed)]))
    return lines


def test_talkingdata_merges_both_files_in_click_time_order(tmp_path):
    write_lines(
        tmp_path / "raw" / "train_sample_a.csv", talkingdata_lines(25, "2017-11-07 11:31:40", 4)
    )
    write_lines(
        tmp_path / "raw" / "train_sample_b.csv", talkingdata_lines(18, "2017-11-07 14:24:01", 5)
    )
    talkingdata.main(["--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "out")])
    days = read_days(tmp_path / "out")
    assert split_rows(days) == SPLIT_43
    assert_in_time_order(days)
    table = pa.concat_tables(days)
    assert table.column_names == [
        "ip", "app", "device", "os", "channel", "click_hour", "timestamp", "is_attributed"
    ]  # fmt: skip
    assert table["click_hour"].to_pylist() == [
        datetime.datetime.fromtimestamp(t, datetime.UTC).hour
        for t in table["timestamp"].to_pylist()
    ]
    assert sorted(set(table["click_hour"].to_pylist())) == [11, 14]
    assert sum(table["is_attributed"].to_pylist()) == 4 + 3  # rows 0, 7, 14, 21 and 0, 7, 14
    assert_feature_config_reads("talkingdata", table)


@pytest.mark.parametrize(
    "field, value, expected",
    [
        (5, "2017-11-07T11:49:53", "click_time: expected a time YYYY-MM-DD HH:MM:SS"),
        (5, "2017-13-07 11:49:53", "click_time: expected a time YYYY-MM-DD HH:MM:SS"),
        (7, "2", "is_attributed: expected an integer in 0..1, got '2'"),
        (0, "-3", "ip: expected an integer in 0.., got '-3'"),
    ],
)
def test_talkingdata_refuses_a_bad_value(tmp_path, field, value, expected):
    write_lines(
        tmp_path / "raw" / "train_sample_a.csv", talkingdata_lines(10, "2017-11-07 11:31:40", 6)
    )
    lines = talkingdata_lines(10, "2017-11-07 14:24:01", 7)
    fields = lines[4].split(",")
    fields[field] = value
    lines[4] = ",".join(fields)
    path = write_lines(tmp_path / "raw" / "train_sample_b.csv", lines)
    refused(talkingdata, tmp_path / "raw", tmp_path / "out", f"{path}: line 5: {expected}")


def test_yahoo_r3_trains_on_the_chosen_songs_and_tests_on_the_random_ones(tmp_path):
    rng = np.random.default_rng(8)
    chosen = [
        f"{u},{i},{r}"
        for u, i, r in zip(np.repeat(np.arange(9), 5), rng.permutation(45), rng.integers(1, 6, 45))
    ]
    shown = [
        f"{u},{i},{r}"
        for u, i, r in zip(np.repeat(np.arange(3), 4), range(12), rng.integers(1, 6, 12))
    ]
    write_lines(tmp_path / "raw" / "user.txt", chosen)
    write_lines(tmp_path / "raw" / "random.txt", shown)
    for out in ("out", "again"):
        yahoo_r3.main(["--raw", str(tmp_path / "raw"), "--out", str(tmp_path / out)])
    days = read_days(tmp_path / "out")
    assert [t.num_rows for t in days] == [5] * 9 + [12]
    assert all(a.equals(b) for a, b in zip(days, read_days(tmp_path / "again")))
    assert days[0].column_names == ["user_id", "item_id", "rating", "click"]

    def lines_of(table):
        return [
            f"{u},{i},{r}"
            for u, i, r in zip(*(table[c].to_pylist() for c in table.column_names[:3]))
        ]

    assert sorted(lines_of(pa.concat_tables(days[:9]))) == sorted(chosen)
    assert lines_of(days[9]) == shown  # in file order
    assert lines_of(pa.concat_tables(days[:9])) != chosen  # not in file order
    table = pa.concat_tables(days)
    assert table["click"].to_pylist() == [int(r >= 4) for r in table["rating"].to_pylist()]
    assert_feature_config_reads("yahoo_r3", table)


def test_yahoo_r3_refuses_a_malformed_line(tmp_path):
    write_lines(tmp_path / "raw" / "user.txt", ["0,1,5", "0,2,4"])
    path = write_lines(tmp_path / "raw" / "random.txt", ["0,3,1", "0;4;1"])
    refused(yahoo_r3, tmp_path / "raw", tmp_path / "out", f"{path}: line 2: expected 3 fields")


def test_an_existing_output_is_replaced_only_with_overwrite(tmp_path):
    write_lines(tmp_path / "raw" / "ratings.dat", ["::".join(map(str, r)) for r in ratings(20, 9)])
    (tmp_path / "out" / "dt=2025-12-31").mkdir(parents=True)
    args = ["--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit, match="exists and is not an empty folder.*--overwrite"):
        ml1m_subset.main(args)
    assert ml1m_subset.main([*args, "--overwrite"]) == 0
    assert split_rows(read_days(tmp_path / "out")) == (16, 2, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "raw"]


def test_an_output_inside_the_repository_is_refused_unless_git_ignores_it(tmp_path):
    (tmp_path / "raw").mkdir()
    out = common.ROOT / "benchmarks" / "datasets" / "converted"
    with pytest.raises(SystemExit) as failure:
        ml1m_subset.main(["--raw", str(tmp_path / "raw"), "--out", str(out)])
    assert failure.value.code == 2 and not out.exists()


def test_slices_are_consecutive_and_as_equal_as_the_rows_allow():
    key = np.array([3, 1, 2, 1, 0, 2, 3])
    slices = common.ordered_slices(key, 3)
    assert [s.tolist() for s in slices] == [[4, 1, 3], [2, 5], [0, 6]]


@pytest.mark.parametrize("name", ["ml1m_subset", "ciao", "talkingdata", "yahoo_r3"])
def test_each_dataset_has_a_config_that_sets_no_training_setting(name):
    """The benchmark's configs are what a new user would write: the features, the split
    and a model; every training setting stays the framework's default."""
    import yaml

    from recsys_dist.config import load_config

    path = REPO / "benchmarks" / "datasets" / "configs" / f"{name}.yaml"
    config = load_config(str(path))
    assert pathlib.Path(config.features.file).resolve() == REPO / "features" / f"{name}.yaml"
    written = yaml.safe_load(path.read_text())
    assert set(written) == {"features", "data", "model"}
    assert set(written["data"]) == {"path", "train", "validation", "eval"}
    assert config.labels == [written["model"]["labels"][0]]
