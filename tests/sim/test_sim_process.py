"""`serve()` as the launcher runs it: a separate process that SIGTERM stops cleanly."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import aiohttp
import pytest

from servelab.sim import Outcome, read_truth

SERVE = """
import sys
from pathlib import Path
from servelab.sim import serve, SimConfig
config = SimConfig(port=0, ttft_ms=5, itl_ms=5, record_path=Path(sys.argv[1]))
serve(config, on_ready=lambda url: print(url, flush=True))
print("returned", flush=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_the_process_and_flushes_the_truth_log(tmp_path, chat, signum):
    path = tmp_path / "truth.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")

        async def scenario():
            async with aiohttp.ClientSession(base_url=url) as http:
                t_send = time.perf_counter_ns()
                async with http.post("/v1/chat/completions", json=chat(3)) as resp:
                    await resp.read()
                t_back = time.perf_counter_ns()
                # one more stream still running when the signal comes
                resp = await http.post("/v1/chat/completions", json=chat(10_000))
                await resp.content.readany()
                proc.send_signal(signum)
                with pytest.raises(aiohttp.ClientPayloadError):
                    await resp.read()
                return t_send, t_back

        t_send, t_back = asyncio.run(scenario())
        out, err = proc.communicate(timeout=5)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.strip() == "returned"
    assert "Traceback" not in err
    complete, stopped = read_truth(path)
    assert complete.outcome is Outcome.COMPLETE
    # stamps from the other process are on this process's clock (CLOCK_MONOTONIC)
    assert t_send < complete.t_recv_ns < complete.chunk_sent_ns[0] <= complete.t_done_ns < t_back
    assert stopped.outcome is Outcome.STOPPED


SERVE_WORKERS = """
import sys
from pathlib import Path
from servelab.sim import serve, SimConfig
config = SimConfig(port=0, ttft_ms=0, itl_ms=1, workers=2, record_path=Path(sys.argv[1]))
serve(config, on_ready=lambda url: print(url, flush=True))
"""


def test_workers_share_the_port_and_merge_their_truth_logs(tmp_path, chat):
    path = tmp_path / "truth.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE_WORKERS, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()

        async def one(index):
            # a connection each, so the kernel spreads them over the workers
            async with (
                aiohttp.ClientSession(base_url=url) as http,
                http.post(
                    "/v1/chat/completions", json=chat(4), headers={"X-Request-Id": f"r{index}"}
                ) as resp,
            ):
                return await resp.read()

        async def scenario():
            bodies = await asyncio.gather(*(one(i) for i in range(24)))
            async with aiohttp.ClientSession(base_url=url) as http:
                workers = set()
                for _ in range(24):
                    async with http.get("/sim/stats", headers={"Connection": "close"}) as resp:
                        workers.add((await resp.json())["worker"])
            return bodies, workers

        bodies, workers = asyncio.run(scenario())
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert all(body.count(b'"content":" tok"') == 4 for body in bodies)
    assert workers == {0, 1}
    records = read_truth(path)
    assert sorted(r.request_id for r in records) == sorted(f"r{i}" for i in range(24))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["truth.jsonl"]
