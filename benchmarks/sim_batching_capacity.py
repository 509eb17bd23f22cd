"""Whether one batching simulator process holds its step schedule under a thousand streams.

Not a test (pytest does not collect it): run it by hand, it prints one JSON line.

    python benchmarks/sim_batching_capacity.py --streams 1024 --tok-s 20000

It starts `servelab.sim.serve` with the linear step-cost profile in a subprocess, sized so
that a step holding all `--streams` decoding requests lasts streams / tok-s seconds (a
fixed part plus `--per-seq-ms` per request; prefill costs nothing, so the asked rate is
exact), and drives `--streams` concurrent streaming requests in a closed loop with a
byte-counting client (sim_capacity.py's) for `--duration-s`, each stream asking for its
own output length so that requests end and arrive spread over the steps. Over a window
that starts after `--warmup-s`, from the server's truth log:

- measured_tok_s: output tokens sent per second; ratio = measured / asked. A request
  finishing leaves its slot empty for a step or two until the client's next one has
  arrived and been prefilled: about 1.5 / max_tokens of the ideal is the closed loop's.
- step_lag_*_ms: per step, the lag of the first chunk written at its end (send time minus
  the step's planned end), i.e. how late the step's end was handled.
- chunk_lag_*_ms: the lag of every chunk; the p99 includes writing a whole step's chunks.
- server_step_lag_*_ms: the server's own measure (/sim/stats) over the whole run,
  warm-up included.
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
import urllib.request
from collections import defaultdict
from pathlib import Path

import numpy as np

import sim_capacity as harness  # its closed-loop client and /proc readers
from servelab.sim import read_truth

SERVE = (
    "import sys\n"
    "from servelab.sim import serve, SimConfig\n"
    "serve(SimConfig.model_validate_json(sys.argv[1]), on_ready=lambda u: print(u, flush=True))\n"
)


def _client_proc(
    url: str, streams: int, max_tokens: int, duration_s: float, out: multiprocessing.Queue
) -> None:
    import uvloop

    out.put(uvloop.run(_client(url, streams, max_tokens, duration_s)))


async def _client(url: str, streams: int, max_tokens: int, duration_s: float) -> int:
    """Closed loop on `streams` connections; stream i asks for max_tokens/2 + i % max_tokens
    tokens (max_tokens on average), so that after the first wave requests end and arrive a
    few per step, not all in one step as equal lengths would keep them."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + duration_s
    futures = []
    for index in range(streams):
        body = json.dumps(harness._payload(max_tokens // 2 + index % max_tokens)).encode()
        request = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        done: asyncio.Future[int] = loop.create_future()
        await loop.create_connection(
            lambda r=request, d=done: harness._RawStream(r, deadline, d), host, port
        )
        futures.append(done)
    return sum(await asyncio.gather(*futures))


def _window(record: Path, t_first: int, t_last: int) -> tuple[np.ndarray, np.ndarray]:
    """Lags (ms) of the chunks sent in the window, and of each step's first chunk."""
    chunk_lags: list[int] = []
    first_by_step: dict[int, int] = defaultdict(lambda: 1 << 62)
    for rec in read_truth(record):
        for sent, lag in zip(rec.chunk_sent_ns, rec.chunk_lag_ns, strict=True):
            if t_first <= sent <= t_last:
                chunk_lags.append(lag)
                due = sent - lag  # the planned end of the step that produced it
                first_by_step[due] = min(first_by_step[due], lag)
    as_ms = lambda lags: np.asarray(lags, dtype=np.float64) / 1e6  # noqa: E731
    return as_ms(chunk_lags), as_ms(list(first_by_step.values()))


def _quantiles(prefix: str, lags_ms: np.ndarray) -> dict[str, float]:
    return {
        f"{prefix}_p50_ms": round(float(np.percentile(lags_ms, 50)), 3),
        f"{prefix}_p99_ms": round(float(np.percentile(lags_ms, 99)), 3),
        f"{prefix}_max_ms": round(float(lags_ms.max()), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1024)
    parser.add_argument("--tok-s", type=float, default=20_000.0, help="asked output tok/s")
    parser.add_argument("--per-seq-ms", type=float, default=0.02)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--warmup-s", type=float, default=7.0)
    args = parser.parse_args()

    step_ms = args.streams * 1000 / args.tok_s
    base_ms = step_ms - args.per_seq_ms * args.streams
    if base_ms < 0:
        parser.error(f"--per-seq-ms too large: {args.streams} of them exceed a {step_ms} ms step")
    record = Path(tempfile.mkdtemp()) / "truth.jsonl"
    config = {
        "port": 0,
        "profile": "linear",
        "step_base_ms": base_ms,
        "step_per_seq_ms": args.per_seq_ms,
        "prefill_per_token_ms": 0.0,
        "record_path": str(record),
    }
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE, json.dumps(config)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        pids = harness._process_tree(server.pid)
        out: multiprocessing.Queue = multiprocessing.Queue()
        client = multiprocessing.Process(
            target=_client_proc, args=(url, args.streams, args.max_tokens, args.duration_s, out)
        )
        client.start()
        time.sleep(args.warmup_s)
        t_first, cpu_first = time.perf_counter_ns(), harness._cpu_s(pids)
        time.sleep(args.duration_s - args.warmup_s - 1.0)
        t_last, cpu_last = time.perf_counter_ns(), harness._cpu_s(pids)
        with urllib.request.urlopen(f"{url}/sim/stats") as resp:
            stats = json.load(resp)
        completed = out.get()
        client.join()
    finally:
        server.terminate()
        server.wait()
    window_s = (t_last - t_first) / 1e9
    chunk_lags, step_lags = _window(record, t_first, t_last)
    measured = len(chunk_lags) / window_s
    print(
        json.dumps(
            {
                "streams": args.streams,
                "max_tokens": args.max_tokens,
                "step_ms": round(step_ms, 3),
                "asked_tok_s": round(args.tok_s),
                "measured_tok_s": round(measured),
                "ratio": round(measured / args.tok_s, 4),
                "window_s": round(window_s, 1),
                "steps_in_window": len(step_lags),
                **_quantiles("step_lag", step_lags),
                **_quantiles("chunk_lag", chunk_lags),
                "server_step_lag_p50_ms": stats["step_lag_p50_ms"],
                "server_step_lag_p99_ms": stats["step_lag_p99_ms"],
                "server_step_lag_max_ms": stats["step_lag_max_ms"],
                "server_cpu_pct": round(100 * (cpu_last - cpu_first) / window_s),
                "requests_completed": completed,
                "load_avg_1m": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
