"""Commands on a misbehaving S3 (``tests/support/s3_faults.py`` in front of moto): data and
model dir on ``s3://``, 2 workers + 2 ps.

- Transient faults on every path at once (503 on 1 in 5 footer reads by the coordinator
  and by the workers, a reset in the middle of a worker's row-range read, a 500 on a
  checkpoint shard's upload, a hang on a commit marker's upload): ``validate`` and
  ``train`` complete, every row is trained exactly as planned, every checkpoint is whole.
- Faults that do not pass (throttling of one file's reads past the retries, a 403 on the
  model dir, a data path in a missing bucket): one line naming the URI, exit code 2,
  nothing written that looks complete.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from recsys_dist import storage_io
from recsys_dist.checkpoint.store import CheckpointManager, local_prefix
from recsys_dist.data.synth_files import synthesize
from tests.support import command_forks
from tests.support.data import upload_dir
from tests.support.paths import CLI
from tests.support.run_configs import zoo_config
from tests.support.s3_faults import Fault
from tests.support.train_run import TrainRun

pytestmark = pytest.mark.cluster

ARROW, BOTO = "aws-sdk-cpp", "botocore"


@pytest.fixture(scope="module")
def s3_data(s3_server, tmp_path_factory):
    local = tmp_path_factory.mktemp("faults_data")
    synthesize(
        local, days=3, rows_per_day=4_000, seed=11, rows_per_file=2_000, row_groups_per_file=2
    )
    return upload_dir(s3_server["client"], s3_server["bucket"], local, "faults-data")


def config_on(tmp_path, s3_data) -> str:
    return zoo_config(tmp_path, s3_data, "lr", epochs=1)


def run(*args: str) -> subprocess.CompletedProcess:
    return command_forks.run([CLI, *args], capture_output=True, text=True, timeout=400)


def faults_seen(proxy) -> set[tuple[str, str, str | None, str]]:
    return {(e.method, "arrow" if e.arrow else "s3fs", e.part, e.fault) for e in proxy.faulted()}


def test_transient_faults_on_every_path_cost_retries_not_rows(fault_proxy, s3_data, tmp_path):
    config = config_on(tmp_path, s3_data)
    model_dir = f"s3://recsys-test/faults-runs/{tmp_path.name}"
    fault_proxy.faults = [
        Fault("503", method="GET", part="footer", agent=BOTO, every=5),
        Fault("503", method="GET", part="footer", agent=ARROW, every=5),
        Fault("reset", method="GET", part="rows", agent=ARROW, bytes=2_000, times=1),
        Fault("500", method="PUT", key=r"/variables\.data-", times=1),
        Fault("hang", method="PUT", key="/_COMPLETE$", times=1),
    ]
    validated = run("validate", "--config", config, "--split", "all")
    assert validated.returncode == 0, validated.stdout[-2000:] + validated.stderr[-2000:]
    assert ("GET", "s3fs", "footer", "503") in faults_seen(fault_proxy)
    train = TrainRun(config, model_dir, "--no-eval", "--set", "train.checkpoint_every_steps=10")
    assert train.finish() == 0, train.output[-3000:]
    assert faults_seen(fault_proxy) >= {
        ("GET", "s3fs", "footer", "503"),
        ("GET", "arrow", "footer", "503"),
        ("GET", "arrow", "rows", "reset"),
        ("PUT", "s3fs", None, "500"),
        ("PUT", "s3fs", None, "hang"),
    }, faults_seen(fault_proxy)
    fault_proxy.faults = []
    saved = CheckpointManager(model_dir).all_complete()
    assert len(saved) >= 2
    for checkpoint in saved:  # every complete checkpoint matches its manifest, file by file
        with local_prefix(checkpoint):
            pass
    position = saved[-1].state["position"]
    assert saved[-1].state["complete"] and position["done"] == [1] * position["items"]
    assert position["finished_rows"] == position["total_rows"] == 8_000


def test_reads_throttled_past_the_retries_stop_train_naming_the_file(
    fault_proxy, s3_data, tmp_path
):
    config = config_on(tmp_path, s3_data)
    model_dir = f"s3://recsys-test/faults-runs/{tmp_path.name}"
    fault_proxy.faults = [Fault("503", method="GET", agent=ARROW, key=r"/dt=2026-01-02/")]
    train = TrainRun(config, model_dir, "--no-eval")
    assert train.finish() == 2, train.output[-3000:]
    last = train.output.strip().splitlines()[-1]
    assert last.startswith(f"error: {s3_data}/dt=2026-01-02/"), last
    # The SDK names a 503 by its XML code, or by its status when it did not parse the body
    assert re.search(
        r": cannot read it on a worker: AWS Error (SLOW_DOWN|SERVICE_UNAVAILABLE) "
        "during GetObject operation:",
        last,
    ), last
    assert "Traceback" not in train.output
    fault_proxy.faults = []
    assert not storage_io.exists(f"{model_dir}/train_result.json")  # nothing looks finished
    for checkpoint in CheckpointManager(model_dir).all_complete():
        with local_prefix(checkpoint):  # any checkpoint marked complete is whole
            pass


def test_permanent_errors_fail_at_once_naming_the_uri(fault_proxy, s3_data, tmp_path):
    config = config_on(tmp_path, s3_data)
    denied = f"s3://recsys-test/faults-denied/{tmp_path.name}"
    fault_proxy.faults = [Fault("403", key="/faults-denied/")]
    result = run("train", "--config", config, "--model-dir", denied)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stderr == (
        f"error: {denied}: cannot write the run's checkpoints there: Access Denied\n"
    ), result.stderr
    assert len(fault_proxy.faulted()) == 1 and "cluster " not in result.stdout
    fault_proxy.faults = []
    missing = "s3://no-such-bucket-data/days"
    for command in (
        ["validate", "--config", config, "--data", missing],
        ["train", "--config", config, "--data", missing, "--model-dir", str(tmp_path / "run")],
    ):
        result = run(*command)
        assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
        assert result.stderr == (
            f"error: {missing}: the bucket 'no-such-bucket-data' does not exist (NoSuchBucket)\n"
        ), result.stderr
        assert "cluster " not in result.stdout
