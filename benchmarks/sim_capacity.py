"""How many chunks per second the simulator sustains, and with what send lag.

Not a test (pytest does not collect it): run it by hand, it prints one JSON line.

    python benchmarks/sim_capacity.py --streams 1024 --itl-ms 20 --max-tokens 256

It starts `servelab.sim.serve` in a subprocess, drives `--streams` concurrent streaming
requests in a closed loop from `--client-procs` client processes for `--duration-s`,
and measures over a window that starts after `--warmup-s`: chunks sent per second and
the send lag (a chunk's send time minus its due time) of the chunks sent in the window,
both from the server's truth log, plus the CPU the server's processes used. `--client
raw` is a minimal asyncio protocol that only counts bytes (to measure the server alone);
`--client aiohttp` reads each stream line by line with aiohttp, as a load generator does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np

from servelab.core.processes import proc_stat
from servelab.sim import read_truth

SERVE = (
    "import sys\n"
    "from servelab.sim import serve, SimConfig\n"
    "serve(SimConfig.model_validate_json(sys.argv[1]), on_ready=lambda u: print(u, flush=True))\n"
)
PROMPT = "hello " * 32


def _payload(max_tokens: int) -> dict:
    return {
        "model": "servelab-sim",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


class _RawStream(asyncio.Protocol):
    """One keep-alive connection sending a request each time the previous body ends."""

    def __init__(self, request: bytes, deadline: float, done: asyncio.Future[int]) -> None:
        self.request = request
        self.deadline = deadline
        self.done = done
        self.tail = b""
        self.completed = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.tail = (self.tail + data)[-16:]
        if self.tail.endswith(b"\r\n0\r\n\r\n"):
            self.completed += 1
            self.tail = b""
            if time.monotonic() < self.deadline:
                self.transport.write(self.request)  # type: ignore[attr-defined]
            else:
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(self.completed)


async def _raw_client(url: str, streams: int, max_tokens: int, duration_s: float) -> int:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    body = json.dumps(_payload(max_tokens)).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + duration_s
    futures = []
    for _ in range(streams):
        done: asyncio.Future[int] = loop.create_future()
        await loop.create_connection(lambda d=done: _RawStream(request, deadline, d), host, port)
        futures.append(done)
    return sum(await asyncio.gather(*futures))


async def _aiohttp_client(url: str, streams: int, max_tokens: int, duration_s: float) -> int:
    deadline = time.monotonic() + duration_s
    payload = _payload(max_tokens)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one_stream() -> int:
            completed = 0
            while time.monotonic() < deadline:
                async with session.post(f"{url}/v1/chat/completions", json=payload) as resp:
                    async for line in resp.content:
                        if line.startswith(b"data: {"):
                            json.loads(line[6:])
                completed += 1
            return completed

        return sum(await asyncio.gather(*(one_stream() for _ in range(streams))))


def _client_proc(client: str, url: str, streams: int, max_tokens: int, duration_s: float,
                 out: multiprocessing.Queue) -> None:  # fmt: skip
    import uvloop

    drive = _raw_client if client == "raw" else _aiohttp_client
    out.put(uvloop.run(drive(url, streams, max_tokens, duration_s)))


def _process_tree(pid: int) -> list[int]:
    """pid and its children (the simulator's workers), from /proc."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(int(child) for child in children)]


def _cpu_s(pids: list[int]) -> float:
    """User plus system CPU seconds of these processes."""
    stats = [proc_stat(pid) for pid in pids]
    return sum(stat.cpu_s for stat in stats if stat is not None)


def _window(record: Path, t_first: int, t_last: int) -> np.ndarray:
    """Send lags (ms) of the text chunks sent inside the window, from the truth log."""
    lags = [
        lag
        for rec in read_truth(record)
        for sent, lag in zip(rec.chunk_sent_ns, rec.chunk_lag_ns, strict=True)
        if t_first <= sent <= t_last
    ]
    return np.asarray(lags, dtype=np.float64) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1024)
    parser.add_argument("--itl-ms", type=float, default=20.0)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--warmup-s", type=float, default=7.0)
    parser.add_argument("--client", choices=("raw", "aiohttp"), default="raw")
    parser.add_argument("--client-procs", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()

    record = Path(tempfile.mkdtemp()) / "truth.jsonl"
    config = {
        "port": 0,
        "ttft_ms": args.ttft_ms,
        "itl_ms": args.itl_ms,
        "workers": args.workers,
        "record_path": str(record),
    }
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE, json.dumps(config)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        pids = _process_tree(server.pid)
        out: multiprocessing.Queue = multiprocessing.Queue()
        shares = [args.streams // args.client_procs] * args.client_procs
        shares[0] += args.streams - sum(shares)
        clients = [
            multiprocessing.Process(
                target=_client_proc,
                args=(args.client, url, n, args.max_tokens, args.duration_s, out),
            )
            for n in shares
        ]
        for client in clients:
            client.start()
        time.sleep(args.warmup_s)
        t_first, cpu_first = time.perf_counter_ns(), _cpu_s(pids)
        time.sleep(args.duration_s - args.warmup_s - 1.0)
        t_last, cpu_last = time.perf_counter_ns(), _cpu_s(pids)
        completed = sum(out.get() for _ in clients)
        for client in clients:
            client.join()
    finally:
        server.terminate()
        server.wait()
    window_s = (t_last - t_first) / 1e9
    lags_ms = _window(record, t_first, t_last)
    print(
        json.dumps(
            {
                "client": args.client,
                "client_procs": args.client_procs,
                "workers": args.workers,
                "streams": args.streams,
                "itl_ms": args.itl_ms,
                "max_tokens": args.max_tokens,
                "offered_chunks_per_s": round(args.streams * 1000 / args.itl_ms),
                "window_s": round(window_s, 1),
                "chunks_per_s": round(len(lags_ms) / window_s),
                "send_lag_p50_ms": round(float(np.percentile(lags_ms, 50)), 3),
                "send_lag_p99_ms": round(float(np.percentile(lags_ms, 99)), 3),
                "send_lag_max_ms": round(float(lags_ms.max()), 3),
                "server_cpu_pct": round(100 * (cpu_last - cpu_first) / window_s),
                "requests_completed": completed,
                "load_avg_1m": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
