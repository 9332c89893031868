"""How fresh ``recsys-dist follow`` keeps a model: the lag and the bytes of each publication.

Writes ``--hours`` hourly partitions of ``--rows-per-hour`` synthetic rows (the demo's data
and feature config, ``configs/demo.yaml``: 2 workers, 2 parameter servers), then lands
them one at a time under an empty data root, files first and ``_SUCCESS`` last, while
``follow`` runs, publishing after every partition (the first publication is the base,
the others deltas). The next hour lands once the one before is published. Per hour it
prints the seconds of training, of the publication (export and delta) and from the marker
to the publication, the version's bytes against a full export's, and the share of the
tables' rows the delta holds. It runs with the root on local disk and then on moto's S3
server (``--no-s3`` skips that; the data stays local).

The last line is ``publish lag after training: X s, delta/full bytes: Y``: medians over
the deltas of the local run.

Usage: ``python benchmarks/freshness_bench.py [--hours 6] [--rows-per-hour 200000]
[--no-s3]``
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import queue
import shutil
import statistics
import subprocess
import tempfile
import threading
import time

from common import CLI, DEMO_CONFIG, cli, start_moto

from recsys_dist import storage_io
from recsys_dist.data.partitions import copy_partition

#: Seconds to wait for one hour to be trained and published before giving up.
HOUR_TIMEOUT = 900


def land(source: pathlib.Path, data: pathlib.Path, name: str) -> float:
    """Copies partition ``name`` of ``source`` into ``data``, its marker last; returns when
    the marker was written (``time.time()``)."""
    copy_partition(str(source), str(data), name)
    return time.time()


class Lines:
    """The follow process's output lines, each with the time it arrived."""

    def __init__(self, process: subprocess.Popen):
        self.queue: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(process,), daemon=True).start()

    def _read(self, process) -> None:
        for line in process.stdout:
            self.queue.put((time.time(), line.rstrip("\n")))
        self.queue.put((time.time(), None))

    def wait_for(self, *starts: str) -> dict[str, float]:
        """Arrival times of the first line starting with each of ``starts`` (``tag\ttext``:
        the tag as printed, padded with spaces), in order."""
        found: dict[str, float] = {}
        deadline = time.monotonic() + HOUR_TIMEOUT
        for start in starts:
            while start not in found:
                stamp, line = self.queue.get(timeout=max(deadline - time.monotonic(), 1))
                if line is None:
                    raise SystemExit("follow ended early:\n" + "\n".join(self.seen[-30:]))
                self.seen.append(line)
                tag, _, text = start.partition("\t")
                if line.startswith(tag) and line[len(tag) :].lstrip(" ").startswith(text):
                    found[start] = stamp
        return found


def follow_hours(source: pathlib.Path, names: list[str], data: pathlib.Path, root: str) -> list:
    """Runs follow over ``names`` landing one by one; returns a row per hour."""
    data.mkdir(parents=True)
    command = [CLI, "follow", "--config", DEMO_CONFIG, "--data", str(data)]
    command += ["--set", f"follow.root={root}", "--set", "follow.poll_seconds=0.5"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, rows = Lines(process), []
    try:
        for name in names:
            marked = land(source, data, name)
            times = lines.wait_for(
                f"follow\ttraining {name}", f"follow\ttrained {name}", "publish\t"
            )
            manifest = json.loads(
                storage_io.read_text(
                    storage_io.join(root, "published", latest(root), "manifest.json")
                )
            )
            rows.append(
                {
                    "hour": name,
                    "kind": manifest["kind"],
                    "train_s": times[f"follow\ttrained {name}"] - times[f"follow\ttraining {name}"],
                    "publish_s": times["publish\t"] - times[f"follow\ttrained {name}"],
                    "lag_s": times["publish\t"] - marked,
                    "bytes": manifest["bytes"],
                    "ratio": manifest["bytes"] / manifest["full_bytes"],
                    "rows_share": (
                        manifest["rows_changed"]["changed"] / manifest["rows_changed"]["total"]
                        if manifest.get("rows_changed")
                        else None
                    ),
                }
            )
            show(rows[-1])
    finally:
        process.terminate()
        process.wait(timeout=60)
    return rows


def latest(root: str) -> str:
    return storage_io.read_text(storage_io.join(root, "published", "LATEST")).strip()


def show(row: dict) -> None:
    share = "" if row["rows_share"] is None else f", rows changed {row['rows_share']:.1%}"
    print(
        f"  {row['hour']}: {row['kind']:5s} train {row['train_s']:5.1f} s, publish "
        f"{row['publish_s']:5.1f} s, marker->published {row['lag_s']:5.1f} s, "
        f"{row['bytes'] / 1e6:7.1f} MB = {row['ratio']:.3f} of a full export{share}",
        flush=True,
    )


def summary(label: str, rows: list[dict]) -> tuple[float, float]:
    deltas = [r for r in rows if r["kind"] == "delta"]
    lag = statistics.median(r["publish_s"] for r in deltas)
    ratio = statistics.median(r["ratio"] for r in deltas)
    print(
        f"{label}: over {len(deltas)} deltas, median publish {lag:.1f} s after training "
        f"(best {min(r['publish_s'] for r in deltas):.1f}), marker->published median "
        f"{statistics.median(r['lag_s'] for r in deltas):.1f} s, delta/full bytes median "
        f"{ratio:.3f} (best {min(r['ratio'] for r in deltas):.3f})"
    )
    return lag, ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=int, default=6)
    parser.add_argument("--rows-per-hour", type=int, default=200_000)
    parser.add_argument("--no-s3", action="store_true", help="skip the run with the root on S3")
    args = parser.parse_args()
    if args.hours < 2:
        raise SystemExit("--hours must be at least 2: the first publication is the base")
    work = pathlib.Path(tempfile.mkdtemp(prefix="freshness_bench_"))
    try:
        source = work / "source"
        cli(
            "data",
            "synth",
            "--out",
            str(source),
            "--days",
            str(args.hours),
            "--hourly",
            "--rows-per-day",
            str(args.rows_per_hour),
            "--seed",
            "7",
            "--quiet",
        )
        names = sorted(
            str(p.parent.relative_to(source)) for p in source.glob("dt=*/hour=*/_SUCCESS")
        )
        print(f"{len(names)} hourly partitions of {args.rows_per_hour:,} rows; demo config")
        print("root on local disk:")
        local = follow_hours(source, names, work / "data-local", str(work / "root"))
        if not args.no_s3:
            server, _ = start_moto()
            try:
                import boto3

                boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).create_bucket(
                    Bucket="fresh"
                )
                print("root on moto's S3 server:")
                on_s3 = follow_hours(source, names, work / "data-s3", "s3://fresh/root")
            finally:
                server.stop()
            summary("S3", on_s3)
        lag, ratio = summary("local", local)
        print(f"publish lag after training: {lag:.1f} s, delta/full bytes: {ratio:.3f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
