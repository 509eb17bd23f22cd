"""The client's measurements against the simulator's own send times (the ground truth).

Both sides stamp CLOCK_MONOTONIC, so each request's client stamps and server stamps lie
on one axis. The truth of a request's TTFT is the server's first-chunk send time minus
the client's t_send: time spent on the wire, in the server's accept queue and generating,
none of it the client's. Its TPOT truth is the server's send times of the first and last
chunks. At concurrency 1 the server is idle, so there the client's TTFT must also match
the server's own (first chunk sent minus request received), which checks that t_send is
stamped when the request really leaves.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from servelab.bench.client import request_id
from servelab.bench.session import BenchConfig, run_bench
from servelab.bench.workload import WorkloadSpec
from servelab.sim import read_truth

pytestmark = pytest.mark.timing

OUTPUT_TOKENS = 32


@pytest.mark.parametrize(("concurrency", "requests"), [(1, 8), (64, 128)])
def test_ttft_and_tpot_match_the_server_truth(start_sim, tmp_path: Path, concurrency, requests):
    truth_path = tmp_path / "truth.jsonl"
    sim = start_sim(ttft_ms=50, itl_ms=20, record=str(truth_path))
    config = BenchConfig(
        url=sim.url,
        levels=[concurrency],
        num_requests=requests,
        warmup=0,
        workload=WorkloadSpec(input_len=64, output_len=OUTPUT_TOKENS),
        out=tmp_path / "run",
    )
    level = run_bench(config).summary.levels[0]
    sim.stop()
    truth = {t.request_id: t for t in read_truth(truth_path)}
    records = [
        json.loads(line) for line in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()
    ]
    ttft_true, ttft_server, tpot_true = [], [], []
    for r in records:
        t = truth[request_id(r["level"], r["index"], warmup=r["warmup"])]
        assert len(t.chunk_sent_ns) == len(r["chunk_offsets_ns"]) == OUTPUT_TOKENS
        assert r["t_send_ns"] <= t.t_recv_ns  # stamped before the server saw it
        ttft_true.append((t.chunk_sent_ns[0] - r["t_send_ns"]) / 1e6)
        ttft_server.append((t.chunk_sent_ns[0] - t.t_recv_ns) / 1e6)
        tpot_true.append((t.chunk_sent_ns[-1] - t.chunk_sent_ns[0]) / 1e6 / (OUTPUT_TOKENS - 1))
    assert level.completed == requests
    assert level.mean_ttft_ms == pytest.approx(np.mean(ttft_true), abs=5.0)
    assert level.mean_tpot_ms == pytest.approx(np.mean(tpot_true), rel=0.05)
    assert level.mean_tpot_ms == pytest.approx(20, rel=0.05)
    if concurrency == 1:
        assert level.mean_ttft_ms == pytest.approx(np.mean(ttft_server), abs=5.0)
