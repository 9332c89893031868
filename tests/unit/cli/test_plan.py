"""``recsys-dist plan``: its output on a small config with data, and its one-line errors."""

from __future__ import annotations

import re

import pytest

from recsys_dist.cli import main
from tests.support.data import small_table, write_parquet

#: Rates given on the command line: 1,000 examples/s per worker core, servers and chief
#: never binding.
RATES = [
    "--worker-examples-per-core",
    "1000",
    "--server-values-per-core",
    "1e12",
    "--chief-closures-per-second",
    "1e6",
    "--server-step-ms",
    "1e-6",
]


def test_plan_prints_the_smallest_cluster_memory_and_bytes(small_config, tmp_path, capsys):
    config = small_config()
    write_parquet(tmp_path / "data" / "part.parquet", small_table(128))
    assert main(["plan", "--config", config, "--examples-per-second", "2500", *RATES]) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"^rows     distinct rows per batch: measured on 4 batches of .*data$", out, re.M
    )
    assert (
        "rates    1,000 examples/s per worker core, 1,000,000,000,000 values/s and 0.00 ms "
        "per step per server core, 1,000,000 closures/s per chief; NIC 10 Gbit/s per "
        "server, server memory not checked"
    ) in out
    assert re.search(
        r"^config   2 workers \+ 1 ps: worker CPU 2,000, .* examples/s; worker "
        r"CPU binds first$",
        out,
        re.M,
    )
    assert re.search(r"^smallest 3 workers \+ 1 ps: worker CPU 3,000, ", out, re.M)
    assert re.search(
        r"^step     ps0 sends [\d.]+ MB, receives [\d.]+ MB, serves [\d,]+ "
        r"values$",
        out,
        re.M,
    )
    # the stack (1,100 rows x 4) and its Adagrad slot: 35,200 bytes, plus the dense part
    assert re.search(r"^memory   ads +ps0 0\.0 MiB$", out, re.M)
    assert re.search(r"^memory   total per server: ps0 [\d.]+ MiB$", out, re.M)


def test_without_data_the_plan_says_it_assumes_evenly_spread_ids(small_config, capsys):
    config = small_config()  # its data.path holds nothing
    assert main(["plan", "--config", config, "--examples-per-second", "100", *RATES]) == 0
    out = capsys.readouterr().out
    assert (
        "rows     distinct rows per batch: ids spread evenly (an upper bound); the "
        "config's training data is not readable ("
    ) in out


@pytest.mark.parametrize(
    "flag,value,what",
    [
        ("--examples-per-second", "-5", "examples per second to train"),
        ("--examples-per-second", "fast", "examples per second to train"),
        ("--nic-gbit", "0", "a server's network bandwidth in Gbit/s"),
        ("--server-memory-gib", "inf", "a server's memory in GiB"),
        ("--chief-closures-per-second", "nan", "closures/s"),
        ("--server-step-ms", "-1", "CPU ms a server spends per step"),
    ],
)
def test_a_bad_number_is_one_line_naming_the_flag(small_config, capsys, flag, value, what):
    args = ["plan", "--config", small_config(), "--examples-per-second", "100", flag, value]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == f"error: {flag} must be a positive number ({what}), got {value!r}\n"


def test_a_missing_config_or_data_is_named(tmp_path, small_config, capsys):
    missing = str(tmp_path / "nowhere.yaml")
    assert main(["plan", "--config", missing, "--examples-per-second", "100"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and missing in err and err.count("\n") == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (
        main(
            [
                "plan",
                "--config",
                small_config(),
                "--examples-per-second",
                "100",
                "--data",
                str(empty),
                *RATES,
            ]
        )
        == 3
    )
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(empty) in err and err.count("\n") == 1
