"""Watching the tasks of a ``tf_config`` cluster from the coordinator, over the network.

A task whose machine dies, or whose link is cut, does not close its connections: its
packets are simply dropped. TensorFlow's gRPC channels carry no keepalive, so a call in
flight to such a task waits for the kernel to give up on the connection (about 15
minutes with Linux's defaults), and a parameter-server training run stalls or hangs
without a word. :class:`TaskWatch` probes every task's address from a thread of the
coordinator (a TCP connection, once a second) and acts on what it sees:

- a task unreachable for ``lost_after`` seconds is reported by job, index and address.
  For a *worker*, the coordinator's own connections to it are shut down, so the calls
  in flight to it fail at once; ``ClusterCoordinator`` then runs the worker's closures
  on the other workers and takes the worker back when it serves again (its own handling
  of a lost worker). For a *parameter server*, the run waits: its variables live there,
  and the calls to it go on when the link returns.
- a task that answers again is reported with how long it was away.
- a task unreachable for ``give_up_after`` seconds ends the run: one line naming the
  task and its address, exit code 4, as for a lost task. A rerun resumes from the last
  checkpoint. This also bounds a start on a cluster with a task that never comes up.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from recsys_dist import scratch
from recsys_dist.errors import ClusterLost

log = logging.getLogger(__name__)

PROBE_SECONDS = 1.0


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _reachable(address: str, timeout: float) -> bool:
    try:
        with socket.create_connection(_host_port(address), timeout=timeout):
            return True
    except OSError:
        return False


def _socket_inodes_to(address: str) -> set[str]:
    """Inodes of this process's TCP sockets connected to ``address`` (IPv4 and IPv6)."""
    host, port = _host_port(address)
    try:
        ips = {info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
    except OSError:
        return set()
    wanted = set()
    for ip in ips:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        packed = socket.inet_pton(family, ip)
        if family == socket.AF_INET:
            # /proc/net/tcp prints each 32-bit word in host (little-endian) order
            hexed = packed[::-1].hex().upper()
            wanted.add((f"{hexed}:{port:04X}", "tcp"))
            mapped = b"\0" * 10 + b"\xff\xff" + packed
            wanted.add((_ipv6_words(mapped) + f":{port:04X}", "tcp6"))
        else:
            wanted.add((_ipv6_words(packed) + f":{port:04X}", "tcp6"))
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = open(f"/proc/self/net/{table}").read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if (fields[2], table) in wanted:
                inodes.add(fields[9])
    return inodes


def _ipv6_words(packed: bytes) -> str:
    return "".join(packed[i : i + 4][::-1].hex().upper() for i in range(0, 16, 4))


def abort_connections_to(address: str) -> int:
    """Shuts down this process's TCP connections to ``address``; how many there were.

    A connection to a host that dropped off the network would otherwise wait for the
    kernel's retransmissions to give up; after ``shutdown`` the calls on it fail at once
    and gRPC connects again when the host answers.
    """
    inodes = _socket_inodes_to(address)
    if not inodes:
        return 0
    done = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            sock = socket.socket(fileno=int(fd))
            try:
                sock.shutdown(socket.SHUT_RDWR)
                done += 1
            except OSError:
                pass
            finally:
                sock.detach()  # the descriptor stays gRPC's
    return done


class TaskWatch:
    """Probes the tasks of a cluster from a background thread (see the module docstring).

    Args:
      spec: ``{job: [address, ...]}``; the ``worker`` and ``ps`` jobs are watched.
      lost_after: Seconds unreachable before a task is reported lost.
      give_up_after: Seconds unreachable before the run ends.
      report: Called with each one-line message (default: this module's logger).
      give_up: Called with the final message instead of ending the process (tests).
    """

    def __init__(
        self,
        spec: Mapping[str, Sequence[str]],
        lost_after: float,
        give_up_after: float,
        report: Callable[[str], None] | None = None,
        give_up: Callable[[str], None] | None = None,
    ):
        self._tasks = [
            (job, i, a) for job in ("worker", "ps") for i, a in enumerate(spec.get(job, []))
        ]
        self._lost_after, self._give_up_after = lost_after, give_up_after
        self._report = report or log.info
        self._give_up = give_up or _end_run
        self._stop = threading.Event()
        self._down_since: dict[tuple[str, int], float] = {}
        self._reported: set[tuple[str, int]] = set()
        self._thread = threading.Thread(target=self._loop, name="TaskWatch", daemon=True)

    def __enter__(self) -> TaskWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def lost(self) -> list[tuple[str, int]]:
        """The tasks reported lost and not back yet, as ``(job, index)``."""
        return sorted(self._reported)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            for job, index, address in self._tasks:
                if self._stop.is_set():
                    return
                self._check(job, index, address, _reachable(address, PROBE_SECONDS))
            self._stop.wait(max(0.0, PROBE_SECONDS - (time.monotonic() - started)))

    def _check(self, job: str, index: int, address: str, up: bool) -> None:
        key, now = (job, index), time.monotonic()
        if up:
            since = self._down_since.pop(key, None)
            if key in self._reported:
                self._reported.discard(key)
                self._report(
                    f"back\t{job} {index} ({address}) answers again after "
                    f"{now - since:.0f} s unreachable"
                    + ("; it takes work again" if job == "worker" else "; training goes on")
                )
            return
        since = self._down_since.setdefault(key, now)
        away = now - since
        if away >= self._give_up_after:
            self._give_up(
                f"{job} {index} ({address}) has been unreachable for {away:.0f} s "
                f"(cluster.give_up_after_seconds = {self._give_up_after:g}); "
                "the run stops. Bring the task back, then run the command again "
                "to resume from the last checkpoint"
            )
            self._stop.set()
        elif away >= self._lost_after and key not in self._reported:
            self._reported.add(key)
            if job == "worker":
                aborted = abort_connections_to(address)
                self._report(
                    f"lost\t{job} {index} ({address}): unreachable for "
                    f"{away:.0f} s; its work goes to the other workers until it "
                    f"answers again ({aborted} connection(s) to it closed)"
                )
            else:
                self._report(
                    f"lost\t{job} {index} ({address}): unreachable for "
                    f"{away:.0f} s; training waits for it (its variables are "
                    f"there) and stops if it is not back within "
                    f"{self._give_up_after:g} s (cluster.give_up_after_seconds)"
                )


def _end_run(message: str) -> None:
    """Ends the process at once with one line and :class:`ClusterLost`'s exit code: the
    main thread may be blocked in a call to the lost task that never returns."""
    try:
        scratch.remove()
        sys.stdout.flush()
        sys.stderr.write(f"error: {message}\n")
        sys.stderr.flush()
    finally:
        os._exit(ClusterLost.exit_code)
