"""Slow storage: training examples/s when every S3 request takes 50 ms longer.

The demo model (``configs/demo.yaml``: DCN-v2, 2 workers + 2 ps in the command's process)
trains on synthetic days stored in a moto S3 server this script starts on 127.0.0.1,
reached through the tests' fault-injecting proxy (``tests/support/s3_faults.py``). Each
round runs ``recsys-dist train`` once per side, in alternating order:

- ``no delay``: the proxy passes every request straight through (the baseline);
- ``50 ms, P/Q``: the proxy answers every request ``--delay`` seconds late, with
  ``input.read_parallelism=P`` and ``input.prefetch_batches=Q`` on each worker.

Every round is printed (examples/s after warm-up, from the command's ``trained`` line),
then each side's best and median and their ratio to the baseline. The last line is
``ratio X``: the median ratio of the default settings (2/4) under delay.

The data's row groups are small on purpose (5,000 rows by default): each is a work unit,
read with a few requests (object size, footer, column ranges), so small units put the most
requests per example on the delay.

Usage: ``python benchmarks/slow_storage_bench.py [--rows-per-day 200000] [--rows-per-file
50000] [--row-groups-per-file 10] [--rounds 3] [--delay 0.05] [--settings 2/4,8/8]``
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

from common import CLI, DEMO_CONFIG, ROOT, best_median, interleaved  # noqa: E402  this folder

sys.path.insert(0, str(ROOT))
from tests.support.s3_faults import Fault, FaultProxy  # noqa: E402

BUCKET = "slow-storage"


def start_moto() -> tuple[object, str]:
    import socket

    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server, f"http://127.0.0.1:{port}"


def upload(url: str, local: str) -> str:
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )
    client.create_bucket(Bucket=BUCKET)
    for directory, _, names in os.walk(local):
        for name in names:
            path = os.path.join(directory, name)
            client.upload_file(path, BUCKET, "days/" + os.path.relpath(path, local))
    return f"s3://{BUCKET}/days"


def train(data: str, env: dict[str, str], *sets: str) -> float:
    """Examples/s after warm-up of one ``recsys-dist train`` (no evaluation, local dir)."""
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            CLI,
            "train",
            "--config",
            DEMO_CONFIG,
            "--data",
            data,
            "--no-eval",
            "--model-dir",
            os.path.join(tmp, "run"),
        ]
        for value in sets:
            args += ["--set", value]
        done = subprocess.run(args, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"train failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    match = re.search(r"([\d,]+) ex/s after warm-up", done.stdout)
    return float(match.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows-per-day", type=int, default=200_000)
    parser.add_argument("--rows-per-file", type=int, default=50_000)
    parser.add_argument(
        "--row-groups-per-file",
        type=int,
        default=10,
        help="a work unit is a row group: small ones mean many requests",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds per request")
    parser.add_argument(
        "--settings", default="2/4,8/8", help="read_parallelism/prefetch_batches pairs under delay"
    )
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f} (1-minute average)")
    server, url = start_moto()
    proxy = FaultProxy(url)
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": proxy.url,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_REGION": "us-east-1",
    }
    try:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [
                    CLI,
                    "data",
                    "synth",
                    "--out",
                    tmp,
                    "--days",
                    "2",
                    "--rows-per-day",
                    str(args.rows_per_day),
                    "--rows-per-file",
                    str(args.rows_per_file),
                    "--row-groups-per-file",
                    str(args.row_groups_per_file),
                    "--quiet",
                ],
                check=True,
            )
            data = upload(url, tmp)
        delayed = [Fault("delay", seconds=args.delay)]

        def side(faults: list[Fault], parallelism: int | None = None, prefetch: int | None = None):
            sets = (
                []
                if parallelism is None
                else [f"input.read_parallelism={parallelism}", f"input.prefetch_batches={prefetch}"]
            )

            def run() -> float:
                proxy.faults = faults
                proxy.log.clear()
                rate = train(data, env, *sets)
                requests = len(proxy.log)
                print(f"    {requests} requests", flush=True)
                return rate

            return run

        sides = {"no delay": side([])}
        for setting in args.settings.split(","):
            parallelism, prefetch = (int(v) for v in setting.split("/"))
            sides[f"{args.delay * 1000:.0f} ms, {parallelism}/{prefetch}"] = side(
                delayed, parallelism, prefetch
            )

        def show(round_: int, done: dict[str, float]) -> None:
            name = list(done)[-1]
            print(f"  round {round_}: {name}: {done[name]:,.0f} ex/s", flush=True)

        rates = interleaved(sides, args.rounds, alternate=True, show=show)
    finally:
        proxy.stop()
        server.stop()
    base_best, base_median = best_median(rates["no delay"])
    print(f"load after: {os.getloadavg()[0]:.2f}")
    for name, values in rates.items():
        best, median = best_median(values)
        print(
            f"{name:>16}: best {best:,.0f}, median {median:,.0f} ex/s; vs no delay: best "
            f"{best / base_best:.2f}, median {median / base_median:.2f}"
        )
    default = (
        next(n for n in rates if n.endswith(" 2/4"))
        if any(n.endswith(" 2/4") for n in rates)
        else list(rates)[1]
    )
    print(f"ratio {best_median(rates[default])[1] / base_median:.2f}")


if __name__ == "__main__":
    main()
