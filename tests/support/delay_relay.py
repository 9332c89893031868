"""A TCP relay that adds a fixed one-way delay, for hosts whose kernel has no ``netem``.

Run it on a host of its own (:class:`tests.support.hosts.HostNetwork`); every task's
address in ``TF_CONFIG`` is then the relay's address with the task's port, and the relay
forwards each port to the task's real address. Every chunk read from one side is written
to the other ``--delay-ms`` later, in order, both ways, so a round trip gains twice the
delay. It counts the bytes each way per port and writes them, as JSON, to ``--stats``
about once a second and at SIGTERM::

    python -m tests.support.delay_relay --listen 10.211.1.30 --delay-ms 1 \\
        --route 2222=10.211.1.12:2222 --route 2223=10.211.1.13:2223 --stats /tmp/relay.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections import defaultdict

CHUNK = 256 * 1024


class Relay:
    def __init__(self, delay: float, stats_path: str | None):
        self.delay, self.stats_path = delay, stats_path
        self.bytes: dict[int, dict[str, int]] = defaultdict(lambda: {"to": 0, "from": 0})

    async def _pump(self, reader, writer, port: int, way: str) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if data is None:
                    break
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            writer.close()

        sender = asyncio.create_task(deliver())
        try:
            while data := await reader.read(CHUNK):
                self.bytes[port][way] += len(data)
                queue.put_nowait((loop.time() + self.delay, data))
        except (ConnectionError, OSError):
            pass
        queue.put_nowait((0.0, None))
        try:
            await sender
        except (ConnectionError, OSError):
            pass

    async def _serve(self, port: int, target: tuple[str, int], reader, writer) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()
            return
        for sock in (writer, upstream_writer):
            raw = sock.get_extra_info("socket")
            if raw is not None:
                import socket

                raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(
            self._pump(reader, upstream_writer, port, "to"),
            self._pump(upstream_reader, writer, port, "from"),
        )

    def write_stats(self) -> None:
        if self.stats_path:
            with open(self.stats_path + ".part", "w") as handle:
                json.dump({str(p): v for p, v in self.bytes.items()}, handle)
            import os

            os.replace(self.stats_path + ".part", self.stats_path)

    async def run(self, listen: str, routes: dict[int, tuple[str, int]]) -> None:
        for port, target in routes.items():
            await asyncio.start_server(
                lambda r, w, p=port, t=target: self._serve(p, t, r, w),
                listen,
                port,
                reuse_address=True,
            )
        print(
            f"relay ready on {listen}: {len(routes)} ports, delay {self.delay * 1e3} ms", flush=True
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        while not stop.is_set():
            self.write_stats()
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except asyncio.TimeoutError:
                pass
        self.write_stats()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="address to listen on")
    parser.add_argument("--route", action="append", default=[], help="PORT=HOST:PORT, one per task")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay")
    parser.add_argument("--stats", help="JSON file of bytes per port, 'to' and 'from' it")
    args = parser.parse_args(argv)
    routes = {}
    for route in args.route:
        port, target = route.split("=")
        host, target_port = target.rsplit(":", 1)
        routes[int(port)] = (host, int(target_port))
    asyncio.run(Relay(args.delay_ms / 1e3, args.stats).run(args.listen, routes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
