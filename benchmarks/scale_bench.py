"""Embedding scale benchmark: the largest table (rows x 16) that trains for 1,000 steps.

For each size in ``--rows`` (ascending), it runs ``recsys-dist train`` in a fresh local
cluster of 2 workers and 2 parameter servers. The feature config has one id feature
hashed into a single table of that many rows x 16, sharded over both parameter servers
(Adagrad slots included), plus a small numeric feature. It trains ``--steps`` steps of
batch 512 on synthetic data and records every server's peak resident memory (VmHWM
from /proc). It stops at the first size that fails and prints the largest that trained.

Usage: ``python benchmarks/scale_bench.py [--rows 10000000,30000000,100000000] [--steps 1000]``
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import tempfile
import threading
import time

from common import CLI, cli  # this folder

from recsys_dist.cluster.local import child_pids

FEATURES = """\
tables:
  ids: {{rows: {rows}, dim: 16}}
features:
  C3: {{kind: categorical, dtype: int64, table: ids}}
  I1: {{kind: numeric, transform: log1p, nan_means_missing: true}}
labels:
  click: {{}}
"""

CONFIG = """\
features: features.yaml
data: {{path: {data}, train: {{dates: 2026-01-01}}}}
input: {{batch_size: 512}}
model: {{name: dcn_v2, labels: [click], params: {{cross_layers: 1, low_rank: 8,
         hidden_units: [32]}}}}
train: {{max_steps: {steps}, epochs: 100, steps_per_call: 50, log_every_seconds: 1000,
         embedding_shard_bytes: 1048576}}
cluster: {{mode: local, workers: 2, ps: 2}}
"""


def _peak_kib(pid: int) -> int:
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _label(pid: int, coordinator: int) -> str:
    if pid == coordinator:
        return "coordinator"
    try:
        argv = pathlib.Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except OSError:
        return str(pid)
    if "--job" in argv and "--index" in argv:
        return f"{argv[argv.index('--job') + 1]}-{argv[argv.index('--index') + 1]}"
    return str(pid)


def run(rows: int, steps: int, data: str, tmp: pathlib.Path) -> dict:
    work = tmp / f"rows{rows}"
    work.mkdir()
    (work / "features.yaml").write_text(FEATURES.format(rows=rows))
    (work / "config.yaml").write_text(CONFIG.format(data=data, steps=steps))
    process = subprocess.Popen(
        [
            CLI,
            "train",
            "--config",
            str(work / "config.yaml"),
            "--model-dir",
            str(work / "run"),
            "--no-eval",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    peaks: dict[str, int] = {}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for pid in [process.pid] + child_pids(process.pid):
                label = _label(pid, process.pid)
                if not label.isdigit():  # only the coordinator and the server tasks
                    peaks[label] = max(peaks.get(label, 0), _peak_kib(pid))
            time.sleep(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    start = time.perf_counter()
    output = process.communicate()[0]
    stop.set()
    watcher.join()
    result = {
        "rows": rows,
        "ok": process.returncode == 0,
        "seconds": round(time.perf_counter() - start, 1),
        "peak_gib": {label: round(kib / 2**20, 2) for label, kib in sorted(peaks.items())},
    }
    if result["ok"]:
        figures = json.loads((work / "run" / "train_result.json").read_text())
        result["steps"] = figures["steps"]
    else:
        result["error"] = output[-1500:]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="10000000,30000000,100000000")
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    sizes = sorted(int(r) for r in args.rows.split(","))
    largest = None
    with tempfile.TemporaryDirectory(prefix="scale_bench_") as tmp:
        data = str(pathlib.Path(tmp) / "data")
        cli("data", "synth", "--out", data, "--days", "1", "--rows-per-day", "200000", "--quiet")
        for rows in sizes:
            result = run(rows, args.steps, data, pathlib.Path(tmp))
            print(
                f"{rows:>13,} rows x 16: {'trained' if result['ok'] else 'FAILED'} "
                f"{result.get('steps', 0)} steps in {result['seconds']}s; peak GiB: "
                + ", ".join(f"{k} {v}" for k, v in result["peak_gib"].items()),
                flush=True,
            )
            if not result["ok"]:
                print(result["error"])
                break
            largest = rows
    print(
        f"largest table that trained {args.steps} steps: "
        + (
            f"{largest:,} rows x 16 ({largest * 16 * 4 / 2**30:.1f} GiB of weights, as much "
            "again in Adagrad slots)"
            if largest
            else "none"
        )
    )


if __name__ == "__main__":
    main()
