"""A ``tf_config`` training cluster on the hosts of a :class:`~tests.support.hosts.HostNetwork`,
set up the way ``docs/training.md`` ("Several machines") tells users to: one ``recsys-dist
server`` per worker and parameter-server host with a ``TF_CONFIG`` naming the hosts'
addresses, the chief on a host of its own, and the data and model dir on the storage
host's S3 (moto's server). Hosts share no file system: each has its own ``/tmp``.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

from tests.support.data import upload_dir
from tests.support.hosts import HostNetwork
from tests.support.paths import BIN
from tests.support.train_run import TrainRun

PORT = 2222
S3_PORT = 5000
BUCKET = "recsys-hosts"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
}


def host_names(workers: int, ps: int) -> list[str]:
    return (
        ["chief", "storage"]
        + [f"worker{i}" for i in range(workers)]
        + [f"ps{i}" for i in range(ps)]
    )


class HostCluster:
    """Servers, the S3 host and the chief's environment on a :class:`HostNetwork`.

    Args:
      net: The network; it must have hosts ``chief``, ``storage``, ``worker<i>``, ``ps<i>``.
      workers, ps: Tasks of each job (one per host).
      addresses: Overrides of a task's address in ``TF_CONFIG`` (``{"ps0": "ip:port"}``),
        e.g. a delay relay's; the task still listens on the port on its own host.
      logs: Where each host's output goes (``<host>.log``).
    """

    def __init__(
        self,
        net: HostNetwork,
        workers: int,
        ps: int,
        logs: pathlib.Path,
        addresses: dict[str, str] | None = None,
    ):
        self.net, self.workers, self.ps, self.logs = net, workers, ps, logs
        logs.mkdir(parents=True, exist_ok=True)
        overrides = addresses or {}

        def address(host: str, port: int) -> str:
            return overrides.get(host, f"{net.hosts[host].address}:{port}")

        self.spec = {
            "chief": [address("chief", PORT)],
            "worker": [address(f"worker{i}", PORT + 1 + i) for i in range(workers)],
            "ps": [address(f"ps{i}", PORT + 1 + workers + i) for i in range(ps)],
        }
        self.servers: dict[str, subprocess.Popen] = {}
        self.s3_url = f"http://{net.hosts['storage'].address}:{S3_PORT}"

    def env(self, job: str, index: int) -> dict[str, str]:
        """The environment of a task: its ``TF_CONFIG`` and the S3 variables."""
        return {
            "TF_CONFIG": json.dumps({"cluster": self.spec, "task": {"type": job, "index": index}}),
            "AWS_ENDPOINT_URL": self.s3_url,
            **CREDENTIALS,
        }

    def start_storage(self) -> None:
        """moto's S3 server on the storage host, with bucket :data:`BUCKET`."""
        self.net.run(
            "storage",
            [str(BIN / "moto_server"), "-H", self.net.hosts["storage"].address, "-p", str(S3_PORT)],
            log=self.logs / "storage.log",
        )
        self.net.wait_for_port("storage", S3_PORT)
        self.s3().create_bucket(Bucket=BUCKET)

    def s3(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.s3_url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def upload(self, local: pathlib.Path, prefix: str) -> str:
        """Uploads a directory to the storage host; its ``s3://`` URL."""
        return upload_dir(self.s3(), BUCKET, local, prefix)

    def start_server(self, job: str, index: int) -> subprocess.Popen:
        """``recsys-dist server`` on host ``<job><index>``, from its ``TF_CONFIG``."""
        host = f"{job}{index}"
        process = self.net.run(
            host,
            [str(BIN / "recsys-dist"), "server", "--intra-op-threads", "1"],
            env=self.env(job, index),
            log=self.logs / f"{host}.log",
        )
        self.servers[host] = process
        return process

    def start_servers(self, timeout: float = 60) -> None:
        """Starts every worker and ps server; waits up to ``timeout`` s for each to listen."""
        for index in range(self.workers):
            self.start_server("worker", index)
        for index in range(self.ps):
            self.start_server("ps", index)
        for host in self.servers:
            job = host.rstrip("0123456789")
            port = int(self.spec[job][int(host[len(job) :])].rsplit(":", 1)[1])
            self.net.wait_for_port(host, port, timeout=timeout)

    def stop_servers(self) -> None:
        for host in list(self.servers):
            self.net.kill_host(host)
            self.servers.pop(host).wait(timeout=30)

    def chief_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, **self.env("chief", 0), "TMPDIR": "/tmp", **(extra or {})}

    def train(self, config: str, model_dir: str, *extra: str) -> TrainRun:
        """``recsys-dist train`` on the chief host, its output read as it runs."""
        return TrainRun(
            config, model_dir, *extra, env=self.chief_env(), prefix=self.net.command("chief", [])
        )

    def command(self, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """Another ``recsys-dist`` command on the chief host, run to the end."""
        return subprocess.run(
            self.net.command("chief", [str(BIN / "recsys-dist"), *argv]),
            env=self.chief_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def read_json(self, url: str) -> dict:
        """A JSON file on the storage host."""
        bucket, key = url.removeprefix("s3://").split("/", 1)
        return json.loads(self.s3().get_object(Bucket=bucket, Key=key)["Body"].read())

    def keys(self, url: str) -> list[str]:
        bucket, prefix = url.removeprefix("s3://").split("/", 1)
        pages = self.s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def final_state(self, model_dir: str) -> dict:
        """``state.json`` of the newest complete checkpoint of an ``s3://`` model dir."""
        complete = sorted(
            k for k in self.keys(f"{model_dir}/checkpoints/") if k.endswith("/_COMPLETE")
        )
        bucket = model_dir.removeprefix("s3://").split("/", 1)[0]
        return self.read_json(f"s3://{bucket}/{complete[-1].rsplit('/', 1)[0]}/state.json")


def cluster_config(directory: pathlib.Path, data_url: str, changes: dict | None = None) -> str:
    """The fault-tolerance tests' small run as a ``tf_config`` config, data on S3; the
    config file sits in the chief's own ``/tmp`` (``directory``), where the chief reads it
    as ``/tmp/ft.yaml``."""
    from tests.support.run_configs import small_run_config

    small_run_config(
        directory, directory, "tf_config", changes={"data.path": data_url, **(changes or {})}
    )
    return "/tmp/ft.yaml"
