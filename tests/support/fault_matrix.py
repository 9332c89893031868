"""The fault matrix: each fault of machines and networks at each moment of a run.

Each cell is a real run on the namespace hosts of :mod:`tests.support.hosts` (the chief, an
S3 host, 2 worker hosts, 2 parameter-server hosts; ``TF_CONFIG`` as ``docs/multi-machine.md``
says; data and model dir on ``s3://``): the command starts, the fault falls at the cell's
moment, and the cell records how the command ended (its exit code, the seconds from the
fault to the end, the line naming the task) and checks what it left: every complete
checkpoint matches the manifest in its ``state.json``, a publication is whole or absent, and
a run that ended is completed by the same command run again without the fault.

``docs/fault-tolerance.md`` ("Every fault at every moment") gives the expected outcome of
each cell; :data:`EXPECTED` holds the same table, and a cell whose outcome differs fails.

    .venv/bin/python -m tests.support.fault_matrix [--moments M,...] [--faults F,...]

runs the cells (all by default) one after another, prints one line per cell as it ends and
the whole table at the end, and exits 1 if a cell failed. It needs root (network
namespaces) and takes about an hour and a half on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import pathlib
import re
import shutil
import signal
import sys
import tempfile
import threading
import time

from tests.support import hosts as host_support
from tests.support.host_cluster import BUCKET, CREDENTIALS, HostCluster, cluster_config, host_names
from tests.support.hosts import HostNetwork
from tests.support.train_run import TrainRun

#: ``cluster.give_up_after_seconds`` of every cell: a task unreachable this long ends it.
GIVE_UP_SECONDS = 20
#: How long a link cut "for a while" stays down: three times ``cluster.lost_after_seconds``.
SHORT_CUT_SECONDS = 15
#: How long after a host is SIGKILLed its server starts again, as an orchestrator would.
RESTART_AFTER_SECONDS = 3
#: What an end "within T" allows beyond T: the probe interval, the line's write, the exit.
MARGIN_SECONDS = 10
#: SIGTERM ends a command within this many seconds wherever its threads are.
SIGTERM_SECONDS = 5
ROWS_PER_DAY = 12_000
DATE = "2026-01-02"  # the retrain cells' day: train on day 2, hold out day 3


@dataclasses.dataclass(frozen=True)
class Moment:
    """When a cell's fault falls: at the command's start, or once the chief has printed
    the ``count``-th line matching ``line`` and then, if given, once ``key`` (a key
    under the run's S3 root, ``{root}`` and ``{date}`` filled in) exists on S3, or once a
    staging directory exists in the chief's ``/tmp`` (``staged``)."""

    description: str
    command: str = "train"
    line: str | None = None
    count: int = 1
    key: str | None = None
    staged: bool = False


MOMENTS = {
    "start": Moment("before the servers answer: as the command starts"),
    "variables": Moment("while the variables are created on the servers", line=r"^cluster +"),
    "first_trace": Moment("while the first step is traced", line=r"^model +"),
    "training": Moment("mid-training", line=r"^step [\d,]+ \|", count=3),
    "checkpoint": Moment(
        "during a checkpoint's write", line=r"^step [\d,]+ \|", count=2, staged=True
    ),
    "evaluation": Moment("during the run's evaluation", line=r"^trained +"),
    "export": Moment(
        "in retrain, while the day's model is exported",
        command="retrain",
        key="{root}/runs/{date}/eval/metrics.json",
    ),
    "publish": Moment(
        "in retrain, while it publishes", command="retrain", key="{root}/published/{date}/"
    ),
}


@dataclasses.dataclass(frozen=True)
class Fault:
    """What happens to ``host`` (None: the chief): its link ``cut`` (for ``seconds``, or
    for good when None), every process of it SIGKILLed (``kill``; its server starts
    again :data:`RESTART_AFTER_SECONDS` later), or SIGTERM to the chief (``sigterm``)."""

    description: str
    action: str
    host: str | None = None
    seconds: float | None = None

    @property
    def task(self) -> tuple[str, int] | None:
        if self.host is None:
            return None
        job = self.host.rstrip("0123456789")
        return job, int(self.host[len(job) :])


FAULTS = {
    "worker_cut_15": Fault(
        f"a worker's link cut for {SHORT_CUT_SECONDS} s", "cut", "worker1", SHORT_CUT_SECONDS
    ),
    "worker_cut": Fault("a worker's link cut for good", "cut", "worker1"),
    "ps_cut_15": Fault(
        f"a parameter server's link cut for {SHORT_CUT_SECONDS} s",
        "cut",
        "ps1",
        SHORT_CUT_SECONDS,
    ),
    "ps_cut": Fault("a parameter server's link cut for good", "cut", "ps1"),
    "worker_killed": Fault("a worker host SIGKILLed, its server started again", "kill", "worker1"),
    "ps_killed": Fault(
        "a parameter-server host SIGKILLed, its server started again", "kill", "ps1"
    ),
    "sigterm": Fault("SIGTERM to the chief", "sigterm"),
}


@dataclasses.dataclass(frozen=True)
class Expected:
    """A cell's expected end: ``code`` (0: the run completes), within ``seconds`` of the
    fault (None: no bound beyond the run's own length), with a line matching ``line``."""

    code: int
    seconds: float | None = None
    line: str | None = None


#: The moments before the first step: a worker lost then is left out of the run (which
#: starts again without it) rather than waited for.
BEFORE_FIRST_STEP = ("start", "variables", "first_trace")


def expected(moment: str, fault: str) -> Expected:
    """The outcome ``docs/fault-tolerance.md`` gives for the cell."""
    spec = FAULTS[fault]
    if spec.action == "sigterm":
        return Expected(143, SIGTERM_SECONDS, r"^error: stopped by SIGTERM")
    job, index = spec.task
    if spec.action == "cut" and spec.seconds is None:
        if moment in ("export", "publish"):
            return Expected(0)  # the export and the publication use no server
        if moment in BEFORE_FIRST_STEP and job == "worker":
            return Expected(0)  # left out of the run, which completes without it
        return Expected(
            4,
            GIVE_UP_SECONDS + MARGIN_SECONDS,
            rf"^error: {job} {index} \(.*\) has been unreachable for {GIVE_UP_SECONDS} s",
        )
    return Expected(0)


@dataclasses.dataclass
class Cell:
    """One cell's observed outcome and its checks."""

    moment: str
    fault: str
    code: int | str = "?"
    after_fault: float | None = None
    first_step: float | None = None  # seconds from the fault to the first step's line
    named: str = ""
    problems: list[str] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def row(self) -> str:
        took, first = (
            "-" if seconds is None else f"{seconds:.1f}"
            for seconds in (self.after_fault, self.first_step)
        )
        verdict = "ok" if self.passed else "FAILED: " + "; ".join(self.problems)
        return (
            f"| {self.moment} | {self.fault} | {self.code} | {took} | {first} | {self.named} "
            f"| {verdict} |"
        )


class Matrix:
    """The hosts, the data on S3 and the configs the cells share."""

    def __init__(self, net: HostNetwork, base: pathlib.Path):
        from recsys_dist.data.synth_files import synthesize

        self.net, self.base = net, base
        self.logs = base / "logs"
        storage = HostCluster(net, 2, 2, self.logs)
        storage.start_storage()
        self.storage = storage
        data = base / "data"
        synthesize(
            data, days=3, rows_per_day=ROWS_PER_DAY, seed=7, rows_per_file=6_000,
            row_groups_per_file=2,
        )  # fmt: skip
        self.data_url = storage.upload(data, "data")
        os.environ.update({"AWS_ENDPOINT_URL": storage.s3_url, **CREDENTIALS})
        self.cells = 0

    def config(self, root: str) -> str:
        return cluster_config(
            self.net.hosts["chief"].directory,
            self.data_url,
            {
                "cluster.give_up_after_seconds": GIVE_UP_SECONDS,
                "retrain": {"root": root, "gate": {"max_drop": 1.0}},
            },
        )

    def start(self, command: str, config: str, root: str, servers: HostCluster) -> TrainRun:
        if command == "retrain":
            argv = ("retrain", "--config", config, "--date", DATE)
            return TrainRun(
                config, "", env=servers.chief_env(), prefix=self.net.command("chief", []),
                command=argv,
            )  # fmt: skip
        return servers.train(config, f"{root}/run")

    def run_cell(self, moment: str, fault: str) -> Cell:
        self.cells += 1
        cell = Cell(moment, fault)
        when, what = MOMENTS[moment], FAULTS[fault]
        root = f"s3://{BUCKET}/matrix/{self.cells:02d}-{moment}-{fault}"
        config = self.config(root)
        servers = HostCluster(self.net, 2, 2, self.logs)
        servers.start_servers()
        timers: list[threading.Timer] = []
        try:
            if when.line is None and when.key is None and not when.staged:
                if what.action == "sigterm":
                    run = self.start(when.command, config, root, servers)
                    time.sleep(1.0)  # inside its Python, before it connects
                    fault_at = self._apply(what, run, servers, timers)
                else:  # the task is gone before the command starts
                    fault_at = self._apply(what, None, servers, timers)
                    run = self.start(when.command, config, root, servers)
            else:
                run = self.start(when.command, config, root, servers)
                if not self._wait_for_moment(run, when, root):
                    cell.code = run.finish(timeout=600)
                    cell.problems.append("the run ended before the moment came")
                    self._keep(cell, run)
                    return cell
                fault_at = self._apply(what, run, servers, timers)
            try:
                cell.code = run.finish(timeout=900)
            except AssertionError as exc:
                cell.code = "hung"
                cell.problems.append(str(exc).splitlines()[0])
                return cell
            cell.after_fault = max(0.0, time.monotonic() - fault_at)
            cell.first_step = self._first_step_after(run, fault_at)
            cell.named = self._named(run, what)
            self._check(cell, run, expected(moment, fault))
            for timer in timers:
                timer.join()
            if cell.code != 0:  # the same command again, without the fault, completes
                self._restore_all(servers)
                again = self.start(when.command, config, root, servers)
                code = again.finish(timeout=900)
                if code != 0:
                    cell.problems.append(f"the run again exits {code}: {again.lines[-1:]}")
            cell.problems.extend(self._unsound(root, when.command))
            self._keep(cell, run)
            return cell
        finally:
            for timer in timers:
                timer.cancel()
            servers.stop_servers()
            self.net.kill_host("chief")
            self._restore_all(servers)

    def _keep(self, cell: Cell, run: TrainRun) -> None:
        """Keeps the chief's output of the cell in the logs directory."""
        (self.logs / f"{self.cells:02d}-{cell.moment}-{cell.fault}.out").write_text(run.output)

    def _restore_all(self, servers: HostCluster) -> None:
        for host in ("worker0", "worker1", "ps0", "ps1"):
            self.net.restore(host)
            if host not in servers.servers or servers.servers[host].poll() is not None:
                servers.start_server(host.rstrip("01"), int(host[-1]))

    def _wait_for_moment(self, run: TrainRun, when: Moment, root: str) -> bool:
        try:
            if when.line is not None:
                run.wait_for(when.line, count=when.count, timeout=600)
            if when.key is not None:
                key = when.key.format(root=root, date=DATE)
                self._poll(run, lambda: self.storage.keys(key))
            if when.staged:
                chief_tmp = self.net.hosts["chief"].directory
                # a command's scratch directory (recsys_dist/scratch.py) holds its staging
                self._poll(run, lambda: list(chief_tmp.glob("recsys_dist-*/recsys_dist_stage_*")))
        except AssertionError:
            return False
        return run.process.poll() is None

    @staticmethod
    def _poll(run: TrainRun, found, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not found():
            if run.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("the moment did not come")
            time.sleep(0.02)

    def _apply(self, what: Fault, run: TrainRun | None, servers, timers) -> float:
        now = time.monotonic()
        if what.action == "sigterm":
            if run is not None:
                run.process.send_signal(signal.SIGTERM)
        elif what.action == "cut":
            self.net.cut(what.host)
            if what.seconds is not None:
                timers.append(threading.Timer(what.seconds, self.net.restore, args=(what.host,)))
        else:
            self.net.kill_host(what.host)
            servers.servers.pop(what.host, None)
            job, index = what.task
            timers.append(
                threading.Timer(RESTART_AFTER_SECONDS, servers.start_server, args=(job, index))
            )
        for timer in timers:
            if not timer.is_alive():
                timer.start()
        return now

    @staticmethod
    def _first_step_after(run: TrainRun, fault_at: float) -> float | None:
        """Seconds from the fault to the first progress line, when none came before it."""
        steps = [t for t, line in zip(run.times, run.lines) if re.match(r"^step [\d,]+ \|", line)]
        if not steps or steps[0] < fault_at:
            return None
        return steps[0] - fault_at

    @staticmethod
    def _named(run: TrainRun, what: Fault) -> str:
        if what.task is None:
            return run.lines[-1].strip()[:80] if run.lines else ""
        job, index = what.task
        said = [
            line.split()[0]
            for line in run.lines
            if re.match(rf"^(lost|back|error|wait|restart)\b.*\b{job} {index}\b", line)
            or (line.startswith("restart") and "lost a task" in line)
        ]
        return ", ".join(dict.fromkeys(said)) or "not named"

    @staticmethod
    def _check(cell: Cell, run: TrainRun, want: Expected) -> None:
        if cell.code != want.code:
            cell.problems.append(f"exit {cell.code}, expected {want.code}")
        if want.seconds is not None and (cell.after_fault or 0) > want.seconds:
            cell.problems.append(f"ended {cell.after_fault:.1f} s after, bound {want.seconds} s")
        if want.line is not None and not any(re.search(want.line, x) for x in run.lines):
            cell.problems.append(f"no line {want.line!r}")
        if "Traceback" in run.output:
            cell.problems.append("a traceback in the output")

    def _unsound(self, root: str, command: str) -> list[str]:
        """What the cell left half-written: a complete checkpoint whose files differ from
        its manifest, a publication with ``_SUCCESS`` but no manifest or export, a
        ``CURRENT`` naming an incomplete publication."""
        from recsys_dist import storage_io
        from recsys_dist.checkpoint.store import CheckpointManager, local_prefix, verify_files

        problems = []
        run_dirs = [f"{root}/run"] if command == "train" else [f"{root}/runs/{DATE}"]
        for run_dir in run_dirs:
            for saved in CheckpointManager(run_dir).all_complete():
                try:
                    with local_prefix(saved) as prefix:
                        verify_files(saved, os.path.dirname(prefix))
                except Exception as exc:  # noqa: BLE001 - the report names it
                    problems.append(f"{saved.directory}: {exc}")
        if command == "retrain":
            published = f"{root}/published/{DATE}"
            if storage_io.exists(f"{published}/_SUCCESS"):
                for name in ("manifest.json", "export/saved_model.pb"):
                    if not storage_io.exists(f"{published}/{name}"):
                        problems.append(f"{published} has _SUCCESS but no {name}")
            if storage_io.exists(f"{root}/CURRENT"):
                current = storage_io.read_text(f"{root}/CURRENT").strip()
                if not storage_io.exists(f"{root}/published/{current}/_SUCCESS"):
                    problems.append(f"CURRENT names {current}, which has no _SUCCESS")
        return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moments", default=",".join(MOMENTS), help=", ".join(MOMENTS))
    parser.add_argument("--faults", default=",".join(FAULTS), help=", ".join(FAULTS))
    parser.add_argument("--out", help="keep the logs here (default: a temporary directory)")
    args = parser.parse_args(argv)
    moments = [m for m in args.moments.split(",") if m]
    faults = [f for f in args.faults.split(",") if f]
    unknown = [m for m in moments if m not in MOMENTS] + [f for f in faults if f not in FAULTS]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    reason = host_support.unavailable_reason()
    if reason is not None:
        print(f"error: network namespaces: {reason}", file=sys.stderr)
        return 2
    base = pathlib.Path(args.out or tempfile.mkdtemp(prefix="fault_matrix_"))
    base.mkdir(parents=True, exist_ok=True)
    cells = []
    with HostNetwork(host_names(2, 2), base / "hosts") as net:
        matrix = Matrix(net, base)
        print(
            "| moment | fault | exit | s after the fault | first step after it (s) | named "
            "| outcome |",
            flush=True,
        )
        print("|---|---|---|---|---|---|---|", flush=True)
        for moment in moments:
            for fault in faults:
                cell = matrix.run_cell(moment, fault)
                cells.append(cell)
                print(cell.row(), flush=True)
    failed = [c for c in cells if not c.passed]
    print(f"\n{len(cells) - len(failed)} of {len(cells)} cells as expected; logs in {base}")
    if not args.out:
        with contextlib.suppress(OSError):
            shutil.rmtree(base / "hosts")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
