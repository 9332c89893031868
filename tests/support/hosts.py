"""Several hosts on one machine: Linux network namespaces on a bridge, for the tests and
benchmarks that run a cluster across machines.

Each host is a network namespace with one veth link to a bridge and its own address in a
private /24 (``10.211.N.0/24``) that is routed nowhere else: the bridge carries it between
the namespaces and this process, which gets ``.1`` to reach them (to upload data, to read
the S3 host). A host's processes run under ``ip netns exec`` with a ``/tmp`` of their own
(a bind mount of the host's directory), so hosts share no temporary files: a staging
path one host writes is not there for another.

Everything a :class:`HostNetwork` creates carries a prefix with the pid of the process
that owns it (``rdh<pid>``). Closing the network kills every process in its namespaces
(``ip netns pids``), then deletes the namespaces, the links and the bridge; a network
whose owner died without closing it (a SIGKILLed test run) is removed by
:func:`remove_stale`, which every new network calls first. :func:`leftovers` lists what
is left of a prefix.

Faults: :meth:`HostNetwork.cut` takes a host's link down (as a pulled cable or a dead
switch port: packets are dropped, connections are not reset), :meth:`HostNetwork.restore`
brings it back, :meth:`HostNetwork.limit` caps its bandwidth both ways with ``tc ... tbf``,
:meth:`HostNetwork.kill_host` SIGKILLs every process in it. The kernel here has no
``netem``, so added latency comes from a userspace relay (``tests/support/delay_relay.py``).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from tests.support.paths import REPO

PREFIX = "rdh"
_OWNED = re.compile(rf"^{PREFIX}(\d+)")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here (a one-line reason), or None when they can."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "needs the ip and tc commands (Debian package iproute2)"
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    probe = f"{PREFIX}{os.getpid()}probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()[:120]}"
    _ip("netns", "del", probe, check=False)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _namespaces() -> list[str]:
    return [
        line.split()[0]
        for line in _ip("netns", "list", check=False).stdout.splitlines()
        if line.strip()
    ]


def _links() -> list[str]:
    names = re.findall(
        r"^\d+: ([^:@\s]+)", _ip("-o", "link", "show", check=False).stdout, re.MULTILINE
    )
    return names


def _kill_namespace(namespace: str) -> None:
    """SIGKILLs every process of a namespace and waits until they are gone."""
    for _ in range(50):
        pids = [int(p) for p in _ip("netns", "pids", namespace, check=False).stdout.split()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def _owned_by(name: str, prefix: str) -> bool:
    """Whether ``name`` is one of ``prefix``'s (``rdh12`` owns ``rdh12-ps0``, not ``rdh123b``)."""
    return name.startswith(prefix) and not name[len(prefix) :][:1].isdigit()


def remove(prefix: str) -> None:
    """Removes every namespace (its processes first) and link owned by ``prefix``."""
    for namespace in _namespaces():
        if _owned_by(namespace, prefix):
            _kill_namespace(namespace)
            _ip("netns", "del", namespace, check=False)
    for link in _links():
        if _owned_by(link, prefix):
            _ip("link", "del", link, check=False)


def remove_stale() -> list[str]:
    """Removes the networks of owners that are no longer running; their prefixes."""
    owners = {int(m.group(1)) for name in _namespaces() + _links() if (m := _OWNED.match(name))}
    stale = [f"{PREFIX}{pid}" for pid in sorted(owners) if not _alive(pid)]
    for prefix in stale:
        remove(prefix)
    return stale


def leftovers(prefix: str) -> list[str]:
    """Namespaces, links and namespaced processes still named with ``prefix``."""
    left = [n for n in _namespaces() + _links() if _owned_by(n, prefix)]
    for namespace in _namespaces():
        if _owned_by(namespace, prefix):
            left += [
                f"pid {p}" for p in _ip("netns", "pids", namespace, check=False).stdout.split()
            ]
    return left


def _free_subnet() -> int:
    used = set(re.findall(r"inet 10\.211\.(\d+)\.", _ip("-4", "addr", check=False).stdout))
    return next(n for n in range(1, 255) if str(n) not in used)


@dataclasses.dataclass(frozen=True)
class Host:
    """One host: its namespace, address, link (bridge side) and private directory."""

    name: str
    namespace: str
    address: str
    link: str
    directory: pathlib.Path


class HostNetwork:
    """Hosts on a private bridge; a context manager that removes them all on exit.

    Args:
      names: The hosts, e.g. ``["chief", "worker0", "worker1", "ps0", "ps1", "storage"]``.
      directory: Where each host's private ``/tmp`` lives (``directory/<name>``).

    Example:
      >>> with HostNetwork(["a", "b"], tmp_path) as net:
      ...     net.run("a", ["ping", "-c1", net.hosts["b"].address]).wait()
    """

    def __init__(self, names: Sequence[str], directory: pathlib.Path):
        self.prefix = f"{PREFIX}{os.getpid()}"
        self.names = list(names)
        self.directory = pathlib.Path(directory)
        self.hosts: dict[str, Host] = {}
        self.processes: list[subprocess.Popen] = []
        self.bridge = f"{self.prefix}b"

    def __enter__(self) -> HostNetwork:
        remove_stale()
        remove(self.prefix)  # a network this process left open (a test that failed)
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def controller_address(self) -> str:
        """This process's address on the bridge."""
        return f"10.211.{self._subnet}.1"

    def _create(self) -> None:
        self._subnet = _free_subnet()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.controller_address}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, name in enumerate(self.names):
            namespace, link, inner = (
                f"{self.prefix}-{name}",
                f"{self.prefix}h{i}",
                f"{self.prefix}n{i}",
            )
            address = f"10.211.{self._subnet}.{10 + i}"
            _ip("netns", "add", namespace)
            _ip("link", "add", link, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", namespace)
            _ip("-n", namespace, "link", "set", inner, "name", "eth0")
            _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            _ip("link", "set", link, "master", self.bridge)
            _ip("link", "set", link, "up")
            directory = self.directory / name
            directory.mkdir(parents=True, exist_ok=True)
            self.hosts[name] = Host(name, namespace, address, link, directory)

    def close(self) -> None:
        """Kills every process of the hosts, removes namespaces, links and the bridge."""
        for process in self.processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        remove(self.prefix)
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    # ---- processes --------------------------------------------------------------------
    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` as run on ``host``: in its namespace, with its own ``/tmp``. The
        installed code stays visible: a checkout or environment under ``/tmp`` (a fresh
        clone there) is bound into the host's ``/tmp`` at the same path first, as every
        machine of a real cluster has the package installed."""
        h = self.hosts[host]
        keep = sorted(
            {str(p) for p in (REPO, pathlib.Path(sys.prefix).resolve()) if p.is_relative_to("/tmp")}
        )
        inside = [f'"$0{path[len("/tmp") :]}"' for path in keep]
        binds = "".join(
            f'mkdir -p {there} && mount --bind "{path}" {there} && '
            for path, there in zip(keep, inside)
        )
        script = binds + 'mount --rbind "$0" /tmp && exec "$@"'
        return ["ip", "netns", "exec", h.namespace, "sh", "-c", script, str(h.directory), *argv]

    def run(
        self,
        host: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        log: pathlib.Path | None = None,
        **popen,
    ) -> subprocess.Popen:
        """Starts ``argv`` on ``host`` (``TMPDIR=/tmp``, its own); output to ``log``."""
        environment = {**os.environ, **(env or {}), "TMPDIR": "/tmp"}
        if log is not None:
            handle = open(log, "ab")
            popen.setdefault("stdout", handle)
            popen.setdefault("stderr", subprocess.STDOUT)
        process = subprocess.Popen(
            self.command(host, argv), env=environment, start_new_session=True, **popen
        )
        self.processes.append(process)
        return process

    def pids(self, host: str) -> list[int]:
        """Every process running on ``host``."""
        return [
            int(p)
            for p in _ip("netns", "pids", self.hosts[host].namespace, check=False).stdout.split()
        ]

    def kill_host(self, host: str) -> None:
        """SIGKILLs every process of ``host`` (the machine dies; its link stays up)."""
        _kill_namespace(self.hosts[host].namespace)

    def wait_for_port(self, host: str, port: int, timeout: float = 60) -> None:
        """Waits until something on ``host`` accepts connections on ``port``."""
        import socket

        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with socket.create_connection((self.hosts[host].address, port), timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"nothing listens on {host} ({self.hosts[host].address}:{port})")

    # ---- faults -----------------------------------------------------------------------
    def cut(self, host: str) -> None:
        """Takes ``host``'s link down: its packets are dropped, both ways."""
        _ip("link", "set", self.hosts[host].link, "down")

    def restore(self, host: str) -> None:
        """Brings ``host``'s link back."""
        _ip("link", "set", self.hosts[host].link, "up")

    def limit(self, host: str, gbit: float | None) -> None:
        """Caps ``host``'s link at ``gbit`` Gbit/s each way (``tc ... tbf``); None lifts it."""
        h = self.hosts[host]
        for args in (["dev", h.link], ["-n", h.namespace, "dev", "eth0"]):
            netns, dev = (args[:2], args[2:]) if args[0] == "-n" else ([], args)
            subprocess.run(["tc", *netns, "qdisc", "del", *dev, "root"], capture_output=True)
            if gbit is not None:
                rate = f"{int(gbit * 1000)}mbit"
                burst = max(64 * 1024, int(gbit * 1e9 / 8 / 250))  # about 4 ms of traffic
                subprocess.run(
                    [
                        "tc",
                        *netns,
                        "qdisc",
                        "add",
                        *dev,
                        "root",
                        "tbf",
                        "rate",
                        rate,
                        "burst",
                        str(burst),
                        "latency",
                        "50ms",
                    ],
                    check=True,
                    capture_output=True,
                )

    def link_bytes(self, host: str) -> tuple[int, int]:
        """Bytes ``(sent by host, received by host)`` on its link so far."""
        stats = pathlib.Path(f"/sys/class/net/{self.hosts[host].link}/statistics")
        # the bridge side's rx is what the host sent, its tx what the host received
        return int((stats / "rx_bytes").read_text()), int((stats / "tx_bytes").read_text())
