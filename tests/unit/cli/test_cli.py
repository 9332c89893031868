"""The recsys-dist command line: each command's output, exit codes and error messages
(the parser of ``cli.py``, the commands of ``commands.py``).

``data read`` on a cluster is in tests/cluster/test_data_read.py."""

from __future__ import annotations

import json
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recsys_dist.cli import main
from tests.support.paths import DEMO_CONFIG as DEMO
from tests.support.retrain import OFFLINE_EVAL_SCRIPT

CLI = [sys.executable, "-m", "recsys_dist.cli"]


def test_synth_writes_partitioned_layout_with_oracle(synth_dir, capsys):
    files = sorted(synth_dir.glob("dt=*/part-*.parquet"))
    assert [f.relative_to(synth_dir).as_posix() for f in files] == [
        f"dt=2026-01-0{d}/part-0000{i}.parquet" for d in (1, 2) for i in range(3)
    ]
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
    result = subprocess.run(
        CLI + ["data", "synth", "--out", "/tmp/x", "--days", "0", "--rows-per-day", "10"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "argument --days: expected a positive integer, got 0" in result.stderr
    result = subprocess.run(
        CLI
        + [
            "data",
            "synth",
            "--out",
            "/tmp/x",
            "--days",
            "1",
            "--rows-per-day",
            "10",
            "--start-date",
            "2026-13-01",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "expected a date YYYY-MM-DD" in result.stderr


def test_history_length_is_refused_for_criteo_rows_and_writes_long_histories(tmp_path, capsys):
    args = ["data", "synth", "--out", str(tmp_path), "--days", "1", "--rows-per-day", "40"]
    assert main([*args, "--history-length", "300"]) != 0
    assert "history length applies to the behaviour dataset only" in capsys.readouterr().err
    assert main([*args, "--dataset", "behaviour", "--history-length", "300", "--quiet"]) == 0
    table = pq.read_table(tmp_path / "dt=2026-01-01")
    assert 80 < max(len(h or []) for h in table["hist_item_id"].to_pylist()) <= 300


def test_missing_config_file_exits_2_with_message(capsys):
    assert main(["validate", "--config", "no/such.yaml"]) == 2
    assert capsys.readouterr().err.strip() == "error: no/such.yaml: config file not found"


def test_a_binary_config_file_is_named_and_refused(tmp_path, capsys):
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    assert main(["validate", "--config", str(binary)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {binary}: not a text file (byte 0x89 at offset 0 is not UTF-8); expected a "
        "YAML config"
    )


SIGNAL_INSIDE_C_CODE = r"""
import os, signal
import recsys_dist.cli as cli
from recsys_dist.cluster.signals import terminate_on_signals

def main(restart=None):  # cli.run hands main the process's restart
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
    result = subprocess.run(
        [sys.executable, "-c", SIGNAL_INSIDE_C_CODE], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 128 + 15
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "error: stopped by SIGTERM"


# ---- recsys-dist offline-eval: the same command as pipelines/offline_eval.py ----------------


def published_root(tmp_path: pathlib.Path, *dates: str) -> pathlib.Path:
    """A retraining root whose ``published/`` holds complete publications of ``dates``
    (only ``_SUCCESS``: enough for the rejections, which come before any is read)."""
    root = tmp_path / "root"
    (root / "runs").mkdir(parents=True)
    for date in dates:
        (root / "published" / date).mkdir(parents=True)
        (root / "published" / date / "_SUCCESS").write_text(date + "\n")
    return root


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--models", "2026-01-02,2026-01-05"],
            "error: not published under {published}: 2026-01-05; published models: 2026-01-01, "
            "2026-01-02",
        ),
        (["--last", "0"], "error: --last must be at least 1, got 0"),
        (["--dates", "2026-01-09..2026-01-04"], "error: --dates "),
    ],
)
def test_offline_eval_rejects_bad_arguments_with_one_line(tmp_path, capsys, flags, message):
    root = published_root(tmp_path, "2026-01-01", "2026-01-02")
    (root / "published" / "2026-01-03").mkdir()  # incomplete: no _SUCCESS
    argv = [
        "offline-eval",
        "--root",
        str(root),
        "--dates",
        "2026-01-04",
        "--out",
        str(tmp_path / "out"),
        *flags,
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message.format(published=root / "published")), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    if flags[0] == "--dates":
        assert "2026-01-09..2026-01-04" in err
    assert not (tmp_path / "out").exists()


def test_offline_eval_names_an_incomplete_publication(tmp_path, capsys):
    root = published_root(tmp_path, "2026-01-01")
    (root / "published" / "2026-01-03").mkdir()
    assert (
        main(
            [
                "offline-eval",
                "--root",
                str(root),
                "--dates",
                "2026-01-04",
                "--models",
                "2026-01-03",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    assert "2026-01-03 (incomplete: no _SUCCESS)" in capsys.readouterr().err


def test_offline_eval_needs_root_dates_and_out(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["offline-eval", "--dates", "2026-01-04"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert (
        "recsys-dist offline-eval: error: the following arguments are required: --root, "
        "--out" in err
    )


def test_offline_eval_command_and_script_reject_a_root_without_models_alike(tmp_path):
    empty = published_root(tmp_path)
    args = ["--root", str(empty), "--dates", "2026-01-04", "--out", str(tmp_path / "out")]
    results = [
        subprocess.run(command + args, capture_output=True, text=True, timeout=120)
        for command in (CLI + ["offline-eval"], [sys.executable, OFFLINE_EVAL_SCRIPT])
    ]
    for result in results:
        assert result.returncode == 2, result.stderr[-2000:]
        assert result.stderr == (
            f"error: {empty / 'published'}: no published model (a "
            "complete one has _SUCCESS); run recsys-dist retrain first\n"
        )
    assert results[0].stdout == results[1].stdout == ""
    # The script keeps its own program name in usage errors.
    usage = subprocess.run(
        [sys.executable, OFFLINE_EVAL_SCRIPT, "--root", "r"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert usage.returncode == 2
    assert (
        "offline_eval.py: error: the following arguments are required: --dates, --out"
        in usage.stderr
    )


def test_server_command_takes_the_server_modules_arguments():
    from recsys_dist.cli import build_parser

    args = build_parser().parse_args(["server", "--job", "ps", "--index", "1"])
    assert (args.job, args.index, args.cluster_spec) == ("ps", 1, None)
    assert (args.inter_op_threads, args.intra_op_threads) == (None, 0)
    result = subprocess.run(
        CLI + ["server", "--cluster-spec", "{}"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert result.stderr == "error: --cluster-spec needs --job and --index\n"


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_a_server_task_with_one_line(sent):
    """The task waits in Python, not in TensorFlow's join(), so the command's handler runs
    (inside join() a SIGTERM was ignored and the task served on)."""
    from recsys_dist.cluster.local import free_ports

    worker, ps = (f"127.0.0.1:{port}" for port in free_ports(2))
    process = subprocess.Popen(
        CLI
        + [
            "server",
            "--job",
            "ps",
            "--index",
            "0",
            "--cluster-spec",
            json.dumps({"worker": [worker], "ps": [ps]}),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline:  # serving once the port accepts connections
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", int(ps.rsplit(":", 1)[1]))) == 0:
                    break
            assert process.poll() is None, process.communicate()
            time.sleep(0.2)
        process.send_signal(sent)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + sent, err
    assert err.splitlines()[-1] == f"error: stopped by {sent.name}", err
    assert "Traceback" not in err


def test_train_warm_start_from_a_place_without_a_checkpoint_is_named(tmp_path, synth_dir, capsys):
    """Refused before any server starts: a model dir with no complete checkpoint, and a
    directory that is neither a model dir nor a checkpoint."""
    empty_run = tmp_path / "run"
    (empty_run / "checkpoints").mkdir(parents=True)
    for source, expected in (
        (
            empty_run,
            f"error: --warm-start: {empty_run}: no complete checkpoint in "
            f"{empty_run}/checkpoints; train the model first",
        ),
        (
            tmp_path,
            f"error: --warm-start: {tmp_path}: no such checkpoint (expected a "
            "checkpoint directory like",
        ),
    ):
        assert (
            main(
                [
                    "train",
                    "--config",
                    DEMO,
                    "--data",
                    str(synth_dir),
                    "--model-dir",
                    str(tmp_path / "new"),
                    "--warm-start",
                    str(source),
                ]
            )
            == 2
        )
        err = capsys.readouterr().err
        assert err.startswith(expected) and err.rstrip().endswith(
            "(give a model dir holding checkpoints/, or one of its checkpoint directories)"
        ), err
    # a complete checkpoint whose state.json was changed after the save: named as damaged
    damaged = empty_run / "checkpoints" / "ckpt-000000000007"
    damaged.mkdir()
    (damaged / "_COMPLETE").write_text("")
    (damaged / "state.json").write_text("{cut")
    assert (
        main(
            [
                "train",
                "--config",
                DEMO,
                "--data",
                str(synth_dir),
                "--model-dir",
                str(tmp_path / "new"),
                "--warm-start",
                str(empty_run),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith(f"error: {damaged}: damaged checkpoint: state.json is unreadable ("), err
    assert not (tmp_path / "new").exists()
