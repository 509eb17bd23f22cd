"""The load generator's HTTP/1.1 transport against scripted servers on 127.0.0.1.

Each server answers every request on a connection with the next reply of its script:
pieces of bytes written with pauses between them, then keep the connection or close it.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.bench.transport import (
    BadResponse,
    ConnectFailed,
    ConnectionCut,
    ConnectionPool,
    Stalled,
    Target,
    request_head,
)
from tests.ci import missing

CLOSE = b""
"""In a reply: close the connection here."""


@dataclass
class Scripted:
    """A server whose replies are lists of bytes (or (pause_s, bytes)); CLOSE closes."""

    replies: list[list[bytes | tuple[float, bytes]]]
    port: int = 0
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    tls: ssl.SSLContext | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.replies:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                self.requests.append(head + await reader.readexactly(length))
                for piece in self.replies.pop(0):
                    pause, data = piece if isinstance(piece, tuple) else (0.0, piece)
                    await asyncio.sleep(pause)
                    if data == CLOSE:
                        writer.close()
                        return
                    writer.write(data)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


@contextmanager
def serving(server: Scripted) -> Iterator[Scripted]:
    loop = asyncio.new_event_loop()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server.port = sock.getsockname()[1]
    started = loop.run_until_complete(
        asyncio.start_server(server.handle, sock=sock, ssl=server.tls)
    )
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(started.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def chunked(*payloads: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads) + b"0\r\n\r\n"


OK_CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def exchange(
    server: Scripted,
    *,
    requests: int = 1,
    stream: bool = True,
    stall_s: float = 5.0,
    tls: ssl.SSLContext | None = None,
) -> list[tuple[int, bytes, list[int]]]:
    """Send `requests` POSTs one after another on one pool: (status, body, arrival stamps)."""

    async def main() -> list[tuple[int, bytes, list[int]]]:
        scheme = "https" if tls else "http"
        target = Target.parse(f"{scheme}://127.0.0.1:{server.port}/v1/chat/completions")
        pool = ConnectionPool(ssl_context=tls)
        out = []
        try:
            for _ in range(requests):
                head = request_head(target, {"X-Request-Id": "t"}, 2)
                got = await pool.post(target, head, b"{}", stall_s=stall_s)
                if stream:
                    pieces: list[bytes] = []
                    stamps: list[int] = []

                    def sink(data: bytes, t_ns: int, p=pieces, s=stamps) -> bool:
                        p.append(data)
                        s.append(t_ns)
                        return False

                    await got.stream(sink)
                    out.append((got.status, b"".join(pieces), stamps))
                else:
                    out.append((got.status, await got.read(), []))
        finally:
            await pool.close()
        return out

    return asyncio.run(main())


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=200), max_size=12))
def test_a_chunked_body_is_the_same_whatever_the_split(cuts: list[int]) -> None:
    body = chunked(b'data: {"a": 1}\n\n', b"x" * 70, b"data: [DONE]\n\n")
    reply = OK_CHUNKED + body
    points = sorted({c % len(reply) for c in cuts} - {0})
    pieces = [reply[a:b] for a, b in zip([0, *points], [*points, len(reply)], strict=True)]
    with serving(Scripted([pieces, pieces])) as server:
        results = exchange(server, requests=2)
    expected = b'data: {"a": 1}\n\n' + b"x" * 70 + b"data: [DONE]\n\n"
    assert [(status, payload) for status, payload, _ in results] == [(200, expected)] * 2
    assert server.connections == 1  # kept alive and reused


def test_content_length_and_close_delimited_bodies() -> None:
    sized = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
    until_close = [b"HTTP/1.1 200 OK\r\n\r\nall of ", (0.05, b"it"), CLOSE]
    with serving(Scripted([[sized], until_close, [sized]])) as server:
        results = exchange(server, requests=3, stream=False)
    assert [body for _, body, _ in results] == [b"hello", b"all of it", b"hello"]
    assert server.connections == 2  # the close-delimited body ended its connection


def test_informational_responses_are_skipped() -> None:
    reply = [b"HTTP/1.1 100 Continue\r\n\r\n", OK_CHUNKED + chunked(b"ok")]
    with serving(Scripted([reply])) as server:
        [(status, body, _)] = exchange(server)
    assert (status, body) == (200, b"ok")


@pytest.mark.timing
def test_stamps_are_arrival_times_and_bytes_with_the_head_keep_theirs() -> None:
    reply = [OK_CHUNKED + b"3\r\none\r\n", (0.15, b"3\r\ntwo\r\n"), (0.15, b"0\r\n\r\n")]
    with serving(Scripted([reply])) as server:
        [(_, body, stamps)] = exchange(server)
    assert body == b"onetwo"
    stamped_at_arrival(stamps)


def stamped_at_arrival(stamps: list[int]) -> None:
    """The two pieces' stamps keep the server's 150 ms pause between them."""
    # the server pauses 150 ms between the pieces; a stamp is taken when the client reads,
    # so the first piece read up to 10 ms late still passes (taken at the body's end, both
    # stamps would be one)
    assert (stamps[1] - stamps[0]) / 1e6 >= 140


def test_stamps_taken_late_or_at_the_body_end_are_not_arrival_times() -> None:
    """The negative control of the stamp check: a first stamp 15 ms after its piece arrived
    (1.5x the 10 ms margin) or both at the body's end are caught; 5 ms late is not."""
    ms = 1_000_000
    with pytest.raises(AssertionError):
        stamped_at_arrival([15 * ms, 150 * ms])
    with pytest.raises(AssertionError):
        stamped_at_arrival([150 * ms, 150 * ms])
    stamped_at_arrival([5 * ms, 150 * ms])


def test_a_pooled_connection_the_server_closed_is_replaced_once() -> None:
    sized = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    with serving(Scripted([[sized, CLOSE], [sized]])) as server:

        async def main() -> list[bytes]:
            target = Target.parse(f"http://127.0.0.1:{server.port}/x")
            pool = ConnectionPool()
            bodies = []
            for _ in range(2):
                got = await pool.post(target, request_head(target, {}, 2), b"{}", stall_s=5)
                bodies.append(await got.read())
                await asyncio.sleep(0.1)  # the server's close lands while the connection idles
            await pool.close()
            return bodies

        assert asyncio.run(main()) == [b"ok", b"ok"]
    assert server.connections == 2


def test_a_cut_mid_body_is_a_cut_connection() -> None:
    server = Scripted([[OK_CHUNKED + b"3\r\none\r\n", CLOSE]])
    with serving(server), pytest.raises(ConnectionCut, match="mid-response"):
        exchange(server)


def test_a_fresh_connection_closed_before_answering_is_not_retried() -> None:
    server = Scripted([[CLOSE], [CLOSE]])
    with serving(server), pytest.raises(ConnectionCut, match="before the response"):
        exchange(server)
    assert server.connections == 1


@pytest.mark.timing
def test_silence_is_a_stall_but_slow_steady_bytes_are_not() -> None:
    # bytes every 0.1 s against a 0.25 s stall limit: a gap must stretch by 0.15 s to be
    # taken for a stall. The silent server below is the control: it must be one.
    steady = [OK_CHUNKED] + [(0.1, b"1\r\nx\r\n")] * 6 + [b"0\r\n\r\n"]
    with serving(Scripted([steady])) as server:
        [(_, body, _)] = exchange(server, stall_s=0.25)
    assert body == b"x" * 6
    with serving(Scripted([[OK_CHUNKED, (5.0, b"0\r\n\r\n")]])) as server:
        t0 = time.monotonic()
        with pytest.raises(Stalled, match=r"no data for 0\.3 s"):
            exchange(server, stall_s=0.3)
        # raised after 0.3 s of silence, so not before 0.25 s; 2.0 s bounds a hang, generously
        assert 0.25 < time.monotonic() - t0 < 2.0


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n", r"compressed the body \(gzip\)"),
        (OK_CHUNKED + b"zz\r\n", "bad chunk-size line"),
        (OK_CHUNKED + b"3\r\nabcXY", "does not end in CRLF"),
    ],
)
def test_what_is_not_http_is_refused_with_its_reason(reply: bytes, message: str) -> None:
    with serving(Scripted([[reply]])) as server, pytest.raises(BadResponse, match=message):
        exchange(server)


def test_a_closed_port_cannot_be_connected() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(ConnectFailed, match=f"cannot connect to 127.0.0.1:{port}: .*refused"):
        exchange(Scripted([], port=port))


def test_request_heads_refuse_line_breaks_and_keep_given_host() -> None:
    target = Target.parse("http://127.0.0.1:9/base/v1/completions?x=1")
    head = request_head(target, {"Host": "engine", "Authorization": "Bearer k"}, 7)
    assert head.startswith(b"POST /base/v1/completions?x=1 HTTP/1.1\r\n")
    assert b"Host: engine\r\n" in head and b"127.0.0.1:9" not in head
    assert head.endswith(b"Content-Length: 7\r\n\r\n")
    with pytest.raises(ValueError, match="line break"):
        request_head(target, {"X-Evil": "a\r\nInjected: 1"}, 0)
    with pytest.raises(ValueError, match="not an http"):
        Target.parse("ftp://127.0.0.1/")


def test_https_with_a_certificate_the_client_trusts(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        missing("the openssl command is not installed (it makes the test's certificate)")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    client_tls = ssl.create_default_context(cafile=str(cert))
    with serving(Scripted([[OK_CHUNKED + chunked(b"secure")]], tls=server_tls)) as server:
        [(status, body, _)] = exchange(server, tls=client_tls)
    assert (status, body) == (200, b"secure")
