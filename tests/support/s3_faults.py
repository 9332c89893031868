"""A fault-injecting HTTP proxy in front of moto's S3 server, for storage-fault tests.

Every S3 client of the project (Arrow's in-graph reader on the workers, s3fs on the
coordinator, the staged checkpoint and export uploads) reaches S3 at ``AWS_ENDPOINT_URL``;
pointing that at :class:`FaultProxy` puts the proxy on every path. Requests pass through
to moto unchanged unless a :class:`Fault` chooses them (by method, a regular expression
on the key, which part of an object a read asks for, and which matching request it is:
the Nth, every Nth, at most N times). A chosen request gets one of:

- ``"503"``: ``503 SlowDown`` with S3's XML error body (as S3 throttles);
- ``"500"``: ``500 InternalError`` with S3's XML error body;
- ``"403"``: ``403 AccessDenied`` (a permanent error);
- ``"reset"``: the connection is reset (RST) after ``bytes`` bytes of the body: of the
  request's body for an upload (nothing reaches moto), of the answer's body for a read;
- ``"delay"``: the answer comes ``seconds`` late;
- ``"hang"``: no answer until the client gives up and closes the connection.

Uploads that get a fault never reach moto: what moto holds is what a real store that
failed the request would hold. Every request is logged in :attr:`FaultProxy.log`.

Example:
  >>> proxy = FaultProxy(moto_url, [Fault("503", method="GET", key=r"\\.parquet$",
  ...                                     part="footer", every=5)])
  >>> os.environ["AWS_ENDPOINT_URL"] = proxy.url
"""

from __future__ import annotations

import dataclasses
import http.client
import re
import socket
import struct
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_ERRORS = {
    "503": (503, "SlowDown", "Please reduce your request rate."),
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "403": (403, "AccessDenied", "Access Denied"),
}
KINDS = frozenset(_ERRORS) | {"reset", "delay", "hang"}


@dataclasses.dataclass
class Fault:
    """Which requests fail, and how.

    Args:
      kind: One of :data:`KINDS`.
      method: HTTP method to match (``GET``, ``PUT``, ``HEAD``, ...); None: any.
      key: Regular expression searched in the request's path (``/bucket/key``); None: any.
      agent: Regular expression searched in the client's User-Agent: ``aws-sdk-cpp`` is
        Arrow (the Parquet op on the workers), ``botocore`` is s3fs; None: any.
      part: For reads: ``"footer"`` (a range that ends at the object's end, as a Parquet
        footer read does), ``"rows"`` (a range that does not), None: any.
      nth: Only the Nth matching request (1-based).
      every: Every Nth matching request (the Nth, 2Nth, ...).
      times: At most this many faults in all (None: no limit).
      bytes: For ``reset``: body bytes sent before the connection is reset.
      seconds: For ``delay``.
    """

    kind: str
    method: str | None = None
    key: str | None = None
    agent: str | None = None
    part: str | None = None
    nth: int | None = None
    every: int | None = None
    times: int | None = None
    bytes: int = 0
    seconds: float = 0.0
    matched: int = 0
    fired: int = 0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r}: expected one of {sorted(KINDS)}")

    def matches(self, method: str, path: str, part: str | None, agent: str = "") -> bool:
        if self.method is not None and method != self.method:
            return False
        if self.key is not None and not re.search(self.key, path):
            return False
        if self.agent is not None and not re.search(self.agent, agent):
            return False
        return self.part is None or self.part == part

    def choose(self) -> bool:
        """Counts one matching request; whether it gets the fault."""
        self.matched += 1
        if self.times is not None and self.fired >= self.times:
            return False
        chosen = (self.nth is None or self.matched == self.nth) and (
            self.every is None or self.matched % self.every == 0
        )
        self.fired += chosen
        return chosen


@dataclasses.dataclass(frozen=True)
class Logged:
    """One request through the proxy: what was asked and what it got (``fault`` is None
    when it passed through)."""

    method: str
    path: str
    part: str | None
    status: int | None
    fault: str | None
    agent: str = ""

    @property
    def arrow(self) -> bool:
        """Whether Arrow (the Parquet op) sent it, rather than s3fs."""
        return "aws-sdk-cpp" in self.agent


def _part(range_header: str | None, content_range: str | None) -> str | None:
    """``"footer"``, ``"rows"`` or None (not a ranged read) from a read's headers."""
    if not range_header or not content_range:
        return None
    match = re.match(r"bytes (\d+)-(\d+)/(\d+)", content_range)
    if not match:
        return None
    return "footer" if int(match.group(2)) + 1 == int(match.group(3)) else "rows"


def _reset(connection: socket.socket) -> None:
    """Closes with RST (SO_LINGER 0), as a dropped connection looks to the client."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _record(
        self, method: str, path: str, part: str | None, status: int | None, fault: str | None
    ) -> None:
        self.server.proxy.record(
            self.headers.get("User-Agent", ""), method, path, part, status, fault
        )

    def _error(self, kind: str, path: str) -> None:
        status, code, message = _ERRORS[kind]
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{message}</Message><Resource>{path}</Resource>"
            f"<RequestId>FAULT{time.monotonic_ns()}</RequestId></Error>"
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def _hang(self) -> None:
        """Waits, answering nothing, until the client closes the connection (or the proxy
        stops)."""
        self.connection.settimeout(0.2)
        while not self.server.stopping.is_set():
            try:
                if not self.connection.recv(65536):
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        self.close_connection = True

    def _handle(self) -> None:
        method, path = self.command, urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        has_body = method in ("PUT", "POST")
        proxy = self.server.proxy
        # Uploads are chosen before they reach moto; reads after, when the answer says which
        # part of the object they asked for.
        agent = self.headers.get("User-Agent", "")
        fault = proxy.choose(method, path, None, agent) if has_body else None
        if fault is not None and fault.kind == "reset":
            self.rfile.read(min(fault.bytes, int(self.headers.get("Content-Length") or 0)))
            self._record(method, path, None, None, "reset")
            _reset(self.connection)
            self.close_connection = True
            return
        body = self._body()
        if fault is not None:
            self._apply_before_answer(fault, method, path, None)
            if fault.kind in _ERRORS or fault.kind == "hang":
                return
        upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=120)
        try:
            headers = {
                k: v
                for k, v in self.headers.items()
                if k.lower() not in ("transfer-encoding", "connection", "content-length")
            }
            if body or has_body:
                headers["Content-Length"] = str(len(body))
            upstream.request(method, self.path, body=body if has_body else None, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
            status, answer_headers = answer.status, answer.getheaders()
        finally:
            upstream.close()
        part = _part(
            self.headers.get("Range"),
            {k.lower(): v for k, v in answer_headers}.get("content-range"),
        )
        if fault is None and not has_body:
            fault = proxy.choose(method, path, part, agent)
        if fault is not None and fault.kind != "delay":
            if fault.kind == "reset":
                self._record(method, path, part, status, "reset")
                self._answer(status, answer_headers, data, cut=fault.bytes)
                return
            self._apply_before_answer(fault, method, path, part)
            return
        if fault is not None:
            self._apply_before_answer(fault, method, path, part)
        if fault is None:
            self._record(method, path, part, status, None)
        self._answer(status, answer_headers, data)

    def _apply_before_answer(self, fault: Fault, method: str, path: str, part: str | None) -> None:
        if fault.kind in _ERRORS:
            self._record(method, path, part, _ERRORS[fault.kind][0], fault.kind)
            self._error(fault.kind, path)
        elif fault.kind == "hang":
            self._record(method, path, part, None, "hang")
            self._hang()
        elif fault.kind == "delay":
            time.sleep(fault.seconds)
            self._record(method, path, part, None, "delay")

    def _answer(self, status: int, headers: list, data: bytes, cut: int | None = None) -> None:
        self.send_response(status)
        for name, value in headers:
            if name.lower() not in (
                "transfer-encoding",
                "connection",
                "content-length",
                "server",
                "date",
            ):
                self.send_header(name, value)
        if self.command != "HEAD" or data:
            self.send_header("Content-Length", str(len(data)))
        else:
            length = dict((k.lower(), v) for k, v in headers).get("content-length")
            if length is not None:
                self.send_header("Content-Length", length)
        self.end_headers()
        if cut is not None:
            self.wfile.write(data[:cut])
            self.wfile.flush()
            _reset(self.connection)
            self.close_connection = True
            return
        if self.command != "HEAD":
            self.wfile.write(data)
        self.wfile.flush()

    def _serve(self) -> None:
        try:
            self._handle()
        except (ConnectionError, BrokenPipeError, TimeoutError, OSError):
            self.close_connection = True

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _serve


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    proxy: FaultProxy
    stopping: threading.Event


class FaultProxy:
    """The proxy, listening on 127.0.0.1 from construction until :meth:`stop`.

    Args:
      upstream: moto's URL, e.g. ``http://127.0.0.1:5000``.
      faults: The faults, tried in order (the first that chooses a request applies).
        :attr:`faults` can be replaced while the proxy runs.

    Attributes:
      url: The proxy's URL, for ``AWS_ENDPOINT_URL``.
      log: Every request so far (:class:`Logged`).
    """

    def __init__(self, upstream: str, faults: list[Fault] | tuple = ()):
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream_host, self.upstream_port = parsed.hostname, parsed.port
        self.faults = list(faults)
        self.log: list[Logged] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self._server.stopping = threading.Event()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._thread.start()

    def choose(self, method: str, path: str, part: str | None, agent: str = "") -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(method, path, part, agent) and fault.choose():
                    return fault
        return None

    def record(
        self,
        agent: str,
        method: str,
        path: str,
        part: str | None,
        status: int | None,
        fault: str | None,
    ) -> None:
        with self._lock:
            self.log.append(Logged(method, path, part, status, fault, agent))

    def faulted(self) -> list[Logged]:
        """The requests that got a fault."""
        return [entry for entry in list(self.log) if entry.fault is not None]

    def stop(self) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()
