"""What network latency and bandwidth cost asynchronous training, on hosts made of Linux
network namespaces (``tests/support/hosts.py``; needs root).

The demo model (``configs/demo.yaml``) trains on 2 worker hosts and 2 parameter-server
hosts, chief on a host of its own, data and model dir on a storage host's S3, in
``tf_config`` mode, as on several machines. Cases, in interleaved rounds:

- ``loopback``: the same cluster as local processes on 127.0.0.1 (``cluster.mode: local``)
  in this process's namespace, the baseline;
- ``hosts``: the four hosts, direct;
- ``+D ms``: every task reached through a relay that adds D ms each way (the kernel has
  no ``netem``; ``tests/support/delay_relay.py``), so a round trip gains 2 D;
- ``N gbit``: the parameter-server hosts' links capped at N Gbit/s each way (``tc tbf``).

A run trains ``--steps`` steps without evaluation or checkpoints on the way; the figures
come from its progress lines after a quarter of the steps (the start-up and tracing
left out): examples/s, and the bytes each parameter-server host sent and received per
step (its link's counters, read at each progress line). ``--settings`` adds one round of
settings at 1 ms (``train.steps_per_call``, ``input.batch_size``,
``train.dense_refresh_steps``). ``--dispatch N,M`` measures how many closures a second one
coordinator hands out to N (then M) worker hosts doing almost nothing (batch 8, one step
per closure), with the chief's CPU time. ``--planner`` checks ``recsys-dist plan``'s model
against the four-host runs: its CPU seconds per step of the workers, the servers and the
chief, and its busiest server's bytes per step, against what the ``hosts`` runs spent
(``/proc`` CPU times of every process on each host, the ps links' byte counters); and its
NIC ceiling against the capped runs where it binds (0.1 Gbit/s).

The last line is ``throughput at 1 ms vs 0 ms: X`` (medians, relay at 1 ms against relay
at 0 ms). Other work on the machine changes the figures: the load (``uptime``) is printed
with each.

    python benchmarks/network_bench.py --rounds 2 --settings --dispatch 8,16 --planner
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import CLI, DEMO_CONFIG, interleaved  # noqa: E402

from tests.support.host_cluster import BUCKET, HostCluster, host_names  # noqa: E402
from tests.support.hosts import HostNetwork, unavailable_reason  # noqa: E402

DELAYS = (0.0, 0.1, 0.5, 1.0, 2.0)
LIMITS = (10.0, 1.0, 0.1)
RELAY_PORT_BASE = 2222


def load() -> str:
    """The machine's load averages (``uptime``), printed with every figure."""
    return "load %.1f %.1f %.1f" % os.getloadavg()


class Bench:
    def __init__(
        self, net: HostNetwork, steps: int, base: pathlib.Path, workers: int = 2, ps: int = 2
    ):
        self.net, self.steps, self.base = net, steps, base
        self.workers, self.ps = workers, ps
        self.storage = HostCluster(net, workers, ps, base / "logs")
        self.runs = 0

    def _relay(self, delay_ms: float) -> dict[str, str]:
        """Starts the relay on host ``relay``; the TF_CONFIG address of every task."""
        plain = HostCluster(self.net, self.workers, self.ps, self.base / "logs")
        relay_ip = self.net.hosts["relay"].address
        routes, addresses = [], {}
        for job in ("chief", "worker", "ps"):
            for index, address in enumerate(plain.spec[job]):
                port = address.rsplit(":", 1)[1]
                routes += ["--route", f"{port}={address}"]
                addresses[f"{job}{index}" if job != "chief" else "chief"] = f"{relay_ip}:{port}"
        self.net.run(
            "relay",
            [
                sys.executable,
                "-m",
                "tests.support.delay_relay",
                "--listen",
                relay_ip,
                "--delay-ms",
                str(delay_ms),
                *routes,
            ],
            log=self.base / "logs" / "relay.log",
            cwd=str(ROOT),
            env={"PYTHONPATH": str(ROOT)},
        )
        self.net.wait_for_port("relay", int(routes[1].split("=")[0]))
        return addresses

    def case(
        self,
        delay_ms: float | None = None,
        gbit: float | None = None,
        loopback: bool = False,
        sets: tuple[str, ...] = (),
    ) -> dict:
        self.runs += 1
        model_dir = f"s3://{BUCKET}/bench/{self.runs}"
        args = [
            "train",
            "--config",
            DEMO_CONFIG,
            "--data",
            self.data_url,
            "--model-dir",
            model_dir,
            "--no-eval",
            "--set",
            f"train.max_steps={self.steps}",
            "--set",
            "train.log_every_seconds=0.5",
            "--set",
            "train.checkpoint_every_seconds=null",
            *sets,
        ]
        try:
            return self._case(model_dir, args, delay_ms, gbit, loopback)
        finally:
            self.drop(model_dir)

    def drop(self, model_dir: str) -> None:
        """Deletes a run's model dir from the storage host: moto keeps every object in
        memory, and each run's final checkpoint of the demo model is about 800 MB."""
        keys = self.storage.keys(model_dir)
        s3 = self.storage.s3()
        for i in range(0, len(keys), 1000):
            s3.delete_objects(
                Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]]}
            )

    def _case(self, model_dir, args, delay_ms, gbit, loopback) -> dict:
        if loopback:
            env = {
                **os.environ,
                "AWS_ENDPOINT_URL": self.storage.s3_url,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_REGION": "us-east-1",
            }
            local = ["--set", "cluster.mode=local", "--set", f"cluster.workers={self.workers}"]
            return self._measure([CLI, *args, *local], env, None)
        addresses = self._relay(delay_ms) if delay_ms is not None else None
        cluster = HostCluster(self.net, self.workers, self.ps, self.base / "logs", addresses)
        for i in range(self.ps):
            self.net.limit(f"ps{i}", gbit)
        cluster.start_servers()
        try:
            command = self.net.command("chief", [CLI, *args, "--set", "cluster.mode=tf_config"])
            return self._measure(command, cluster.chief_env(), cluster)
        finally:
            cluster.stop_servers()
            self.net.kill_host("relay")
            self.net.kill_host("chief")
            for i in range(self.ps):
                self.net.limit(f"ps{i}", None)

    def _measure(self, command: list[str], env: dict, cluster: HostCluster | None) -> dict:
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        points, lines, pids = [], [], {}
        roles = {"worker": [f"worker{i}" for i in range(self.workers)]}
        roles["ps"] = [f"ps{i}" for i in range(self.ps)]
        roles["chief"] = ["chief"]
        for line in process.stdout:
            lines.append(line)
            found = re.match(r"step ([\d,]+) \|", line)
            if found:
                counters = (
                    [self.net.link_bytes(f"ps{i}") for i in range(self.ps)] if cluster else []
                )
                if cluster and not pids:
                    pids = {
                        r: [p for h in hosts for p in self.net.pids(h)]
                        for r, hosts in roles.items()
                    }
                cpu = {r: sum(_cpu_seconds(p) for p in ps) for r, ps in pids.items()}
                points.append(
                    (time.perf_counter(), int(found.group(1).replace(",", "")), counters, cpu)
                )
        if process.wait() != 0:
            sys.exit("train failed:\n" + "".join(lines[-40:]))
        batch = next(
            (
                int(m.group(1))
                for m in (re.search(r"input.batch_size=(\d+)", " ".join(command)),)
                if m
            ),
            512,
        )
        steady = [p for p in points if p[1] >= self.steps // 4]
        if len(steady) < 2:
            steady = points[-2:]
        (t0, s0, c0, u0), (t1, s1, c1, u1) = steady[0], steady[-1]
        steps = max(1, s1 - s0)
        # (sent, received) per step of each server
        ways = [((b[0] - a[0]) / steps, (b[1] - a[1]) / steps) for a, b in zip(c0, c1)]
        per_server = [sent + received for sent, received in ways]
        return {
            "examples_per_second": steps * batch / (t1 - t0),
            "bytes_per_step_per_server": statistics.mean(per_server) if per_server else None,
            "bytes_per_step_busiest_server": max(per_server) if per_server else None,
            "bytes_per_step_sent_received": ways,
            # CPU seconds per step of every process of each role (all its hosts)
            "cpu_per_step": {r: (u1[r] - u0[r]) / steps for r in u1},
            "steps": steps,
            "load": load(),
        }

    def dispatch(self, workers: int) -> dict:
        """Closures a second handed out to ``workers`` worker hosts, batch 8, 1 step each."""
        cluster = HostCluster(self.net, workers, 1, self.base / "logs")
        cluster.start_servers(timeout=600)  # 17 processes import TensorFlow on 2 cores
        steps = 3000
        model_dir = f"s3://{BUCKET}/dispatch/{workers}-{time.time_ns()}"
        args = [
            "train",
            "--config",
            DEMO_CONFIG,
            "--data",
            self.data_url,
            "--model-dir",
            model_dir,
            "--no-eval",
            "--set",
            f"train.max_steps={steps}",
            "--set",
            "train.log_every_seconds=0.5",
            "--set",
            "train.checkpoint_every_seconds=null",
            "--set",
            "input.batch_size=8",
            "--set",
            "train.steps_per_call=1",
            "--set",
            "cluster.mode=tf_config",
        ]
        try:
            process = subprocess.Popen(
                self.net.command("chief", [CLI, *args]),
                env=cluster.chief_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            points = []
            chief = None
            for line in process.stdout:
                found = re.match(r"step ([\d,]+) \|", line)
                if found:
                    if chief is None:
                        chief = next(
                            (
                                p
                                for p in self.net.pids("chief")
                                if b"train" in pathlib.Path(f"/proc/{p}/cmdline").read_bytes()
                            ),
                            None,
                        )
                    points.append(
                        (
                            time.perf_counter(),
                            int(found.group(1).replace(",", "")),
                            _cpu_seconds(chief),
                        )
                    )
            process.wait()
        finally:
            cluster.stop_servers()
            self.net.kill_host("chief")
            self.drop(model_dir)
        steady = [p for p in points if p[1] >= steps // 4]
        (t0, s0, c0), (t1, s1, c1) = steady[0], steady[-1]
        return {
            "closures_per_second": (s1 - s0) / (t1 - t0),
            "chief_cpu_per_closure_ms": 1e3 * (c1 - c0) / max(1, s1 - s0),
            "load": load(),
        }


def _cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def planner_figures(data: pathlib.Path, workers: int, ps: int) -> dict:
    """What the capacity planner (``recsys_dist/cluster/capacity.py``, its measured rates)
    predicts for this bench's cluster, with distinct rows per batch measured on the
    bench's own data: CPU seconds per step of all workers, of all servers and of the
    chief; the busiest server's bytes per step (sent plus received); its NIC ceiling per
    Gbit/s."""
    from recsys_dist.cluster import capacity
    from recsys_dist.config import load_config
    from recsys_dist.data.batch_rows import distinct_rows_per_batch
    from recsys_dist.data.input_fn import prepare_input
    from recsys_dist.models.footprint import model_footprint

    config = load_config(DEMO_CONFIG).with_data_path(str(data))
    distinct, _ = distinct_rows_per_batch(prepare_input(config, None, 1), config.features, 20)
    loads = capacity.server_loads(model_footprint(config), config, ps, distinct)
    rates, batch = capacity.MEASURED_RATES, config.input.batch_size
    nic_per_gbit = capacity.ceilings(
        loads, config, workers, rates, capacity.Machines(1e9 / 8)
    ).by_resource["server NIC"]
    return {
        "cpu_per_step": {
            "worker": batch / rates.worker_examples_per_core,
            "ps": sum(capacity.server_seconds_per_step(load, rates) for load in loads),
        },
        "batch": batch,
        "steps_per_call": config.train.steps_per_call,
        "bytes_per_step_busiest_server": max(load.bytes_out + load.bytes_in for load in loads),
        "nic_examples_per_second_per_gbit": nic_per_gbit,
    }


def check_planner(predicted: dict, results: dict) -> list[str]:
    """The planner's figures against the four-host runs (``hosts`` and the capped cases)."""
    from recsys_dist.cluster import capacity

    out = []
    hosts = results.get("hosts", [])
    if hosts:
        # the chief's CPU per step depends on the steps a second: the hosts' own rate
        steps_per_second = (
            statistics.median(r["examples_per_second"] for r in hosts) / predicted["batch"]
        )
        chief = capacity.chief_seconds_per_step(
            capacity.MEASURED_RATES, predicted["steps_per_call"], steps_per_second
        )
        for role, value in {**predicted["cpu_per_step"], "chief": chief}.items():
            measured = statistics.median(r["cpu_per_step"][role] for r in hosts)
            out.append(
                f"planner {role + ' CPU/step':>16}: predicted {value * 1e3:7.2f} ms, measured "
                f"{measured * 1e3:7.2f} ms (hosts, median), predicted/measured "
                f"{value / measured:.2f}"
            )
        measured = statistics.median(r["bytes_per_step_busiest_server"] for r in hosts)
        value = predicted["bytes_per_step_busiest_server"]
        out.append(
            f"planner {'busiest ps bytes':>16}: predicted {value / 1e6:7.3f} MB, measured "
            f"{measured / 1e6:7.3f} MB per step (its link, both ways), predicted/measured "
            f"{value / measured:.2f}"
        )
    free = statistics.median(r["examples_per_second"] for r in hosts) if hosts else None
    for name, runs in results.items():
        if not name.endswith(" gbit"):
            continue
        gbit = float(name.split()[0])
        ceiling = gbit * predicted["nic_examples_per_second_per_gbit"]
        measured = statistics.median(r["examples_per_second"] for r in runs)
        binds = free is not None and ceiling < free
        out.append(
            f"planner {'NIC ' + name:>16}: ceiling {ceiling:9,.0f} ex/s, measured "
            f"{measured:9,.0f} ex/s"
            + (
                f" (NIC binds: predicted/measured {ceiling / measured:.2f})"
                if binds
                else f" (NIC does not bind here: {free:,.0f} ex/s uncapped)"
            )
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=600, help="steps per run")
    parser.add_argument("--rows", type=int, default=150_000, help="rows per day, 2 days")
    parser.add_argument("--settings", action="store_true", help="one round of settings at 1 ms")
    parser.add_argument("--dispatch", default="", help="worker counts, e.g. 8,16")
    parser.add_argument(
        "--cases", default="", help="only these cases, e.g. 'hosts,+0 ms,+1 ms' (default: all)"
    )
    parser.add_argument(
        "--planner", action="store_true", help="check the capacity planner against the runs"
    )
    parser.add_argument("--workers", type=int, default=2, help="worker hosts of the training cases")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit(f"network_bench needs network namespaces: {reason}")
    with tempfile.TemporaryDirectory(prefix="network_bench_", ignore_cleanup_errors=True) as base:
        return run(args, pathlib.Path(base))


def run(args: argparse.Namespace, base: pathlib.Path) -> int:
    """The cases ``args`` asks for, with their data, hosts and runs under ``base``."""
    from recsys_dist.data.synth_files import synthesize

    dispatch = [int(n) for n in args.dispatch.split(",") if n]
    names = host_names(max([2, args.workers, *dispatch]), 2) + ["relay"]
    figures: dict = {}
    with HostNetwork(names, base / "hosts") as net:
        bench = Bench(net, args.steps, base)
        bench.workers = args.workers
        bench.storage.start_storage()
        synthesize(base / "data", days=3, rows_per_day=args.rows, seed=7)
        bench.data_url = bench.storage.upload(base / "data", "data")
        cases = {"loopback": lambda: bench.case(loopback=True), "hosts": lambda: bench.case()}
        for delay in DELAYS:
            cases[f"+{delay:g} ms"] = lambda d=delay: bench.case(delay_ms=d)
        asked = [name for name in args.cases.split(",") if name]
        limits = {*LIMITS, *(float(n.split()[0]) for n in asked if re.fullmatch(r"[\d.]+ gbit", n))}
        for gbit in sorted(limits, reverse=True):
            cases[f"{gbit:g} gbit"] = lambda g=gbit: bench.case(gbit=g)
        if args.cases:
            cases = {name: run for name, run in cases.items() if name in args.cases.split(",")}

        def show(round_: int, done: dict) -> None:
            name, r = list(done.items())[-1]
            per = r["bytes_per_step_per_server"]
            print(
                f"round {round_} {name:>10}: {r['examples_per_second']:9,.0f} ex/s  "
                f"{'-' if per is None else f'{per / 1e6:.2f} MB'} per step per server  "
                f"({r['load']})",
                flush=True,
            )

        results = interleaved(cases, args.rounds, alternate=True, show=show)
        figures["cases"] = results
        print(f"\n{'case':>10} {'median ex/s':>12} {'best ex/s':>10} {'MB/step/server':>15}")
        for name, runs in results.items():
            rates = [r["examples_per_second"] for r in runs]
            per = [
                r["bytes_per_step_per_server"]
                for r in runs
                if r["bytes_per_step_per_server"] is not None
            ]
            print(
                f"{name:>10} {statistics.median(rates):12,.0f} {max(rates):10,.0f} "
                f"{statistics.median(per) / 1e6 if per else float('nan'):15.2f}"
            )
        if args.planner:
            predicted = planner_figures(base / "data", bench.workers, bench.ps)
            figures["planner"] = predicted
            print()
            for line in check_planner(predicted, results):
                print(line, flush=True)
        if args.settings:
            settings = {
                "default": (),
                "steps_per_call=200": ("--set", "train.steps_per_call=200"),
                "batch_size=2048": ("--set", "input.batch_size=2048"),
                "dense_refresh_steps=10": ("--set", "train.dense_refresh_steps=10"),
            }
            figures["settings_at_1ms"] = {}
            for name, sets in settings.items():
                r = bench.case(delay_ms=1.0, sets=sets)
                figures["settings_at_1ms"][name] = r
                print(
                    f"settings at 1 ms {name:>24}: {r['examples_per_second']:9,.0f} ex/s "
                    f"({r['load']})",
                    flush=True,
                )
        for workers in dispatch:
            bench.workers = workers
            r = bench.dispatch(workers)
            figures.setdefault("dispatch", {})[workers] = r
            print(
                f"dispatch {workers:>2} worker hosts: {r['closures_per_second']:7.1f} "
                f"closures/s, chief CPU {r['chief_cpu_per_closure_ms']:.2f} ms per closure "
                f"({r['load']})",
                flush=True,
            )
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(figures, indent=1))
    if "+1 ms" in results and "+0 ms" in results:
        one = statistics.median(r["examples_per_second"] for r in results["+1 ms"])
        zero = statistics.median(r["examples_per_second"] for r in results["+0 ms"])
        print(f"throughput at 1 ms vs 0 ms: {one / zero:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
