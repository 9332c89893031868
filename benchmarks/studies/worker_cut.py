"""What a worker's cut link costs a run: steps per second before and after the cut.

The host test (``tests/cluster/test_hosts.py``) cuts a worker's link with about 3 s of
work left; this study gives the run enough work to measure the 15 s after the cut. On four
namespace hosts (``tests/support/hosts.py``; needs root), 2 workers and 2 parameter
servers train the fault tests' small model (``tests/support/host_cluster.py``) on
``--rows`` rows a day (2 days, 2 passes), data and model dir on the storage host's S3,
a checkpoint every ``--checkpoint-every-steps`` (2000: about 15 s here; a cut during a
checkpoint's write can hold the chief until the link returns, see
docs/multi-machine.md). ``--cut-after`` seconds after the first progress line, worker 1's
link goes down for 30 s.

Each round prints the steps per second of the ``--before`` seconds before the cut and of
the 15 s after it (or until the data ran out), their ratio, the steps per 2 s around the
cut, and when the run named the worker lost and took it back. The summary gives the
ratio's median and worst over the rounds. Answered: docs/multi-machine.md.

Usage: ``python benchmarks/studies/worker_cut.py [--rounds 3] [--rows 150000]``
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from recsys_dist.data.synth_files import synthesize  # noqa: E402
from tests.support.host_cluster import BUCKET, HostCluster, cluster_config, host_names  # noqa: E402
from tests.support.hosts import HostNetwork, unavailable_reason  # noqa: E402
from tests.support.paths import BIN  # noqa: E402

CUT_SECONDS = 30
AFTER = 15.0
PROGRESS = re.compile(r"(?:checkpoint )?step ([\d,]+)")


def one_round(net: HostNetwork, cluster: HostCluster, data_url: str, args, n: int) -> dict:
    changes = {"train.checkpoint_every_steps": args.checkpoint_every_steps}
    config = cluster_config(net.hosts["chief"].directory, data_url, changes)
    command = net.command(
        "chief",
        [
            str(BIN / "recsys-dist"),
            "train",
            "--config",
            config,
            "--model-dir",
            f"s3://{BUCKET}/worker-cut/{n}",
            "--no-eval",
        ],
    )
    cluster.start_servers()
    start = time.monotonic()
    lines: list[tuple[float, str]] = []
    process = subprocess.Popen(
        command,
        env=cluster.chief_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def read() -> None:
        for line in process.stdout:
            lines.append((time.monotonic() - start, line.rstrip()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while not any(PROGRESS.match(line) for _, line in lines):
            if process.poll() is not None:
                sys.exit(
                    "train ended before training:\n" + "\n".join(text for _, text in lines[-30:])
                )
            time.sleep(0.05)
        first = next(t for t, line in lines if PROGRESS.match(line))
        while time.monotonic() - start < first + args.cut_after:
            time.sleep(0.02)
        cut = time.monotonic() - start
        net.cut("worker1")
        if args.dump:
            time.sleep(10)
            for pid in net.pids("chief"):
                dump = subprocess.run(
                    [str(BIN / "py-spy"), "dump", "--pid", str(pid)], capture_output=True, text=True
                )
                pathlib.Path(args.dump, f"chief-{n}-{pid}.txt").write_text(
                    dump.stdout + dump.stderr
                )
            time.sleep(CUT_SECONDS - 10)
        else:
            time.sleep(CUT_SECONDS)
        net.restore("worker1")
        code = process.wait(timeout=900)
        reader.join(10)
    finally:
        cluster.stop_servers()
        net.kill_host("chief")
        net.restore("worker1")
    if code != 0:
        sys.exit(f"train exited {code}:\n" + "\n".join(line for _, line in lines[-30:]))
    steps = [
        (t, int(m.group(1).replace(",", ""))) for t, line in lines if (m := PROGRESS.match(line))
    ]

    def step_at(t: float) -> int:
        return max([s for tt, s in steps if tt <= t], default=0)

    done_at = max(t for t, line in lines if line.startswith("step "))
    end = min(cut + AFTER, done_at)
    before = (step_at(cut) - step_at(cut - args.before)) / args.before
    after = (step_at(end) - step_at(cut)) / max(end - cut, 1e-9)
    when = {
        word: next((t - cut for t, line in lines if line.startswith(word) and t > cut), None)
        for word in ("lost", "back", "wait")
    }
    return {
        "before": before,
        "after": after,
        "ratio": after / before if before else float("nan"),
        "window": end - cut,
        "per_2s": [
            (step_at(t + 2) - step_at(t)) // 2 for t in [cut - 4 + 2 * i for i in range(12)]
        ],
        **when,
    }


def _at(seconds: float | None) -> str:
    return "never" if seconds is None else f"+{seconds:.1f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=150_000, help="rows per day")
    parser.add_argument("--cut-after", type=float, default=6.0, help="seconds into training")
    parser.add_argument("--before", type=float, default=3.0, help="seconds before the cut")
    parser.add_argument("--checkpoint-every-steps", type=int, default=2000)
    parser.add_argument("--dump", help="py-spy dumps of the chief 10 s after each cut, here")
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit(f"worker_cut needs network namespaces: {reason}")
    with tempfile.TemporaryDirectory(prefix="worker_cut_", ignore_cleanup_errors=True) as base:
        return run(args, pathlib.Path(base))


def run(args: argparse.Namespace, base: pathlib.Path) -> int:
    """``args.rounds`` cuts, with the data, hosts and runs under ``base``."""
    ratios = []
    with HostNetwork(host_names(2, 2), base / "hosts") as net:
        cluster = HostCluster(net, 2, 2, base / "logs")
        cluster.start_storage()
        synthesize(
            base / "data",
            days=3,
            rows_per_day=args.rows,
            seed=7,
            rows_per_file=args.rows // 4,
            row_groups_per_file=2,
        )
        data_url = cluster.upload(base / "data", "data")
        for n in range(args.rounds):
            r = one_round(net, cluster, data_url, args, n)
            ratios.append(r["ratio"])
            print(
                f"round {n}: {r['before']:.1f} steps/s in the {args.before:g} s before the cut, "
                f"{r['after']:.1f} in the {r['window']:.1f} s after ({r['ratio']:.0%}); "
                f"named lost at {_at(r['lost'])}, back at {_at(r['back'])}; steps per "
                f"second by 2 s from -4 s: {r['per_2s']} (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    print(
        f"after/before over {len(ratios)} rounds: median {statistics.median(ratios):.0%}, "
        f"worst {min(ratios):.0%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
