"""The recsys-dist command line: each command's output, exit codes and error messages."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recsys_dist.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEMO = str(ROOT / "configs" / "demo.yaml")
CLI = [sys.executable, "-m", "recsys_dist.cli"]


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli_synth")
    assert main(["data", "synth", "--out", str(out), "--days", "2", "--rows-per-day", "3000",
                 "--rows-per-file", "1000", "--quiet"]) == 0
    return out


def test_synth_writes_partitioned_layout_with_oracle(synth_dir, capsys):
    files = sorted(synth_dir.glob("dt=*/part-*.parquet"))
    assert [f.relative_to(synth_dir).as_posix() for f in files] == [
        f"dt=2026-01-0{d}/part-0000{i}.parquet" for d in (1, 2) for i in range(3)]
    meta = pq.ParquetFile(files[0]).metadata
    assert meta.num_row_groups > 1
    assert "oracle_logit" in meta.schema.to_arrow_schema().names


def test_validate_synthetic_data_with_the_demo_config_exits_zero(synth_dir, capsys):
    assert main(["validate", "--config", DEMO, "--data", str(synth_dir), "--scan"]) == 0
    out = capsys.readouterr().out
    assert "data     6 files, 6,000 rows" in out
    assert "scan     read 6,000 rows in-graph" in out and "0 bad rows skipped" in out


def test_validate_split_applies_config_dates_under_data_path(synth_dir, capsys):
    assert main(["validate", "--config", DEMO, "--data", str(synth_dir), "--split", "train"]) == 0
    assert "data     6 files" in capsys.readouterr().out
    assert main(["validate", "--config", DEMO, "--data", str(synth_dir), "--split", "eval"]) == 3
    err = capsys.readouterr().err
    assert "error: no Parquet files for dt=2026-01-03" in err
    assert "partitions present under" in err and "2026-01-01, 2026-01-02" in err


def test_validate_reads_tags_as_a_list_or_as_a_delimited_string(tmp_path, synth_dir, capsys):
    source = sorted(synth_dir.glob("dt=2026-01-01/*.parquet"))[0]
    table = pq.read_table(source)
    assert pa.types.is_list(table.schema.field("tags").type)  # synthetic tags are a list
    tags = pa.array(["|".join(str(t) for t in v) for v in table["tags"].to_pylist()])
    table = table.set_column(table.schema.get_field_index("tags"), "tags", tags)
    pq.write_table(table, tmp_path / "delimited.parquet")
    for data in (source, tmp_path / "delimited.parquet"):
        assert main(["validate", "--config", DEMO, "--data", str(data), "--scan"]) == 0
        out = capsys.readouterr().out
        assert f"scan     read {table.num_rows:,} rows in-graph" in out


def test_synth_argument_errors_exit_2_without_traceback():
    result = subprocess.run(CLI + ["data", "synth", "--out", "/tmp/x", "--days", "0",
                                   "--rows-per-day", "10"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "argument --days: expected a positive integer, got 0" in result.stderr
    result = subprocess.run(CLI + ["data", "synth", "--out", "/tmp/x", "--days", "1",
                                   "--rows-per-day", "10", "--start-date", "2026-13-01"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "expected a date YYYY-MM-DD" in result.stderr


def test_missing_config_file_exits_2_with_message(capsys):
    assert main(["validate", "--config", "no/such.yaml"]) == 2
    assert capsys.readouterr().err.strip() == "error: no/such.yaml: config file not found"


def test_a_binary_config_file_is_named_and_refused(tmp_path, capsys):
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    assert main(["validate", "--config", str(binary)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {binary}: not a text file (byte 0x89 at offset 0 is not UTF-8); expected a "
        "YAML config")


@pytest.mark.cluster
def test_data_read_checks_exactly_once_on_a_local_cluster(synth_dir):
    result = subprocess.run(
        [str(pathlib.Path(sys.executable).parent / "recsys-dist"), "data", "read",
         "--config", DEMO, "--data", str(synth_dir), "--split", "train", "--check",
         "--set", "input.batch_size=128"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "cluster  2 workers + 2 ps (in_process: servers inside this process)" in result.stdout
    assert "read     6,000 rows" in result.stdout
    assert "check    every planned row was read exactly once (6,000 rows)" in result.stdout


SIGNAL_INSIDE_C_CODE = r"""
import os, signal
import recsys_dist.cli as cli
from recsys_dist.cluster.local import terminate_on_signals

def main():
    with terminate_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pause()
        except SystemExit as exc:  # what TensorFlow's C code did with it (seen in nest)
            raise SystemError("returned a result with an exception set") from exc
    return 0

cli.main = main
cli.run()
"""


def test_a_signal_that_surfaces_as_another_error_still_exits_128_plus_signum():
    result = subprocess.run([sys.executable, "-c", SIGNAL_INSIDE_C_CODE], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 128 + 15
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "error: stopped by SIGTERM"
