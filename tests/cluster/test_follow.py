"""``recsys-dist follow`` end to end: partitions landing, trained once each, published as
a base and deltas that add up to the full export.

Hourly partitions of synthetic rows land under a data root (files, then ``_SUCCESS``).
Follow runs on an in-process cluster with a hashed and a dynamic table, publishing after
every partition and a base every two deltas. The chain of base and deltas exported with
``recsys-dist export --base --deltas`` must serve the predictions of a full export of the
same checkpoint (1e-6) in a process that has only TensorFlow, with ids added to the
dynamic table in between. A late partition is trained when it lands, a partition whose
files change afterwards is named and not trained again, a rerun does nothing, and a run
killed with SIGKILL while it trains resumes without skipping or repeating a partition.
Covers ``retrain/follow.py``, ``retrain/delta_chain.py`` and ``data/partitions.py``.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from recsys_dist.data.synth_files import synthesize
from tests.support.paths import BIN
from tests.support.run_configs import ZOO_FEATURES, zoo_config
from tests.support.serving import ONLY_TENSORFLOW, serving_env
from tests.support.train_run import TrainRun

pytestmark = pytest.mark.cluster

HOURS = 5
ROWS_PER_HOUR = 1_500

FEATURES = copy.deepcopy(ZOO_FEATURES)
FEATURES["tables"]["user"] = {"kind": "dynamic", "dim": 8, "capacity_per_shard": 20_000}
FEATURES["features"]["user_id"]["table"] = "user"
FEATURES["labels"] = {"click": {}}


def land(
    source: pathlib.Path, data: pathlib.Path, hour: int, date: str = "2026-01-01"
) -> pathlib.Path:
    """Copies the synthetic day ``hour`` as partition ``dt=<date>/hour=HH``: its files,
    then its marker."""
    day = source / f"dt=2026-01-{hour + 1:02d}"
    target = data / f"dt={date}" / f"hour={hour:02d}"
    target.mkdir(parents=True)
    for file in sorted(day.glob("*.parquet")):
        shutil.copy(file, target / file.name)
    (target / "_SUCCESS").write_text("")
    return target


def follow(config: str, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "recsys-dist"), "follow", "--config", config, "--until-idle", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )


def follow_run(
    root: pathlib.Path, days: int, rows: int, mode: str = "in_process", features=FEATURES, **train
) -> dict:
    """Synthetic days under ``root/source`` (each lands as an hour) and a DCN-v2 config
    that follows ``root/data`` into ``root/follow``: publishing after every partition, a
    base every two deltas."""
    source = root / "source"
    synthesize(source, days=days, rows_per_day=rows, seed=11, rows_per_file=rows // 2 + 50)
    config_path = zoo_config(
        root / "config", root / "data", "dcn_v2", epochs=1, mode=mode, features=features
    )
    config = yaml.safe_load(pathlib.Path(config_path).read_text())
    config["model"]["labels"] = ["click"]
    config["train"].update(train)
    config["follow"] = {
        "root": str(root / "follow"),
        "poll_seconds": 0.2,
        "publish_every": 1,
        "base_every": 2,
    }
    pathlib.Path(config_path).write_text(yaml.safe_dump(config))
    (root / "data").mkdir()
    return {"root": root, "source": source, "data": root / "data", "config": config_path}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return follow_run(tmp_path_factory.mktemp("follow"), HOURS, ROWS_PER_HOUR)


def ledger(setup) -> list[str]:
    entries = json.loads((setup["root"] / "follow" / "trained.json").read_text())["partitions"]
    return [e["partition"] for e in entries]


def manifests(setup) -> list[dict]:
    published = setup["root"] / "follow" / "published"
    return [
        json.loads((d / "manifest.json").read_text())
        for d in sorted(published.iterdir())
        if (d / "_SUCCESS").exists()
    ]


def hour(h: int) -> str:
    return f"dt=2026-01-01/hour={h:02d}"


SERVE = (
    ONLY_TENSORFLOW
    + r"""
import json
import numpy as np
import tensorflow as tf

exports, rows_file = json.loads(sys.argv[1]), sys.argv[2]
rows = dict(np.load(rows_file))
out = {}
for name, directory in exports.items():
    serve = tf.saved_model.load(directory).signatures["serving_default"]
    out[name] = serve(**{k: tf.constant(v) for k, v in rows.items()})["click"].numpy().tolist()
print(json.dumps(out))
"""
)


def request(setup) -> pathlib.Path:
    """A serving request from the last hour's rows (strings as unicode; tags padded)."""
    path = sorted((setup["source"] / f"dt=2026-01-{HOURS:02d}").glob("*.parquet"))[0]
    table = pq.read_table(path).slice(0, 400)
    arrays = {}
    for column in ("I1", "I5", "C3", "C4", "C2", "C17", "user_id"):
        arrays[column] = table[column].to_numpy(zero_copy_only=False)
    arrays["I1"], arrays["I5"] = (arrays[c].astype(np.float32) for c in ("I1", "I5"))
    arrays["C21"] = table["C21"].to_numpy(zero_copy_only=False).astype(str)
    tags = table["tags"].to_pylist()
    width = max(1, max(len(t) for t in tags))
    arrays["tags"] = np.array([t + [0] * (width - len(t)) for t in tags], np.int64)
    arrays["tags_lengths"] = np.array([len(t) for t in tags], np.int64)
    out = setup["root"] / "request.npz"
    np.savez(out, **arrays)
    return out


def serve(setup, exports: dict[str, pathlib.Path]) -> dict[str, np.ndarray]:
    done = subprocess.run(
        [sys.executable, "-c", SERVE, json.dumps({k: str(v) for k, v in exports.items()})]
        + [str(request(setup))],
        capture_output=True,
        text=True,
        env=serving_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    return {k: np.array(v) for k, v in json.loads(done.stdout).items()}


def test_follow_trains_each_partition_once_and_its_chain_equals_the_full_export(setup):
    data, source, config = setup["data"], setup["source"], setup["config"]
    land(source, data, 0)
    land(source, data, 1)
    pending = data / "dt=2026-01-01" / "hour=04"
    pending.mkdir(parents=True)  # no marker: still being written
    for file in sorted((source / "dt=2026-01-05").glob("*.parquet")):
        shutil.copy(file, pending)
    done = follow(config)
    assert done.returncode == 0, done.stdout[-4000:]
    assert ledger(setup) == [hour(0), hour(1)]
    assert [(m["kind"], m["partitions"]) for m in manifests(setup)] == [
        ("base", [hour(0)]),
        ("delta", [hour(1)]),
    ]
    assert "1 without _SUCCESS yet" in done.stdout

    land(source, data, 3)
    done = follow(config)
    assert done.returncode == 0, done.stdout[-4000:]
    land(source, data, 2)  # lands after hour 3 was trained, and is older than it
    done = follow(config)
    assert done.returncode == 0, done.stdout[-4000:]
    assert ledger(setup) == [hour(0), hour(1), hour(3), hour(2)]
    published = manifests(setup)
    assert [(m["version"], m["kind"], m["base"], m["parent"]) for m in published] == [
        (1, "base", 1, None),
        (2, "delta", 1, 1),
        (3, "delta", 1, 2),
        (4, "base", 4, 3),
    ]
    trained = json.loads((setup["root"] / "follow" / "trained.json").read_text())["partitions"]
    assert [e["late"] for e in trained] == [False, False, False, True]
    assert f"training {hour(2)} (late: " in done.stdout

    # Version 3 holds hour 3 (trained before the late hour 2): the chain 1 + 2 + 3 stands
    # for the checkpoint of hour 3's run.
    full = setup["root"] / "full"
    checkpoint = published[2]["checkpoint"]
    run_dir = str(pathlib.Path(checkpoint).parent.parent)
    exported = subprocess.run(
        [str(BIN / "recsys-dist"), "export", "--model-dir", run_dir]
        + ["--checkpoint", checkpoint, "--out", str(full)],
        capture_output=True,
        text=True,
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
    chained = setup["root"] / "chained"
    versions = setup["root"] / "follow" / "published"
    done = subprocess.run(
        [str(BIN / "recsys-dist"), "export", "--base", str(versions / "000001")]
        + ["--deltas", str(versions / "000002"), str(versions / "000003")]
        + ["--out", str(chained)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    predictions = serve(
        setup, {"full": full, "chained": chained, "base": versions / "000001/model"}
    )
    np.testing.assert_allclose(predictions["chained"], predictions["full"], rtol=0, atol=1e-6)
    assert np.abs(predictions["base"] - predictions["full"]).max() > 1e-4  # the deltas mattered
    delta = published[1]
    assert delta["bytes"] < delta["full_bytes"]

    again = follow(config)
    assert again.returncode == 0, again.stdout[-3000:]
    assert ledger(setup) == [hour(0), hour(1), hour(3), hour(2)]
    assert len(manifests(setup)) == 4

    extra = data / "dt=2026-01-01" / "hour=00" / "late-file.parquet"
    shutil.copy(sorted((source / "dt=2026-01-05").glob("*.parquet"))[0], extra)
    changed = follow(config)
    assert changed.returncode == 0
    assert f"warning  {hour(0)}: its files changed after it was trained" in changed.stdout
    assert ledger(setup) == [hour(0), hour(1), hour(3), hour(2)]


def started_follow(config: str) -> tuple[subprocess.Popen, list[str]]:
    process = subprocess.Popen(
        [str(BIN / "recsys-dist"), "follow", "--config", config, "--until-idle", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return process, []


def read_until(process: subprocess.Popen, seen: list[str], text: str) -> None:
    deadline = time.monotonic() + 300
    while not any(text in line for line in seen) and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
    assert any(text in line for line in seen), "".join(seen[-30:])


def exporting(follow_pid: int) -> bool:
    """Whether ``follow_pid`` has an export process of its own running (a publication)."""
    found = subprocess.run(
        ["pgrep", "-P", str(follow_pid), "-f", "recsys_dist.cli export"], stdout=subprocess.DEVNULL
    )
    return found.returncode == 0


def test_follow_killed_while_training_and_publishing_resumes_without_loss(tmp_path):
    """SIGKILL the follow process in the middle of a partition's training, then in the
    middle of its publication; the next run trains and publishes that partition once."""
    # A checkpoint every 2 of a partition's 6 steps: a run can be killed between two.
    run = follow_run(tmp_path, 2, 1_500, steps_per_call=1, checkpoint_every_steps=2)
    data, source, config = run["data"], run["source"], run["config"]
    land(source, data, 0)
    assert follow(config).returncode == 0
    land(source, data, 1)
    process, seen = started_follow(config)
    read_until(process, seen, f"training {hour(1)}")
    read_until(process, seen, "checkpoint step")  # the first of hour 1's three
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert ledger(run) == [hour(0)]

    process, seen = started_follow(config)
    deadline = time.monotonic() + 300
    while not exporting(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert exporting(process.pid), "no publication began"
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    resumed = process.stdout.read()
    # (rows done: those of the last checkpoint before the kill, all of them if it came
    # after the run's final checkpoint and before trained.json)
    assert re.search(r"resume\s+from \S+/runs/2026-01-01T01/checkpoints/\S+: step", resumed), (
        resumed
    )
    assert ledger(run) == [hour(0), hour(1)]  # trained (resumed), recorded, not published
    assert len(manifests(run)) == 1

    done = follow(config)
    assert done.returncode == 0, done.stdout[-4000:]
    assert ledger(run) == [hour(0), hour(1)]
    published = manifests(run)
    assert [(m["kind"], m["partitions"], m["parent"]) for m in published] == [
        ("base", [hour(0)], None),
        ("delta", [hour(1)], 1),
    ]


def test_follow_survives_a_lost_worker_and_a_lost_server(tmp_path):
    """On a ``local`` cluster: SIGKILL a worker in the middle of one partition's training
    (it is started again) and a parameter server in the middle of the next one's (the
    command starts itself again and resumes); every partition is trained once. The second
    partition starts two days after the first, so its run drops the users of the first
    (``evict_after: 2h`` counts back from the partition's start)."""
    features = copy.deepcopy(FEATURES)
    features["tables"]["user"]["evict_after"] = "2h"
    paths = follow_run(
        tmp_path, 2, 12_000, "local", features, steps_per_call=1, checkpoint_every_steps=5
    )
    source, data, config_path = paths["source"], paths["data"], paths["config"]
    land(source, data, 0)
    land(source, data, 1, date="2026-01-03")
    later = "dt=2026-01-03/hour=01"
    run = TrainRun(
        config_path, "", command=("follow", "--config", config_path, "--until-idle", "0")
    )
    run.wait_for(f"training {re.escape(hour(0))}")
    run.wait_for(r"checkpoint\s+step")
    os.kill(run.servers("worker")[1], signal.SIGKILL)
    run.wait_for(f"training {re.escape(later)}")
    run.wait_for(r"checkpoint\s+step", count=len(re.findall(r"checkpoint\s+step", run.output)) + 1)
    os.kill(run.servers("ps")[0], signal.SIGKILL)
    assert run.finish() == 0, run.output[-4000:]
    output = run.output
    assert re.search(r"restart\s+", output), output[-4000:]
    assert re.search(r"resume\s+from \S+/runs/2026-01-03T01/checkpoints/", output), output[-4000:]
    assert re.search(
        r"evict\s+table embeddings_user: [\d,]+ ids last seen before 2026-01-02 23:00 "
        "dropped, 0 kept",
        output,
    ), output[-4000:]
    assert ledger(paths) == [hour(0), later]
    assert [m["partitions"] for m in manifests(paths)] == [[hour(0)], [later]]
