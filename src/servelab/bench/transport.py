"""HTTP/1.1 on asyncio protocols: the load generator's own connection to the server.

A general client (aiohttp) hands a streamed body to a reading task: every piece of the
body wakes that task through a future, and at a thousand streams of fifty tokens a
second those wake-ups, not the parsing, are most of the client's CPU. Here the response
is parsed in the protocol's `data_received` and its body handed to the caller's sink
there and then, stamped with its arrival: no task runs per piece, and a busy loop delays
a stamp by no more than the callback's own wait.

What it speaks: HTTP/1.1 over TCP or TLS, keep-alive connections pooled per host,
bodies that are chunked, sized by Content-Length or ended by the connection closing;
`Accept-Encoding: identity` is asked and a compressed body is refused with its reason.
No proxies, redirects or HTTP/2: an inference endpoint is addressed directly.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

from servelab.core.clock import NS_PER_S, now_ns

__all__ = [
    "BadResponse",
    "ConnectFailed",
    "ConnectionCut",
    "ConnectionPool",
    "Exchange",
    "Stalled",
    "Target",
    "TransportError",
    "request_head",
]

BodySink = Callable[[bytes, int], bool]
"""Called with each piece of body and its arrival (ns); returns True to stop reading."""

_MAX_HEAD_BYTES = 64 * 1024
_MAX_SIZE_LINE_BYTES = 1024
_CRLF = b"\r\n"
_HEAD_END = b"\r\n\r\n"


class TransportError(Exception):
    """A request that got no complete response; the message says why, in one line."""


class ConnectFailed(TransportError):
    """No connection could be made."""


class ConnectionCut(TransportError):
    """The connection closed before the response was complete."""


class Stalled(TransportError):
    """No byte arrived for the stall timeout."""


class BadResponse(TransportError):
    """Bytes that are not an HTTP/1.1 response this client can read."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where one URL's requests go, parsed once."""

    scheme: str
    host: str
    port: int
    netloc: str
    path: str

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return cls(parts.scheme, parts.hostname, port, parts.netloc.rpartition("@")[2], path)


def request_head(target: Target, headers: Mapping[str, str], length: int) -> bytes:
    """A POST's request line and headers; a header value with a line break is refused."""
    given = {name.lower() for name in headers}
    lines = [f"POST {target.path} HTTP/1.1"]
    defaults = {
        "Host": target.netloc,
        "Accept": "*/*",
        "Accept-Encoding": "identity",
        "User-Agent": "servelab",
    }
    lines += [f"{name}: {value}" for name, value in defaults.items() if name.lower() not in given]
    for name, value in headers.items():
        if any(c in name or c in value for c in "\r\n") or ":" in name:
            raise ValueError(f"header {name!r} holds a line break or a colon in its name")
        if name.lower() not in ("content-length", "transfer-encoding"):
            lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class Exchange:
    """One request's response on one connection: its head, then its body."""

    __slots__ = (
        "_body",
        "_connection",
        "_done",
        "_head",
        "_pending",
        "_sink",
        "connect_ns",
        "headers",
        "received",
        "status",
        "t_send_ns",
    )

    def __init__(self, connection: _Connection, connect_ns: int) -> None:
        loop = asyncio.get_running_loop()
        self._connection = connection
        self._head: asyncio.Future[None] = loop.create_future()
        self._done: asyncio.Future[None] = loop.create_future()
        self._pending: list[tuple[bytes, int]] = []
        self._sink: BodySink | None = None
        self._body: list[bytes] | None = None
        self.connect_ns = connect_ns
        self.t_send_ns = 0
        self.status = 0
        self.headers: dict[str, str] = {}
        self.received = False
        """Some byte of the response arrived."""

    async def stream(self, sink: BodySink) -> None:
        """Hand every piece of the body to `sink` as it arrives, until it ends."""
        for data, t_ns in self._pending:
            if sink(data, t_ns):
                self._connection.abandon()
                return
        self._pending = []
        self._sink = sink
        await self._wait_done()

    async def read(self) -> bytes:
        """The whole body."""
        self._body = [data for data, _ in self._pending]
        self._pending = []
        await self._wait_done()
        return b"".join(self._body)

    async def _wait_done(self) -> None:
        try:
            await self._done
        except asyncio.CancelledError:
            self._connection.abandon()
            raise

    def _deliver(self, data: bytes, t_ns: int) -> None:
        if self._sink is not None:
            if self._sink(data, t_ns):
                self._connection.abandon()
        elif self._body is not None:
            self._body.append(data)
        else:
            self._pending.append((data, t_ns))

    def _fail(self, error: TransportError) -> None:
        for future in (self._head, self._done):
            if not future.done():
                future.set_exception(error)
                future.exception()  # retrieved: the other one is the one awaited


class _Connection(asyncio.Protocol):
    """One keep-alive connection, reading one response at a time."""

    def __init__(self, pool: ConnectionPool, key: tuple[str, str, int]) -> None:
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.exchange: Exchange | None = None
        self.reusable = True
        self.last_data_ns = 0
        self._stall_timer: asyncio.TimerHandle | None = None
        self._stall_s = 0.0
        self._in_head = True
        self._head = b""
        self._framing = ""
        self._left = 0
        """Bytes left in the body (Content-Length) or in the current chunk."""
        self._chunk_state = "size"
        self._tail = b""

    # --- asyncio.Protocol ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        t_ns = now_ns()
        self.last_data_ns = t_ns
        exchange = self.exchange
        if exchange is None:
            self.reusable = False  # bytes nobody asked for: this connection is out of step
            self._close()
            return
        exchange.received = True
        try:
            if self._in_head:
                data = self._take_head(data, exchange)
                if self._in_head or self.exchange is not exchange:
                    return
            if data:
                self._take_body(data, t_ns, exchange)
        except BadResponse as exc:
            self._end(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self.pool._forget(self)
        if self.exchange is None:
            return
        if self._framing == "close" and not self._in_head:
            self._end(None)
            return
        why = f": {exc}" if exc is not None else ""
        where = "before the response" if self._in_head else "mid-response"
        self._end(ConnectionCut(f"the server closed the connection {where}{why}"))

    # --- driving one exchange ---

    def start(self, exchange: Exchange, head: bytes, body: bytes, stall_s: float) -> None:
        assert self.transport is not None
        self.exchange = exchange
        self._in_head, self._head, self._framing, self._chunk_state = True, b"", "", "size"
        self._tail = b""
        exchange.t_send_ns = self.last_data_ns = now_ns()  # before: the write may be read at once
        self.transport.write(head + body)
        self._stall_s = stall_s
        if stall_s > 0:
            self._stall_timer = asyncio.get_running_loop().call_later(stall_s, self._check_stall)

    def abandon(self) -> None:
        """The caller stopped reading mid-body: the connection cannot serve another."""
        self.reusable = False
        self._end(None)
        self._close()

    def _check_stall(self) -> None:
        """Rearmed lazily: one timer per stall period, not one per piece of body."""
        self._stall_timer = None
        if self.exchange is None:
            return
        idle_s = (now_ns() - self.last_data_ns) / NS_PER_S
        if idle_s >= self._stall_s:
            self.reusable = False
            self._end(Stalled(f"no data for {self._stall_s:g} s"))
            self._close()
            return
        loop = asyncio.get_running_loop()
        self._stall_timer = loop.call_later(self._stall_s - idle_s, self._check_stall)

    def _end(self, error: TransportError | None) -> None:
        exchange, self.exchange = self.exchange, None
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
        if exchange is None:
            return
        if error is not None:
            self.reusable = False
            exchange._fail(error)
            return
        for future in (exchange._head, exchange._done):
            if not future.done():
                future.set_result(None)

    def _close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    # --- parsing ---

    def _take_head(self, data: bytes, exchange: Exchange) -> bytes:
        """Consume head bytes; the bytes after the head, once it is complete."""
        buffer = self._head + data
        while True:
            end = buffer.find(_HEAD_END)
            if end < 0:
                if len(buffer) > _MAX_HEAD_BYTES:
                    raise BadResponse(f"response head longer than {_MAX_HEAD_BYTES} bytes")
                self._head = buffer
                return b""
            status = self._parse_head(buffer[:end], exchange)
            buffer = buffer[end + len(_HEAD_END) :]
            if not 100 <= status < 200:
                break
        self._in_head, self._head = False, b""
        if not exchange._head.done():
            exchange._head.set_result(None)
        if self._framing == "none" or (self._framing == "length" and self._left == 0):
            self._finish()
        return buffer

    def _parse_head(self, head: bytes, exchange: Exchange) -> int:
        lines = head.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise BadResponse(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        status = int(code)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                raise BadResponse(f"not a header line: {line[:80]!r}")
            name = name.strip().lower()
            value = value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        exchange.status, exchange.headers = status, headers
        if 100 <= status < 200:
            return status
        connection = headers.get("connection", "").lower()
        if "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection):
            self.reusable = False
        encoding = headers.get("content-encoding", "identity").lower()
        if encoding not in ("identity", ""):
            raise BadResponse(f"the server compressed the body ({encoding}); identity was asked")
        if status in (204, 304):
            self._framing = "none"
        elif headers.get("transfer-encoding", "").lower().rsplit(",", 1)[-1].strip() == "chunked":
            self._framing, self._chunk_state = "chunked", "size"
        elif "content-length" in headers:
            try:
                self._left = int(headers["content-length"])
            except ValueError:
                raise BadResponse(f"bad Content-Length {headers['content-length']!r}") from None
            self._framing = "length"
        else:
            self._framing = "close"
            self.reusable = False
        return status

    def _take_body(self, data: bytes, t_ns: int, exchange: Exchange) -> None:
        if self._framing == "chunked":
            payload, ended = self._dechunk(data)
        elif self._framing == "length":
            payload = data[: self._left]
            self._left -= len(payload)
            ended = self._left == 0
            if len(data) > len(payload):
                self.reusable = False
        else:
            payload, ended = data, False
        if payload:
            exchange._deliver(payload, t_ns)
        if ended and self.exchange is exchange:
            self._finish()

    def _dechunk(self, data: bytes) -> tuple[bytes, bool]:
        """The chunked body's payload in `data`, and whether its last chunk ended."""
        buffer = self._tail + data if self._tail else data
        self._tail = b""
        pieces: list[bytes] = []
        pos, size = 0, len(buffer)
        state = self._chunk_state
        while state == "size":  # the common case, whole chunks: one find and one slice each
            end = buffer.find(_CRLF, pos)
            length = _chunk_size(buffer, pos, end)
            stop = end + 2 + length
            if length == 0 or buffer[stop : stop + 2] != _CRLF:
                break
            pieces.append(buffer[end + 2 : stop])
            pos = stop + 2
        while pos < size:
            if state == "data":
                take = min(self._left, size - pos)
                pieces.append(buffer[pos : pos + take])
                pos += take
                self._left -= take
                if self._left:
                    break
                state = "crlf"
            elif state == "crlf":
                if size - pos < 2:
                    break
                if buffer[pos : pos + 2] != _CRLF:
                    raise BadResponse("a chunk of the body does not end in CRLF")
                pos += 2
                state = "size"
            else:
                end = buffer.find(_CRLF, pos)
                if end < 0:
                    if size - pos > _MAX_SIZE_LINE_BYTES:
                        raise BadResponse("a chunk-size line longer than 1 KiB")
                    break
                line = buffer[pos:end]
                if state == "trailer":
                    pos = end + 2
                    if not line:
                        self._chunk_state = "size"
                        return b"".join(pieces), True
                    continue
                self._left = _chunk_size(buffer, pos, end)
                pos = end + 2
                state = "data" if self._left else "trailer"
        self._chunk_state = state
        self._tail = buffer[pos:]
        return b"".join(pieces) if len(pieces) != 1 else pieces[0], False

    def _finish(self) -> None:
        self._end(None)
        if self.reusable:
            self.pool._release(self)
        else:
            self._close()


def _chunk_size(buffer: bytes, start: int, end: int) -> int:
    """The size on the chunk-size line buffer[start:end]; 0 when the line is not all there."""
    if end < 0:
        return 0
    line = buffer[start:end]
    try:
        return int(line.split(b";", 1)[0].strip(), 16)
    except ValueError:
        raise BadResponse(f"bad chunk-size line {line[:40]!r}") from None


class ConnectionPool:
    """Keep-alive connections of one event loop, by (scheme, host, port); no limit."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._all: set[_Connection] = set()
        self._ssl = ssl_context

    async def post(
        self,
        target: Target,
        head: bytes,
        body: bytes,
        *,
        stall_s: float,
    ) -> Exchange:
        """Send one request; return once its response head has arrived.

        A pooled connection the server closed before answering gets the request again
        on a new connection, once: the server never saw it.
        """
        for attempt in range(2):
            connection, connect_ns = await self._connection(target, fresh=attempt > 0)
            exchange = Exchange(connection, connect_ns)
            connection.start(exchange, head, body, stall_s)
            try:
                await exchange._head
            except ConnectionCut:
                if connect_ns == 0 and not exchange.received and attempt == 0:
                    continue
                raise
            except asyncio.CancelledError:
                connection.abandon()
                raise
            return exchange
        raise AssertionError("unreachable")

    async def close(self) -> None:
        for connection in list(self._all):
            connection.reusable = False
            connection._close()
        self._idle.clear()
        self._all.clear()

    async def _connection(self, target: Target, *, fresh: bool) -> tuple[_Connection, int]:
        key = (target.scheme, target.host, target.port)
        idle = self._idle.get(key)
        while idle and not fresh:
            connection = idle.pop()
            if connection.transport is not None and not connection.transport.is_closing():
                return connection, 0
        loop = asyncio.get_running_loop()
        t0 = now_ns()
        tls = None
        if target.scheme == "https":
            tls = self._ssl or ssl.create_default_context()
        try:
            _, connection = await loop.create_connection(
                lambda: _Connection(self, key),
                target.host,
                target.port,
                ssl=tls,
                server_hostname=target.host if tls else None,
            )
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"cannot connect to {target.netloc}: {_os_error(exc)}") from None
        self._all.add(connection)
        return connection, max(now_ns() - t0, 1)

    def _release(self, connection: _Connection) -> None:
        self._idle.setdefault(connection.key, []).append(connection)

    def _forget(self, connection: _Connection) -> None:
        self._all.discard(connection)
        idle = self._idle.get(connection.key)
        if idle and connection in idle:
            idle.remove(connection)


def _os_error(exc: BaseException) -> str:
    """`[Errno 111] Connection refused`: asyncio's own text hides the reason's name."""
    if (
        isinstance(exc, OSError)
        and exc.errno
        and not isinstance(exc, ssl.SSLError | socket.gaierror)
    ):
        return f"[Errno {exc.errno}] {os.strerror(exc.errno)}"
    return str(exc) or type(exc).__name__
