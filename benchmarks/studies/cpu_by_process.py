"""Where the CPU time of a local-cluster run goes: coordinator, workers, parameter servers.

Runs a command (by default way (a) of ``benchmarks/train_bench.py``: ``recsys-dist``'s
trainer on a local cluster of 2 workers and 2 parameter servers) and samples ``/proc`` every
``--interval`` seconds for the command's whole process tree. Each process is put in a
role by its command line (``--job ps`` / ``--job worker`` of
``recsys_dist.cluster.server``; anything else is the coordinator) and its CPU seconds
(user + system) are summed per role, up to the last sample before the process ended.
It reports the whole run, and the longest stretch in which the workers together ran at
half their peak CPU rate or more: the training, without start-up, tracing and shutdown.

On a 2-core machine every process shares the same 2 cores, so CPU seconds are the cost
that matters: time the parameter servers spend serving reads and applying updates is
time the workers cannot compute.

Answered: docs/training.md ("Reading the dense weights less often") and the README: during
training the workers take 75.5% of the CPU, the parameter servers 22.6%, the coordinator
1.9%. ``cpu_by_process(...)`` returns the figures, one :class:`Span` per stretch.

Usage: ``python benchmarks/studies/cpu_by_process.py [--rows 300000] [--interval 0.5]
[-- COMMAND ...]``
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parents[2]
TICKS = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def _cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def _role(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return None
    if b"recsys_dist.cluster.server" in argv:
        job = argv[argv.index(b"--job") + 1].decode() if b"--job" in argv else "?"
        index = argv[argv.index(b"--index") + 1].decode() if b"--index" in argv else "?"
        return f"{job} {index}"
    return "coordinator"


def measure(
    command: list[str], interval: float, extra: Callable[[int], dict[str, float]] | None = None
) -> tuple[list[tuple[float, dict[str, float]]], int]:
    """Samples ``command``'s process tree until it exits: ``(wall seconds, CPU seconds per
    role so far)`` per sample, and the command's exit code. ``extra(pid)`` (given the
    command's pid) adds its own counters to each sample, e.g. bytes sent."""
    start = time.perf_counter()
    root = subprocess.Popen(command)
    last: dict[int, tuple[str, float]] = {}
    samples = []
    while root.poll() is None:
        for pid in [root.pid, *_children(root.pid)]:
            seconds = _cpu_seconds(pid)
            # Re-read until it names a server: a child's first sample may precede its exec,
            # and an ended server (a zombie until reaped) has an empty command line.
            known = last.get(pid, ("coordinator", 0.0))[0]
            role = known if known != "coordinator" else _role(pid)
            if seconds is not None and role is not None:
                last[pid] = (role, seconds)
        totals: dict[str, float] = collections.defaultdict(float)
        for role, seconds in last.values():
            totals[role] += seconds
        if extra is not None:
            totals.update(extra(root.pid))
        samples.append((time.perf_counter() - start, dict(totals)))
        time.sleep(interval)
    return samples, root.returncode


def busy_window(samples: list[tuple[float, dict[str, float]]]) -> tuple[int, int]:
    """First and last sample of the longest stretch in which the workers together ran at
    half their peak CPU rate or more: training, as opposed to start-up, variable
    initialisation, tracing and shutdown."""

    def workers(i):
        return sum(v for role, v in samples[i][1].items() if role.startswith("worker"))

    rates = [
        (workers(i) - workers(i - 1)) / (samples[i][0] - samples[i - 1][0])
        for i in range(1, len(samples))
    ]
    peak = max(rates, default=0.0)
    best, start = (0, len(samples) - 1), None
    for i, rate in enumerate(rates + [-1.0], start=1):
        if rate >= 0.5 * peak > 0 and start is None:
            start = i - 1
        elif rate < 0.5 * peak and start is not None:
            if i - 1 - start > best[1] - best[0] or best == (0, len(samples) - 1):
                best = (start, i - 1)
            start = None
    return best


@dataclasses.dataclass(frozen=True)
class Span:
    """CPU seconds per role (``coordinator``, ``worker 0``, ``ps 1``, ...) over a stretch
    of ``wall_seconds``."""

    wall_seconds: float
    cpu_seconds: dict[str, float]

    def by_role(self) -> dict[str, float]:
        """The CPU seconds summed per kind of role (coordinator, worker, ps)."""
        groups: dict[str, float] = collections.defaultdict(float)
        for role, seconds in self.cpu_seconds.items():
            groups[role.split()[0]] += seconds
        return dict(sorted(groups.items()))


def _span(first, last) -> Span:
    return Span(
        last[0] - first[0],
        {role: last[1].get(role, 0.0) - first[1].get(role, 0.0) for role in sorted(last[1])},
    )


def cpu_by_process(
    command: list[str] | None = None, rows: int = 300_000, interval: float = 0.5
) -> dict[str, Span]:
    """Runs ``command`` (default: way (a) of ``train_bench.py`` on ``rows`` synthetic rows),
    sampling every ``interval`` seconds. Returns the ``whole run`` and the ``training``
    (the workers' busy stretch); raises ``RuntimeError`` when the command fails or ends
    before two samples."""
    with tempfile.TemporaryDirectory(prefix="cpu_by_process_") as tmp:
        if not command:
            from recsys_dist.data.synth_files import synthesize

            synthesize(tmp, days=1, rows_per_day=rows, seed=2)
            command = [
                sys.executable,
                str(ROOT / "benchmarks" / "train_bench.py"),
                "--way",
                "a",
                "--data",
                tmp,
            ]
        samples, code = measure(command, interval)
    if code != 0:
        raise RuntimeError(f"the command failed with exit code {code}: {' '.join(command)}")
    if len(samples) < 3:
        raise RuntimeError("the command ended before two samples; lower the interval")
    first, last = busy_window(samples)
    return {
        "whole run": _span((0.0, {}), samples[-1]),
        "training": _span(samples[first], samples[last]),
    }


def _report(title: str, span: Span) -> None:
    total = sum(span.cpu_seconds.values())
    print(
        f"{title}: {span.wall_seconds:.1f} s wall, {total:.1f} s CPU "
        f"({total / max(span.wall_seconds, 1e-9):.2f} cores busy on average)"
    )
    for role, seconds in span.cpu_seconds.items():
        print(f"  {role:12s} {seconds:7.1f} s CPU  {100 * seconds / total:5.1f}%")
    print(
        "  by role: "
        + ", ".join(f"{role} {100 * s / total:.1f}%" for role, s in span.by_role().items())
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", type=int, default=300_000, help="rows of synthetic data for the default command"
    )
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("command", nargs="*", help="command to measure (after --)")
    args = parser.parse_args()
    try:
        spans = cpu_by_process(args.command, args.rows, args.interval)
    except RuntimeError as exc:
        sys.exit(f"error: {exc}")
    _report("whole run", spans["whole run"])
    _report("training (the workers' busy stretch)", spans["training"])


if __name__ == "__main__":
    main()
