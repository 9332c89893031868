"""Bad Parquet through the command line: `validate` and `train` both stop with exit 3 and
one line naming the file (and column or row group), before any server starts; nulls
anywhere else are read under the null policy, never a crash.

The same cases fed to the op directly are in tests/unit/ops/test_parquet_op.py.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from recsys_dist.cli import main
from tests.support.data import small_table, write_parquet

DAY = "dt=2026-01-01"


def _truncated(path: pathlib.Path) -> None:
    write_parquet(path, small_table(50))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garbage(path: pathlib.Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(np.random.default_rng(0).bytes(5000))


def _empty(path: pathlib.Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")


def _table(**columns):
    return lambda path: write_parquet(path, small_table(50, **columns))


CASES = {
    "truncated": (
        _truncated,
        r"{bad}: not a readable Parquet file, it may be corrupt or "
        r"truncated",
    ),
    "garbage": (_garbage, r"{bad}: not a readable Parquet file"),
    "zero bytes": (_empty, r"{bad}: empty file \(0 bytes\)"),
    "wrong type": (
        _table(ad=pa.array(["x"] * 50)),
        r"{bad}: column 'ad' has type string, but feature 'ad' needs an integer "
        r"column",
    ),
    "list for a scalar": (
        _table(ad=pa.array([[1, 2]] * 50, pa.list_(pa.int64()))),
        r"{bad}: column 'ad' has type list<\w+: int64> \(a list column\), "
        r"but feature 'ad' needs an integer column",
    ),
    "scalar for a list": (
        _table(tags=pa.array(np.arange(50), pa.int64())),
        r"{bad}: column 'tags' has type int64, but feature 'tags' needs a "
        r"list<int64> or list<string> column, or a delimited string column",
    ),
    "schema differs from the day's other file": (
        _table(price=pa.array(np.ones(50), pa.float64())),
        r"column 'price' is stored as float32 in {good} but as float64 in {bad}; every file "
        r"of a job must store a column with the same type",
    ),
    "null label": (
        _table(click=pa.array([1, 0, None] + [0] * 47, pa.int64())),
        r"{bad}: label column 'click' has 1 null\(s\) in row group 0; every row "
        r"needs a label",
    ),
}


@pytest.fixture
def bad_day(tmp_path, small_config, request):
    make, pattern = CASES[request.param]
    good = write_parquet(tmp_path / "data" / DAY / "a.parquet", small_table(50, seed=1))
    bad = tmp_path / "data" / DAY / "b.parquet"
    make(bad)
    config = small_config(train={"dates": "2026-01-01"})
    return config, pattern.format(good=good, bad=bad), tmp_path


@pytest.mark.parametrize("bad_day", list(CASES), indirect=True)
@pytest.mark.parametrize("command", ["validate", "train"])
def test_bad_file_stops_the_command_naming_the_file(bad_day, command, capsys):
    import re

    config, pattern, tmp_path = bad_day
    argv = (
        ["validate", "--config", config]
        if command == "validate"
        else ["train", "--config", config, "--model-dir", str(tmp_path / "run"), "--no-eval"]
    )
    assert main(argv) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err and re.search(pattern, err[-1]), err
    assert err[-1].startswith("error: ")
    assert not (tmp_path / "run" / "checkpoints").exists()  # nothing started, nothing written


@pytest.mark.parametrize("bad_day", ["truncated"], indirect=True)
def test_bad_file_exit_code_and_no_traceback_from_the_console_script(bad_day):
    config, pattern, tmp_path = bad_day
    result = subprocess.run(
        [
            str(pathlib.Path(sys.executable).parent / "recsys-dist"),
            "train",
            "--config",
            config,
            "--model-dir",
            str(tmp_path / "run"),
            "--no-eval",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 3
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")


def test_nulls_anywhere_else_are_read_under_the_null_policy(tmp_path, small_config, capsys):
    n = 120
    ad = [None if i in (0, n - 1) else i for i in range(n)]  # first and last row
    price = [None if i < 40 else 1.5 for i in range(n)]  # a whole row group
    site = pa.nulls(n, pa.string())  # every row
    tags = [None if i % 5 == 0 else [i, None, i + 1] for i in range(n)]  # inside lists
    table = small_table(
        n,
        ad=pa.array(ad, pa.int64()),
        price=pa.array(price, pa.float32()),
        site=site,
        tags=pa.array(tags, pa.list_(pa.int64())),
    )
    write_parquet(tmp_path / "data" / DAY / "a.parquet", table, row_group_size=40)
    config = small_config(train={"dates": "2026-01-01"})
    assert main(["validate", "--config", config, "--scan"]) == 0
    out = capsys.readouterr().out
    assert "scan     read 120 rows in-graph" in out and "0 bad rows skipped" in out

    from recsys_dist.config import load_config
    from recsys_dist.data.input_fn import prepare_input

    pipeline = prepare_input(load_config(config), "train", 1)
    (batch,) = list(pipeline.local_dataset(training=False).rebatch(n))
    features = batch["features"]
    assert features["ad"].numpy()[[0, n - 1]].tolist() == [999, 999]  # the missing row
    assert features["site"].numpy().tolist() == [999] * n
    assert features["price"].numpy()[:40].tolist() == [0.0] * 40  # fill_value 0
    weights = features["tags"]["weights"].numpy()
    assert weights[0].tolist() == [0.0, 0.0, 0.0]  # null list: empty
    assert weights[1].tolist() == [1.0, 1.0, 0.0]  # null element dropped


def test_a_file_gone_after_planning_is_named_when_read(tmp_path, small_config):
    from recsys_dist.config import load_config
    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.data.read_pass import read_pass_local
    from recsys_dist.errors import DataError

    path = write_parquet(tmp_path / "data" / DAY / "a.parquet", small_table(50))
    pipeline = prepare_input(load_config(small_config(train={"dates": "2026-01-01"})), "train", 1)
    pathlib.Path(path).unlink()
    with pytest.raises(
        DataError,
        match=rf"reading Parquet failed on a worker: .*{path}: "
        r"no such file",
    ):
        read_pass_local(pipeline)
