"""What one core of a worker, of a parameter server and of the chief does per second.

The capacity planner (``recsys-dist plan``, ``recsys_dist/cluster/capacity.py``) scales
three measured rates: examples per second per worker core, float32 values per second per
server core (rows gathered and sent, gradients applied, dense weights read and updated)
and closures per second of one chief. This study measures them on local clusters of the
demo model (``configs/demo.yaml``, batch 512, ``cluster.mode: local``) of several shapes,
and checks the planner's bytes per step against the bytes the cluster really sent:

- each run is way (a) of ``benchmarks/train_bench.py`` inside a network namespace of its
  own, so that its loopback counter counts its own traffic only, and
  ``cpu_by_process.measure`` adds up the CPU seconds of every process (chief, workers,
  servers) and the loopback bytes;
- each case runs twice per round, for ``train.max_steps`` S1 and S2 steps: the
  differences divided by S2 - S1 are the cost of one step, without start-up, tracing,
  variable initialisation and the final checkpoint (which move hundreds of MB);
- rates: worker examples per core = batch / the workers' CPU seconds per step; server
  values per core = the planner's values per step (all servers) / the servers' CPU
  seconds per step; chief closures per core = 1 / the chief's CPU seconds per closure,
  from the ``dispatch`` case (logistic regression, batch 16, one step per closure, 4
  workers), where the chief has the most to do;
- bytes: loopback bytes per step (everything: gRPC framing, the chief's calls) against
  the planner's bytes per step over all servers (sent plus received), with the distinct
  rows per batch measured on the same data; and per server, the bytes each one sent to
  and received from the workers (TCP counters of ``ss`` inside the namespace, the chief's
  connections left out) against the planner's figure for that server.

Every round's figures are printed; the summary gives each rate's median, the figures that
go into ``MEASURED_RATES``. Needs root for ``ip netns`` (without it the bytes are not
measured). Answered: docs/scaling.md.

Usage: ``python benchmarks/studies/capacity_rates.py [--rows 400000] [--rounds 2]
[--cases 2w+1ps,dispatch]``
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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from cpu_by_process import Span, measure  # noqa: E402  this folder

ROOT = pathlib.Path(__file__).resolve().parents[2]
TRAIN_BENCH = ROOT / "benchmarks" / "train_bench.py"
DISPATCH = "dispatch"
#: (name, workers, ps, (S1, S2) steps, extra overrides); the dispatch case keeps the chief
#: busiest.
CASES = [
    ("1w+1ps", 1, 1, (150, 650), []),
    ("2w+1ps", 2, 1, (150, 650), []),
    ("2w+2ps", 2, 2, (150, 650), []),
    ("2w+1ps refresh 50", 2, 1, (150, 650), ["train.dense_refresh_steps=50"]),
    (
        DISPATCH,
        4,
        1,
        (300, 2300),
        ["model.name=lr", "input.batch_size=16", "train.steps_per_call=1"],
    ),
    (
        f"{DISPATCH} 8w",
        8,
        1,
        (300, 2300),
        ["model.name=lr", "input.batch_size=16", "train.steps_per_call=1"],
    ),
]


def _loopback_bytes(namespace: str) -> float:
    """Bytes received on ``lo`` in ``namespace`` since it was made (sent = received)."""
    dev = subprocess.run(
        ["ip", "netns", "exec", namespace, "cat", "/proc/net/dev"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in dev.splitlines():
        name, _, fields = line.partition(":")
        if name.strip() == "lo":
            return float(fields.split()[0])
    raise RuntimeError(f"no lo in the network namespace {namespace}")


def _in_namespace(command: list[str], name: str) -> tuple[list[str], bool]:
    """``command`` inside a new network namespace ``name`` (loopback up), or as it is
    when namespaces cannot be made here."""
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode == 0
    if not made:
        return command, False
    subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
    return ["ip", "netns", "exec", name, *command], True


def _job_of(pid: str) -> str:
    """``ps 0``, ``worker 1`` for a server task's pid, else ``chief``."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().decode(errors="replace").split("\0")
    except OSError:
        return "gone"
    if "--job" in argv and "--index" in argv:
        return f"{argv[argv.index('--job') + 1]} {argv[argv.index('--index') + 1]}"
    return "chief"


class ServerBytes:
    """Samples, with ``ss`` inside a namespace, the bytes each parameter server sent to and
    received from the workers (the chief's connections, e.g. the final checkpoint, left
    out): per connection the last counters seen, summed per server."""

    _PID = re.compile(r"pid=(\d+)")

    def __init__(self, namespace: str):
        self.namespace, self.connections = namespace, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _ss(self, flags: str) -> list[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.namespace, "ss", flags], capture_output=True, text=True
        ).stdout.splitlines()

    def sample(self) -> None:
        lines = self._ss("-tinpH")
        owner = {}
        for head in lines[::2]:
            fields, pid = head.split(), self._PID.search(head)
            if pid and len(fields) >= 5:
                owner[fields[3].rsplit(":", 1)[1]] = _job_of(pid.group(1))
        for head, info in zip(lines[::2], lines[1::2]):
            fields = head.split()
            if len(fields) < 5:
                continue
            local, peer = fields[3].rsplit(":", 1)[1], fields[4].rsplit(":", 1)[1]
            # either side may have opened it (a server also fetches gradients from a worker)
            if owner.get(local, "").startswith("ps") and owner.get(peer, "").startswith("worker"):
                sent = re.search(r"bytes_sent:(\d+)", info)
                received = re.search(r"bytes_received:(\d+)", info)
                self.connections[(local, peer)] = (
                    owner[local],
                    int(sent.group(1)) if sent else 0,
                    int(received.group(1)) if received else 0,
                )

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.sample()

    def __enter__(self) -> "ServerBytes":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def per_server(self) -> dict[str, tuple[int, int]]:
        """Server -> (bytes sent to workers, bytes received from them)."""
        out: dict[str, tuple[int, int]] = {}
        for server, sent, received in self.connections.values():
            a, b = out.get(server, (0, 0))
            out[server] = (a + sent, b + received)
        return out


def run_once(data: str, sets: list[str]) -> tuple[Span, bool]:
    """One training run: CPU seconds per role and loopback bytes of the whole run (read
    once it has ended, so the final checkpoint is always in), and whether the bytes are
    the run's own (a network namespace was made)."""
    bench = " ".join(
        [
            sys.executable,
            str(TRAIN_BENCH),
            "--way",
            "a",
            "--data",
            data,
            *[f"--set '{s}'" for s in sets],
        ]
    )
    namespace = f"capacity_rates_{os.getpid()}"
    command, isolated = _in_namespace(["sh", "-c", f"exec {bench} > /dev/null"], namespace)
    servers = ServerBytes(namespace)
    try:
        if isolated:
            with servers:
                samples, code = measure(command, 0.2)
        else:
            samples, code = measure(command, 0.2)
        net = _loopback_bytes(namespace) if isolated else 0.0
    finally:
        if isolated:
            subprocess.run(["ip", "netns", "delete", namespace], check=False)
    if code != 0:
        raise RuntimeError(f"training with {sets} failed with exit code {code}")
    per_server = {
        f"bytes {server} {way}": float(n)
        for server, pair in servers.per_server().items()
        for way, n in zip(("sends", "receives"), pair)
    }
    return Span(samples[-1][0], {**samples[-1][1], "net bytes": net, **per_server}), isolated


def run_case(case, data: str) -> dict:
    """The cost of one step of ``case``: CPU seconds per role and loopback bytes."""
    name, workers, ps, (short, long), extra = case
    sets = [f"cluster.workers={workers}", f"cluster.ps={ps}", *extra]
    (a, isolated), (b, _) = (
        run_once(data, [*sets, f"train.max_steps={steps}"]) for steps in (short, long)
    )
    steps = long - short
    per_step = {
        role: (b.by_role().get(role, 0.0) - a.by_role().get(role, 0.0)) / steps
        for role in ("coordinator", "worker", "ps")
    }
    net = (b.cpu_seconds["net bytes"] - a.cpu_seconds["net bytes"]) / steps
    servers = {
        key[len("bytes ") :]: (b.cpu_seconds[key] - a.cpu_seconds.get(key, 0.0)) / steps
        for key in b.cpu_seconds
        if key.startswith("bytes ")
    }
    return {
        "case": name,
        "servers": ps,
        "cpu_per_step": per_step,
        "bytes_per_step": net if isolated else None,
        "seconds_per_step": (b.wall_seconds - a.wall_seconds) / steps,
        "server_bytes_per_step": servers,
    }


def planner_figures(data: str, sets: list[str], ps: int) -> dict:
    """The planner's bytes and values per step (all servers) for the demo config with
    ``sets`` on ``ps`` servers, distinct rows measured on ``data``."""
    from recsys_dist.cluster.capacity import server_loads
    from recsys_dist.config import load_config
    from recsys_dist.data.batch_rows import distinct_rows_per_batch
    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.models.footprint import model_footprint

    config = load_config(ROOT / "configs" / "demo.yaml", sets).with_data_path(data)
    distinct, _ = distinct_rows_per_batch(prepare_input(config, None, 1), config.features, 20)
    loads = server_loads(model_footprint(config), config, ps, distinct)
    return {
        "batch": config.input.batch_size,
        "steps_per_call": config.train.steps_per_call,
        "bytes": sum(load.bytes_in + load.bytes_out for load in loads),
        "values": sum(load.values for load in loads),
        "servers": {
            f"ps {i} {way}": getattr(load, f"bytes_{d}")
            for i, load in enumerate(loads)
            for way, d in (("sends", "out"), ("receives", "in"))
        },
    }


def derive(run: dict, planned: dict) -> dict:
    """The rates and bytes per step of one case."""
    cpu = run["cpu_per_step"]
    out = {
        "worker_examples_per_core": planned["batch"] / cpu["worker"],
        "server_values_per_core": planned["values"] / cpu["ps"],
        "servers": run["servers"],
        "values_per_step": planned["values"],
        "server_cpu_per_step": cpu["ps"],
        "chief_closures_per_core": 1 / (cpu["coordinator"] * planned["steps_per_call"]),
        "examples_per_second": planned["batch"] / run["seconds_per_step"],
        "predicted_bytes_per_step": planned["bytes"],
    }
    if run["bytes_per_step"] is not None:
        out["measured_bytes_per_step"] = run["bytes_per_step"]
    for key, measured in run["server_bytes_per_step"].items():
        out[f"{key} MB predicted"] = planned["servers"][key] / 1e6
        out[f"{key} MB measured"] = measured / 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000, help="rows of synthetic data")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    parser.add_argument(
        "--cases",
        help="comma-separated names of the cases to run "
        "(default all: " + ", ".join(c[0] for c in CASES) + ")",
    )
    args = parser.parse_args()
    cases = [c for c in CASES if args.cases is None or c[0] in args.cases.split(",")]
    print(f"machine load before: {os.getloadavg()}", flush=True)
    results: dict[str, list[dict]] = {case[0]: [] for case in cases}
    with tempfile.TemporaryDirectory(prefix="capacity_rates_") as tmp:
        from recsys_dist.data.synth_files import synthesize

        synthesize(tmp, days=1, rows_per_day=args.rows, seed=2)
        planned = {
            case[0]: planner_figures(tmp, ["data.train={dates: 2026-01-01}", *case[4]], case[2])
            for case in cases
        }
        for round_ in range(1, args.rounds + 1):
            for case in cases:
                figures = derive(run_case(case, tmp), planned[case[0]])
                results[case[0]].append(figures)
                print(
                    f"round {round_} {case[0]:8s} "
                    + ", ".join(
                        f"{k} {v:,.0f}" if abs(v) >= 100 else f"{k} {v:.3f}"
                        for k, v in figures.items()
                    )
                    + f" | load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    _summary(results)


def server_cost_fit(runs: list[dict]) -> tuple[float, float] | None:
    """The servers' CPU seconds per step as ``P * a + V / r`` (``P`` servers, ``V`` values
    per step over all servers), fitted by least squares: ``(a, r)``; None when the runs
    do not tell the two terms apart (one server count and one values figure)."""
    rows = [(f["servers"], f["values_per_step"], f["server_cpu_per_step"]) for f in runs]
    spp = sum(p * p for p, _, _ in rows)
    spv = sum(p * v for p, v, _ in rows)
    svv = sum(v * v for _, v, _ in rows)
    spy = sum(p * y for p, _, y in rows)
    svy = sum(v * y for _, v, y in rows)
    det = spp * svv - spv * spv
    if abs(det) <= 1e-9 * spp * svv:
        return None
    a, b = (spy * svv - svy * spv) / det, (spp * svy - spv * spy) / det
    return (a, 1 / b) if b > 0 else None


def _summary(results: dict[str, list[dict]]) -> None:
    training = [f for case, runs in results.items() if not case.startswith(DISPATCH) for f in runs]
    for key in ("worker_examples_per_core", "server_values_per_core"):
        values = [f[key] for f in training]
        if values:
            print(
                f"{key}: median {statistics.median(values):,.0f} (best {max(values):,.0f}, "
                f"{len(values)} runs)"
            )
    fit = server_cost_fit(training)
    if fit is not None:
        step_seconds, values_per_second = fit
        print(
            f"server CPU per step = servers x {step_seconds * 1e3:.2f} ms + values / "
            f"{values_per_second:,.0f} per second (least squares over {len(training)} runs)"
        )
    for case in (c for c in results if c.startswith(DISPATCH)):
        chief = [f["chief_closures_per_core"] for f in results[case]]
        print(
            f"chief_closures_per_core ({case} case): median "
            f"{statistics.median(chief):,.0f} (best {max(chief):,.0f})"
        )
    for case, runs in results.items():
        measured = [f["measured_bytes_per_step"] for f in runs if "measured_bytes_per_step" in f]
        if measured:
            m = statistics.median(measured)
            p = runs[0]["predicted_bytes_per_step"]
            print(
                f"bytes per step {case}: predicted {p / 1e6:.3f} MB, measured {m / 1e6:.3f} "
                f"MB (median), predicted / measured {p / m:.2f}"
            )
        for key in sorted(k[: -len(" MB measured")] for k in runs[0] if k.endswith(" MB measured")):
            m = statistics.median(f[f"{key} MB measured"] for f in runs)
            p = runs[0][f"{key} MB predicted"]
            print(
                f"  {case} {key} (to/from workers): predicted {p:.3f} MB, measured {m:.3f} MB "
                f"per step, predicted / measured {p / m:.2f}"
            )


if __name__ == "__main__":
    main()
