"""The least a streaming client can do: the reference `client_cost.py` measures against.

Not a test: `client_cost.py` runs it as its own process.

    python benchmarks/raw_stream_client.py --url URL --concurrency 1024 --requests 2048 \
        --out raw.jsonl

One asyncio protocol per stream on its own keep-alive connection (uvloop when installed,
as servelab's workers use): it writes a prebuilt HTTP/1.1 request, stamps the first
body bytes that carry generated text, counts tokens as `"content"` occurrences and ends
a response at the chunked body's last chunk. No HTTP library, no SSE decoder, no JSON:
what is left is the cost of the event loop and the sockets. One warm-up request runs
first; the measured requests' records go to `--out` and a summary line to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from pathlib import Path
from urllib.parse import urlsplit

_CONTENT = b'"content":'
_BODY_END = b"\r\n0\r\n\r\n"
_WORD = "hello "


class _Stream(asyncio.Protocol):
    """One keep-alive connection, sending its next request when a response ends."""

    def __init__(self, requests: list[tuple[str, bytes]], results: list[dict]) -> None:
        self.requests = requests
        self.results = results
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self._next()

    def _next(self) -> None:
        if not self.requests:
            self.transport.close()
            return
        self.request_id, request = self.requests.pop()
        self.tokens = 0
        self.t_first_ns = 0
        self.t_send_ns = time.monotonic_ns()
        self.transport.write(request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        tokens = data.count(_CONTENT)
        if tokens and not self.t_first_ns:
            self.t_first_ns = time.monotonic_ns()
        self.tokens += tokens
        self.tail = (self.tail + data)[-len(_BODY_END) :]
        if self.tail == _BODY_END:
            self.tail = b""
            self.results.append(
                {
                    "request_id": self.request_id,
                    "t_send_ns": self.t_send_ns,
                    "t_first_ns": self.t_first_ns,
                    "t_end_ns": time.monotonic_ns(),
                    "tokens": self.tokens,
                }
            )
            self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


def _request(host: str, port: int, request_id: str, body: bytes) -> bytes:
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nX-Request-Id: {request_id}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _drive(url: str, concurrency: int, ids: list[str], body: bytes) -> list[dict]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    queues: list[list[tuple[str, bytes]]] = [[] for _ in range(concurrency)]
    for i, request_id in enumerate(ids):
        queues[i % concurrency].append((request_id, _request(host, port, request_id, body)))
    results: list[dict] = []
    loop = asyncio.get_running_loop()
    streams = []
    for queue in queues:
        if queue:
            queue.reverse()
            _, stream = await loop.create_connection(
                lambda q=queue: _Stream(q, results), host, port
            )
            streams.append(stream)
    await asyncio.gather(*(s.closed for s in streams))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--input-words", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    body = json.dumps(
        {
            "model": "servelab-sim",
            "messages": [{"role": "user", "content": _WORD * args.input_words}],
            "max_tokens": args.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    asyncio.run(_drive(args.url, 1, ["raw-w0"], body))
    measured = [f"raw-m{i}" for i in range(args.requests)]
    results = asyncio.run(_drive(args.url, args.concurrency, measured, body))
    with args.out.open("w") as out:
        for result in results:
            out.write(json.dumps(result) + "\n")
    start = min(r["t_send_ns"] for r in results)
    end = max(r["t_end_ns"] for r in results)
    ttft = [(r["t_first_ns"] - r["t_send_ns"]) / 1e6 for r in results]
    print(
        json.dumps(
            {
                "completed": len(results),
                "mean_ttft_ms": sum(ttft) / len(ttft),
                "output_throughput": sum(r["tokens"] for r in results) / ((end - start) / 1e9),
            }
        )
    )


if __name__ == "__main__":
    main()
