"""A ``tf_config`` training cluster on the hosts of a :class:`~tests.support.hosts.HostNetwork`,
set up the way ``docs/training.md`` ("Several machines") tells users to: one ``recsys-dist
server`` per worker and parameter-server host with a ``TF_CONFIG`` naming the hosts'
addresses, the chief on a host of its own, and the data and model dir on the storage
host's S3 (moto's server). Hosts share no file system: each has its own ``/tmp``.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
from collections.abc import Sequence

from tests.support.data import upload_dir
from tests.support.hosts import HostNetwork
from tests.support.paths import BIN

PORT = 2222
S3_PORT = 5000
BUCKET = "recsys-hosts"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_REGION": "us-east-1"}


def host_names(workers: int, ps: int) -> list[str]:
    return (["chief", "storage"] + [f"worker{i}" for i in range(workers)]
            + [f"ps{i}" for i in range(ps)])


class HostCluster:
    """Servers, the S3 host and the chief's environment on a :class:`HostNetwork`.

    Args:
      net: The network; it must have hosts ``chief``, ``storage``, ``worker<i>``, ``ps<i>``.
      workers, ps: Tasks of each job (one per host).
      addresses: Overrides of a task's address in ``TF_CONFIG`` (``{"ps0": "ip:port"}``),
        e.g. a delay relay's; the task still listens on the port on its own host.
      logs: Where each host's output goes (``<host>.log``).
    """

    def __init__(self, net: HostNetwork, workers: int, ps: int, logs: pathlib.Path,
                 addresses: dict[str, str] | None = None):
        self.net, self.workers, self.ps, self.logs = net, workers, ps, logs
        logs.mkdir(parents=True, exist_ok=True)
        overrides = addresses or {}

        def address(host: str, port: int) -> str:
            return overrides.get(host, f"{net.hosts[host].address}:{port}")

        self.spec = {"chief": [address("chief", PORT)],
                     "worker": [address(f"worker{i}", PORT + 1 + i) for i in range(workers)],
                     "ps": [address(f"ps{i}", PORT + 1 + workers + i) for i in range(ps)]}
        self.servers: dict[str, subprocess.Popen] = {}
        self.s3_url = f"http://{net.hosts['storage'].address}:{S3_PORT}"

    def env(self, job: str, index: int) -> dict[str, str]:
        """The environment of a task: its ``TF_CONFIG`` and the S3 variables."""
        return {"TF_CONFIG": json.dumps({"cluster": self.spec,
                                         "task": {"type": job, "index": index}}),
                "AWS_ENDPOINT_URL": self.s3_url, **CREDENTIALS}

    def start_storage(self) -> None:
        """moto's S3 server on the storage host, with bucket :data:`BUCKET`."""
        self.net.run("storage", [str(BIN / "moto_server"), "-H",
                                 self.net.hosts["storage"].address, "-p", str(S3_PORT)],
                     log=self.logs / "storage.log")
        self.net.wait_for_port("storage", S3_PORT)
        self.s3().create_bucket(Bucket=BUCKET)

    def s3(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.s3_url, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def upload(self, local: pathlib.Path, prefix: str) -> str:
        """Uploads a directory to the storage host; its ``s3://`` URL."""
        return upload_dir(self.s3(), BUCKET, local, prefix)

    def start_server(self, job: str, index: int) -> subprocess.Popen:
        """``recsys-dist server`` on host ``<job><index>``, from its ``TF_CONFIG``."""
        host = f"{job}{index}"
        process = self.net.run(host, [str(BIN / "recsys-dist"), "server",
                                      "--intra-op-threads", "1"],
                               env=self.env(job, index), log=self.logs / f"{host}.log")
        self.servers[host] = process
        return process

    def start_servers(self) -> None:
        for index in range(self.workers):
            self.start_server("worker", index)
        for index in range(self.ps):
            self.start_server("ps", index)
        for host in self.servers:
            port = int(self.spec[host.rstrip("0123456789")][int(host[-1])].rsplit(":", 1)[1])
            self.net.wait_for_port(host, port)

    def stop_servers(self) -> None:
        for host in list(self.servers):
            self.net.kill_host(host)
            self.servers.pop(host).wait(timeout=30)

    def chief(self, argv: Sequence[str], extra_env: dict[str, str] | None = None
              ) -> list[str]:
        """``recsys-dist ARGV`` as run on the chief host (a command line)."""
        return self.net.command("chief", [str(BIN / "recsys-dist"), *argv])

    def chief_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        import os

        return {**os.environ, **self.env("chief", 0), "TMPDIR": "/tmp", **(extra or {})}


def cluster_config(directory: pathlib.Path, data_url: str, changes: dict | None = None) -> str:
    """The fault-tolerance tests' small run as a ``tf_config`` config, data on S3; the
    config file sits in the chief's own ``/tmp`` (``directory``), where the chief reads it
    as ``/tmp/ft.yaml``."""
    from tests.support.run_configs import small_run_config

    small_run_config(directory, directory, "tf_config",
                     changes={"data.path": data_url, **(changes or {})})
    return "/tmp/ft.yaml"
