"""``recsys-dist train`` as a subprocess whose output a test reads line by line while it
runs (to kill it, or one of its servers, at a chosen moment)."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import threading
import time
from collections.abc import Sequence

from recsys_dist.cluster.local import child_pids, server_pids
from tests.support import command_forks
from tests.support.paths import CLI


class TrainRun:
    """``recsys-dist train`` in a subprocess, its output collected line by line."""

    def __init__(
        self,
        config: str,
        model_dir: pathlib.Path | str,
        *extra: str,
        env: dict[str, str] | None = None,
        prefix: Sequence[str] = (),
        command: Sequence[str] | None = None,
    ):
        """``prefix``: a command that runs the rest (e.g. on a host of
        :class:`tests.support.hosts.HostNetwork`). ``command``: another ``recsys-dist``
        command's arguments instead of ``train`` (``config`` and ``model_dir`` unused),
        e.g. ``("retrain", "--config", C, "--date", D)``."""
        if command is None:
            command = ("train", "--config", config, "--model-dir", str(model_dir), *extra)
        self.process = command_forks.popen(
            [*prefix, CLI, *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=None if env is None else {**os.environ, **env},
        )
        self.lines: list[str] = []
        self.times: list[float] = []  # time.monotonic() when each line was read
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.times.append(time.monotonic())
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 240) -> re.Match:
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = [m for m in (re.search(pattern, line) for line in list(self.lines)) if m]
            if len(found) >= count:
                return found[count - 1]
            if self.process.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(
            f"no {count} x {pattern!r} in the output:\n{self.output[-4000:]}{self.stacks()}"
        )

    def stacks(self) -> str:
        """Every Python thread's stack of the running command (it prints them on SIGUSR1,
        ``recsys_dist/console.py``), for a test that gives up on it; "" once it ended."""
        if self.process.poll() is not None:
            return ""
        start = len(self.lines)
        self.process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(
            line.startswith(("Thread 0x", "Current thread")) for line in self.lines[start:]
        ):
            time.sleep(0.1)
        time.sleep(1)  # the rest of the stacks
        return "\nits threads' stacks when the test gave up:\n" + "".join(self.lines[start:])

    def steps_per_second(self, start: float, end: float) -> float:
        """Training steps per second from ``start`` to ``end`` (``time.monotonic()``
        times): the steps from the last progress line at or before ``start`` to the last
        at or before ``end``, over the time from ``start`` to ``end``, or to the run's
        last progress line when its data ran out before ``end``; 0 when no progress line
        came after ``start``."""
        steps = [
            (t, int(m.group(1).replace(",", "")))
            for t, line in zip(list(self.times), list(self.lines))
            if (m := re.match(r"(?:checkpoint )?step ([\d,]+)", line))
        ]
        base = [s for t, s in steps if t <= start]
        inside = [(t, s) for t, s in steps if start < t <= end]
        if not base or not inside:
            return 0.0
        return (inside[-1][1] - base[-1]) / (min(end, steps[-1][0]) - start)

    def finish(self, timeout: float = 400) -> int:
        """The run's exit code; a run still going after ``timeout`` seconds is killed and
        fails the test with the end of its output."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            start = len(self.lines)
            stacks = self.stacks()
            self.process.kill()
            self.process.wait()
            self._reader.join(timeout=10)
            raise AssertionError(
                f"the run did not end within {timeout:.0f} s; its output ends:\n"
                + "".join(self.lines[:start])[-6000:]
                + stacks
            ) from None
        self._reader.join(timeout=10)
        return code

    def servers(self, job: str) -> list[int]:
        """Pids of this run's ``job`` server processes, by task index."""
        found = server_pids(self.process.pid)
        return [found[key] for key in sorted(found) if key[0] == job]

    def collective_workers(self) -> list[int]:
        """Pids of this run's ``multi_worker_mirrored`` worker processes, by worker index
        (the launcher's children named ``collective-{index}``)."""
        found = {}
        for pid in child_pids(self.process.pid):
            try:
                name = pathlib.Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue  # it ended while we looked
            prefix, _, index = name.rpartition("-")
            if prefix == "collective" and index.isdigit():
                found[int(index)] = pid
        return [found[i] for i in sorted(found)]

    def last_step(self) -> int:
        steps = [
            int(m.group(1).replace(",", ""))
            for m in (re.match(r"(?:step|checkpoint step) ([\d,]+)", line) for line in self.lines)
            if m
        ]
        return max(steps, default=0)


def train_without_eval(config: str, model_dir: pathlib.Path, *extra: str) -> str:
    """Runs ``recsys-dist train --no-eval`` to the end, asserts it succeeded; its output."""
    run = TrainRun(config, model_dir, "--no-eval", *extra)
    assert run.finish() == 0, run.output[-3000:]
    return run.output
