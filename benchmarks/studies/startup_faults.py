"""Faults during start-up on the demo config, on namespace hosts, as a new user meets them.

Six network namespace hosts (``tests/support/hosts.py``; needs root): the chief, an S3
host, 2 worker hosts and 2 parameter-server hosts, ``TF_CONFIG`` as
``docs/multi-machine.md`` says, data and model dir on the S3 host. The config is
``configs/demo.yaml`` as shipped, with ``cluster.mode: tf_config`` and the data on S3:
``data synth --days 4 --rows-per-day 200000 --seed 7`` (800,000 rows), trained on the
first three days and evaluated on the fourth; every cluster setting at its default
(``cluster.lost_after_seconds`` 5, ``cluster.give_up_after_seconds`` 180).

Each case starts ``recsys-dist train`` on the chief and, at ``--fault-at`` (``cluster``:
once the chief prints its ``cluster`` line, while it creates the variables; or a number
of seconds after the command started), does one thing: nothing, cut worker 1's link for
30 s, cut parameter server 1's link for 30 s, cut it for good, or send the chief SIGTERM;
or worker 1's link is down from before the command starts until 30 s after
(``worker_missing``).
It prints the exit code, when the fault fell, when the command ended and when its first
progress line came (seconds after the command started; it follows the first step by up to the
progress interval), the lines that named the task, and the held-out AUC.

Usage: ``python benchmarks/studies/startup_faults.py [--cases none,worker_cut_30,...]``
"""

from __future__ import annotations

import argparse
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support.host_cluster import BUCKET, HostCluster, host_names  # noqa: E402
from tests.support.hosts import HostNetwork, unavailable_reason  # noqa: E402
from tests.support.paths import BIN  # noqa: E402
from tests.support.train_run import TrainRun  # noqa: E402

CUT_SECONDS = 30
#: ``(action, host, seconds)``: seconds None is a cut for good.
CASES = {
    "none": (None, None, None),
    "worker_cut_30": ("cut", "worker1", CUT_SECONDS),
    "worker_missing": ("missing", "worker1", CUT_SECONDS),
    "ps_cut_30": ("cut", "ps1", CUT_SECONDS),
    "ps_cut": ("cut", "ps1", None),
    "sigterm": ("sigterm", None, None),
}
PROGRESS = re.compile(r"^step [\d,]+ \|")


def demo_config(chief_tmp: pathlib.Path, data_url: str) -> str:
    """``configs/demo.yaml`` with the cluster of the hosts and the data on S3, in the
    chief's ``/tmp``."""
    text = (ROOT / "configs" / "demo.yaml").read_text()
    text = text.replace("../features/", f"{ROOT}/features/")
    text = re.sub(r"path: \.\./data/demo", f"path: {data_url}", text)
    text = re.sub(r"train: \{dates: [^}]*\}", "train: {dates: 2026-01-01..2026-01-03}", text)
    text = re.sub(r"eval: \{dates: [^}]*\}", "eval: {dates: 2026-01-04}", text)
    text = re.sub(r"mode: in_process", "mode: tf_config", text)
    (chief_tmp / "startup.yaml").write_text(text)
    return "/tmp/startup.yaml"


def one_case(net: HostNetwork, cluster: HostCluster, config: str, name: str, fault_at: float):
    action, host, seconds = CASES[name]
    cluster.start_servers()
    timers: list[threading.Timer] = []
    try:
        if action == "missing":  # the link is down before the command starts
            net.cut(host)
            timers.append(threading.Timer(seconds, net.restore, args=(host,)))
            timers[-1].start()
        started = time.monotonic()
        run = cluster.train(config, f"s3://{BUCKET}/startup/{name}-{int(time.time())}")
        if action == "missing":
            pass
        elif fault_at == "cluster":
            run.wait_for(r"^cluster ", timeout=300)
        else:
            while time.monotonic() - started < float(fault_at) and run.process.poll() is None:
                time.sleep(0.05)
        fell = time.monotonic() - started
        if action == "sigterm":
            run.process.send_signal(signal.SIGTERM)
        elif action == "cut":
            net.cut(host)
            if seconds is not None:
                timers.append(threading.Timer(seconds, net.restore, args=(host,)))
                timers[-1].start()
        code = run.finish(timeout=900)
        ended = time.monotonic() - started
    finally:
        for timer in timers:
            timer.cancel()
        cluster.stop_servers()
        net.kill_host("chief")
        for restore in ("worker1", "ps1"):
            net.restore(restore)
    return code, fell, ended, first_step(run, started), run


def first_step(run: TrainRun, started: float) -> float | None:
    """Seconds from the command's start to its first progress line (which follows the
    first step by up to the progress interval)."""
    return next(
        (t - started for t, line in zip(run.times, run.lines) if PROGRESS.match(line)), None
    )


def named(run: TrainRun, host: str | None) -> str:
    if host is None:
        return "-"
    job, index = host.rstrip("0123456789"), host[-1]
    said = [
        line.split()[0].rstrip(":")
        for line in run.lines
        if re.match(rf"^(lost|back|error|wait|restart|start)\b.*\b{job} {index}\b", line)
    ]
    return ", ".join(dict.fromkeys(said)) or "not named"


def auc(run: TrainRun) -> str:
    found = [m.group(1) for m in (re.search(r"click: AUC ([\d.]+)", x) for x in run.lines) if m]
    return found[-1] if found else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help=", ".join(CASES))
    parser.add_argument("--fault-at", default="cluster", help="'cluster' or seconds")
    parser.add_argument("--logs", help="keep each case's chief output here")
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit(f"startup_faults needs network namespaces: {reason}")
    cases = args.cases.split(",")
    with tempfile.TemporaryDirectory(prefix="startup_faults_", ignore_cleanup_errors=True) as tmp:
        base = pathlib.Path(tmp)
        data = base / "data"
        subprocess.run(
            [str(BIN / "recsys-dist"), "data", "synth", "--out", str(data), "--days", "4"]
            + ["--rows-per-day", "200000", "--seed", "7", "--quiet"],
            check=True,
        )
        with HostNetwork(host_names(2, 2), base / "hosts") as net:
            cluster = HostCluster(net, 2, 2, base / "logs")
            cluster.start_storage()
            config = demo_config(net.hosts["chief"].directory, cluster.upload(data, "data"))
            print(
                "| case | fault at (s) | exit | ended (s) | first progress line (s) | named "
                "| AUC |",
                flush=True,
            )
            print("|---|---|---|---|---|---|---|", flush=True)
            for name in cases:
                code, fell, ended, first, run = one_case(net, cluster, config, name, args.fault_at)
                if args.logs:
                    pathlib.Path(args.logs).mkdir(parents=True, exist_ok=True)
                    pathlib.Path(args.logs, f"{name}.out").write_text(run.output)
                shown = "-" if first is None else f"{first:.1f}"
                print(
                    f"| {name} | {fell:.1f} | {code} | {ended:.1f} | {shown} "
                    f"| {named(run, CASES[name][1])} | {auc(run)} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
