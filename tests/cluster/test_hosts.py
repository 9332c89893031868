"""A cluster across hosts: each host a Linux network namespace on a private bridge
(``tests/support/hosts.py``), with its own address, processes, link and ``/tmp``.

The layout is the one ``docs/training.md`` ("Several machines") gives users: one
``recsys-dist server`` per worker and parameter-server host, started with a ``TF_CONFIG``
that names the hosts' addresses; the chief on a host of its own; data and model dir on the
storage host's S3 (moto's server); no file system shared between hosts.

Faults are those of machines and networks: a link taken down (packets dropped, nothing
reset) for a while or for good, and every process of a host SIGKILLed. Each run must
complete with every work item done ``epochs`` times, a resume at most one checkpoint
interval (+ the closures in flight) behind, and a held-out AUC within
``AUC_TOLERANCE`` of the fault-free run of the same data and model (on 127.0.0.1; the bound
of ``test_fault_tolerance.py``, which says why it is 0.01).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from recsys_dist.data.synth_files import synthesize
from tests.support import hosts as host_support
from tests.support.host_cluster import BUCKET, HostCluster, cluster_config, host_names
from tests.support.hosts import HostNetwork, leftovers
from tests.support.run_configs import EPOCHS, EVERY
from tests.support.train_run import TrainRun

pytestmark = pytest.mark.cluster

UNAVAILABLE = host_support.unavailable_reason()
needs_namespaces = pytest.mark.skipif(
    UNAVAILABLE is not None, reason=f"network namespaces: {UNAVAILABLE}"
)

IN_FLIGHT = 4 * 10  # 2 closures per worker x 2 workers x steps_per_call
AUC_TOLERANCE = 0.01
ROWS_PER_DAY = 12_000
# The link cut test's run writes a checkpoint only at its end, so that no cut falls on one.
CUT_TEST_CHANGES = {"train.checkpoint_every_steps": 100_000}
#: How long the link cut test's links stay down: three times ``cluster.lost_after_seconds``
#: (5 s), so each task is named lost well before it answers again.
CUT_SECONDS = 15


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    if UNAVAILABLE is not None:
        pytest.skip(f"network namespaces: {UNAVAILABLE}")
    base = tmp_path_factory.mktemp("hosts")
    with HostNetwork(host_names(2, 3), base / "hosts") as network:
        network.logs = base / "logs"
        storage = HostCluster(network, 2, 2, network.logs)
        storage.start_storage()
        data = base / "data"
        synthesize(
            data,
            days=3,
            rows_per_day=ROWS_PER_DAY,
            seed=7,
            rows_per_file=6_000,
            row_groups_per_file=2,
        )
        network.data_url = storage.upload(data, "data")
        yield network
    assert leftovers(network.prefix) == []


@pytest.fixture
def cluster(net):
    """2 workers and 2 parameter servers on four hosts, stopped after the test."""
    servers = HostCluster(net, 2, 2, net.logs)
    servers.start_servers()
    yield servers
    servers.stop_servers()
    net.kill_host("chief")
    for host in ("worker0", "worker1", "ps0", "ps1"):
        net.restore(host)


def config(net, **changes) -> str:
    return cluster_config(net.hosts["chief"].directory, net.data_url, changes)


def held_out_auc(cluster: HostCluster, model_dir: str) -> float:
    return cluster.read_json(f"{model_dir}/train_result.json")["eval"]["labels"]["click"]["auc"]


def assert_complete(cluster: HostCluster, model_dir: str) -> None:
    state = cluster.final_state(model_dir)
    position = state["position"]
    assert state["complete"] and position["done"] == [EPOCHS] * position["items"], position
    assert position["finished_rows"] == position["total_rows"] == EPOCHS * 2 * ROWS_PER_DAY


@pytest.fixture
def baseline(fault_free_run):
    """The held-out AUC of the same run without a fault (on 127.0.0.1, the same data and
    model: ``tests/cluster/conftest.py``)."""
    return fault_free_run[2]


def step_of(line_pattern: str, run: TrainRun, count: int = 1) -> int:
    return int(run.wait_for(line_pattern, count=count).group(1).replace(",", ""))


@needs_namespaces
def test_hosts_are_removed_after_their_owner_is_sigkilled(tmp_path):
    """A process that made hosts and started work in them dies by SIGKILL: the next
    network's start removes its namespaces, links and processes."""
    script = (
        "import pathlib, subprocess, sys, time\n"
        f"sys.path.insert(0, {str(pathlib_root())!r})\n"
        "from tests.support.hosts import HostNetwork\n"
        f"net = HostNetwork(['a', 'b'], pathlib.Path({str(tmp_path)!r})).__enter__()\n"
        "net.run('a', ['sleep', '600'], stdout=subprocess.DEVNULL)\n"
        "deadline = time.time() + 30\n"
        "while not net.pids('a') and time.time() < deadline:\n"
        "    time.sleep(0.1)\n"  # the process enters the namespace after it starts
        "print(net.prefix, net.pids('a')[0], flush=True)\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    prefix, sleeper = owner.stdout.readline().split()
    assert leftovers(prefix), "the hosts were not made"
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    assert os.path.exists(f"/proc/{sleeper}")  # nothing removed them yet
    assert prefix in host_support.remove_stale()
    assert leftovers(prefix) == []
    deadline = time.time() + 10
    while os.path.exists(f"/proc/{sleeper}") and time.time() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{sleeper}")


def pathlib_root():
    from tests.support.paths import REPO

    return REPO


def test_four_hosts_a_link_cut_for_good_ends_the_run_then_the_chief_resumes_evaluates_exports_and_restores_on_three_servers(  # noqa: E501
    net, baseline, cluster
):
    """A parameter server's link is cut for good: the run ends within
    ``cluster.give_up_after_seconds`` with one line naming the task, exit code 4. The link
    comes back and the chief, started again, resumes from the last checkpoint on S3 and
    completes; then export, and the checkpoint restores for evaluate on 3 servers."""
    model_dir = f"s3://{BUCKET}/chief_restart"
    first = cluster.train(config(net), model_dir, "--set", "cluster.give_up_after_seconds=10")
    saved = step_of(r"^checkpoint step ([\d,]+)", first, count=2)
    net.cut("ps1")
    cut = time.monotonic()
    seen = first.last_step()
    code = first.finish(timeout=180)
    took = time.monotonic() - cut
    address = cluster.spec["ps"][1]
    assert code == 4, first.output[-3000:]
    assert first.lines[-1] == (
        f"error: ps 1 ({address}) has been unreachable for 10 s "
        "(cluster.give_up_after_seconds = 10); the run stops. Bring the task back, then run "
        "the command again to resume from the last checkpoint\n"
    ), first.output[-3000:]
    print(f"a link cut for good: the run ended {took:.1f} s after the cut")
    net.restore("ps1")
    second = cluster.train(config(net), model_dir)
    restored = step_of(r"^resume +from .*: step ([\d,]+)", second)
    assert second.finish() == 0, second.output[-3000:]
    assert restored >= saved and seen - restored <= EVERY + IN_FLIGHT, (saved, seen, restored)
    assert_complete(cluster, model_dir)
    assert abs(held_out_auc(cluster, model_dir) - baseline) <= AUC_TOLERANCE
    # Nothing of the run is on a server host: their /tmp holds no staging directory.
    for host in ("worker0", "worker1", "ps0", "ps1"):
        assert not list(net.hosts[host].directory.glob("**/recsys_dist_stage_*")), host

    exported = cluster.command("export", "--model-dir", model_dir, "--out", f"{model_dir}/export")
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert any(k.endswith("export/saved_model.pb") for k in cluster.keys(f"{model_dir}/"))

    cluster.stop_servers()  # the same checkpoint on a cluster with 3 parameter servers
    three = HostCluster(net, 2, 3, net.logs)
    three.start_servers()
    try:
        again = three.command(
            "evaluate", "--model-dir", model_dir, "--out", f"{model_dir}/eval3", "--quiet"
        )
        assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    finally:
        three.stop_servers()
    # The run's own evaluation (2 servers, the model in memory) and the restore on 3 servers
    # read the same weights and the same rows; only the order of float sums may differ.
    three_auc = cluster.read_json(f"{model_dir}/eval3/metrics.json")
    assert held_out_auc(cluster, model_dir) == pytest.approx(
        three_auc["labels"]["click"]["auc"], abs=1e-6
    )


def cut_for(net, host: str, seconds: float) -> float:
    """Cuts ``host``'s link now and restores it ``seconds`` later; the cut's time."""
    net.cut(host)
    threading.Timer(seconds, net.restore, args=(host,)).start()
    return time.monotonic()


def test_a_ps_link_and_then_a_worker_link_cut_for_15_s(net, baseline, cluster):
    """A parameter server's link goes down for ``CUT_SECONDS``: the run says it waits, and goes on
    when it is back. Then a worker's link, half a second later: the run names the worker
    within ``cluster.lost_after_seconds`` and takes it back when the link returns. The run
    (``CUT_TEST_CHANGES``) completes, every item recorded ``epochs`` times, the AUC within
    the bound.

    The steps per second after the worker's cut are printed, not asserted: about 1.5 s of
    work are left at the cut, less than it takes to notice the worker is gone. The
    throughput after a cut is measured by ``benchmarks/studies/worker_cut.py`` on a
    longer run (docs/multi-machine.md)."""
    model_dir = f"s3://{BUCKET}/cuts"
    run = cluster.train(config(net, **CUT_TEST_CHANGES), model_dir)
    progress = r"^step [\d,]+ \|"
    run.wait_for(progress, count=3)
    cut = cut_for(net, "ps0", CUT_SECONDS)
    address = cluster.spec["ps"][0]
    run.wait_for(
        rf"^lost +ps 0 \({re.escape(address)}\): unreachable for \d+ s; training "
        "waits for it",
        timeout=60,
    )
    run.wait_for(
        r"^back +ps 0 .* answers again after \d+ s unreachable; training goes on", timeout=90
    )
    ps_back_after = time.monotonic() - cut
    count = sum(bool(re.match(progress, line)) for line in run.lines)
    run.wait_for(progress, count=count + 2, timeout=120)  # training goes on
    resumed = time.monotonic()
    time.sleep(0.5)  # progress on both workers
    cut = cut_for(net, "worker1", CUT_SECONDS)
    address = cluster.spec["worker"][1]
    run.wait_for(
        rf"^lost +worker 1 \({re.escape(address)}\): unreachable for \d+ s; the other "
        "workers take its work",
        timeout=60,
    )
    lost_after = time.monotonic() - cut
    run.wait_for(
        r"^back +worker 1 .* answers again after \d+ s unreachable; it takes work", timeout=90
    )
    back_after = time.monotonic() - cut
    assert run.finish() == 0, run.output[-3000:]
    before = run.steps_per_second(resumed, cut)
    after = run.steps_per_second(cut, cut + 15)
    trained = [t for t, line in zip(run.times, run.lines) if line.startswith("step ")]
    print(
        f"worker cut: {after:.1f} steps/s in the 15 s after the cut (or until the data ran "
        f"out, {trained[-1] - cut:.1f} s on), {before:.1f} in the 0.5 s before it; named after "
        f"{lost_after:.1f} s, back after {back_after:.1f} s; ps cut: back after "
        f"{ps_back_after:.1f} s"
    )
    timeline = [
        f"{t - cut:+6.1f} {line}"
        for t, line in zip(list(run.times), list(run.lines))
        if cut - 3 <= t <= cut + 16 or not line.startswith("step ")
    ]
    print("".join(timeline))
    assert run.output.count("restart  lost a task") <= 1, run.output[-3000:]
    assert_complete(cluster, model_dir)
    assert abs(held_out_auc(cluster, model_dir) - baseline) <= AUC_TOLERANCE


def test_whole_hosts_killed_a_worker_then_a_parameter_server(net, baseline, cluster):
    """Every process of a worker host, then of a parameter-server host, is SIGKILLed and
    the host's server started again a few seconds later (as an orchestrator would): the
    worker's work goes on without a restore, the parameter server's loss restarts the
    run from its last checkpoint; the run completes."""
    model_dir = f"s3://{BUCKET}/killed"
    run = cluster.train(config(net), model_dir)
    run.wait_for(r"^checkpoint step")
    net.kill_host("worker0")
    time.sleep(3)
    cluster.start_server("worker", 0)
    count = sum(bool(re.match(r"checkpoint step", line)) for line in run.lines)
    saved = step_of(r"^checkpoint step ([\d,]+)", run, count=count + 1)
    seen = run.last_step()
    net.kill_host("ps1")
    time.sleep(3)
    cluster.start_server("ps", 1)
    restored = step_of(r"^resume +from .*: step ([\d,]+)", run)
    assert run.finish() == 0, run.output[-3000:]
    assert "restart  lost a task of the cluster" in run.output
    assert restored >= saved and seen - restored <= EVERY + IN_FLIGHT, (saved, seen, restored)
    assert_complete(cluster, model_dir)
    assert abs(held_out_auc(cluster, model_dir) - baseline) <= AUC_TOLERANCE


def test_a_worker_missing_at_the_start_is_left_out_and_taken_in_when_it_answers(
    net, baseline, cluster
):
    """A worker's link is down when the chief starts: the run starts at once on the other
    worker, naming the missing one, and trains. When the link returns, the chief writes a
    checkpoint and starts again with both workers from it (not a fault: no wait, not
    counted as a restart); the run completes, every item recorded ``epochs`` times."""
    model_dir = f"s3://{BUCKET}/missing_worker"
    address = cluster.spec["worker"][1]
    net.cut("worker1")
    run = cluster.train(config(net), model_dir)
    run.wait_for(
        rf"^start +without worker 1 \({re.escape(address)}\): it does not answer; the run "
        "trains on the other workers",
        timeout=120,
    )
    assert run.wait_for(r"^cluster +1 worker \+ 2 ps \(tf_config; workers 0 of TF_CONFIG")
    run.wait_for(r"^step [\d,]+ \|", count=2)
    net.restore("worker1")
    joined = run.wait_for(
        r"^restart +worker 1 answers now; the run starts again with every worker from the "
        r"checkpoint of step ([\d,]+)"
    )
    saved = int(joined.group(1).replace(",", ""))
    restored = step_of(r"^resume +from .*: step ([\d,]+)", run)
    assert run.finish() == 0, run.output[-3000:]
    assert restored == saved, (saved, restored)
    assert run.output.count("cluster  2 workers + 2 ps (tf_config)") == 1, run.output[-3000:]
    assert "restart  lost a task" not in run.output and "(restart 1 of" not in run.output
    assert_complete(cluster, model_dir)
    assert abs(held_out_auc(cluster, model_dir) - baseline) <= AUC_TOLERANCE


def _hourly(source, target, hours: int):
    """The synthetic days of ``source`` as partitions ``dt=2026-01-01/hour=HH`` of
    ``target``, each with its marker."""
    for hour in range(hours):
        partition = target / "dt=2026-01-01" / f"hour={hour:02d}"
        partition.mkdir(parents=True)
        for file in sorted((source / f"dt=2026-01-{hour + 1:02d}").glob("*.parquet")):
            shutil.copy(file, partition / file.name)
        (partition / "_SUCCESS").write_text("")


def test_follow_survives_a_server_host_and_then_the_chief_host_killed(net, cluster, tmp_path):
    """``recsys-dist follow`` on the hosts, partitions and its root on S3: every process of
    a parameter server's host is SIGKILLed while the first partition trains (the server is
    started again; the command restarts itself and resumes), then every process of the
    chief's host while the second one trains. Started again, the chief resumes that
    partition from its checkpoint; each partition is trained once and published once."""
    source = tmp_path / "source"
    synthesize(source, days=2, rows_per_day=ROWS_PER_DAY, seed=11, rows_per_file=6_000)
    _hourly(source, tmp_path / "hourly", 2)
    root = f"s3://{BUCKET}/follow"
    follow = {"root": root, "poll_seconds": 0.2, "publish_every": 1, "base_every": 2}
    changes = {"data.path": cluster.upload(tmp_path / "hourly", "hourly"), "follow": follow}
    config = cluster_config(net.hosts["chief"].directory, changes["data.path"], changes)

    def start() -> TrainRun:
        argv = ("follow", "--config", config, "--until-idle", "0")
        return TrainRun(
            config, "", command=argv, env=cluster.chief_env(), prefix=net.command("chief", [])
        )

    first = start()
    first.wait_for(r"^follow +training dt=2026-01-01/hour=00")
    first.wait_for(r"^checkpoint step")
    net.kill_host("ps1")
    time.sleep(3)
    cluster.start_server("ps", 1)
    first.wait_for(r"^follow +training dt=2026-01-01/hour=01", timeout=300)
    count = sum(bool(re.match(r"checkpoint step", line)) for line in first.lines)
    first.wait_for(r"^checkpoint step", count=count + 1)
    net.kill_host("chief")
    assert first.finish(timeout=60) != 0
    assert "restart  lost a task of the cluster" in first.output, first.output[-3000:]
    assert re.search(r"resume +from \S+/runs/2026-01-01T00/checkpoints/", first.output)

    second = start()
    assert second.finish() == 0, second.output[-3000:]
    assert re.search(r"resume +from \S+/runs/2026-01-01T01/checkpoints/", second.output), (
        second.output[-3000:]
    )
    assert "training dt=2026-01-01/hour=00" not in second.output
    ledger = cluster.read_json(f"{root}/trained.json")["partitions"]
    assert [e["partition"] for e in ledger] == ["dt=2026-01-01/hour=00", "dt=2026-01-01/hour=01"]
    published = sorted(
        k.rsplit("/", 2)[-2] for k in cluster.keys(f"{root}/published/") if k.endswith("_SUCCESS")
    )
    manifests = [cluster.read_json(f"{root}/published/{v}/manifest.json") for v in published]
    assert [(m["kind"], m["partitions"]) for m in manifests] == [
        ("base", ["dt=2026-01-01/hour=00"]),
        ("delta", ["dt=2026-01-01/hour=01"]),
    ]
    assert ledger[-1]["step"] == manifests[-1]["step"]
