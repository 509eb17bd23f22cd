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
from servelab.sim.truth import Fault, Outcome, TruthRecord

OUTPUT_TOKENS = 32


@pytest.mark.timing
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
    truths = truth_of(records, truth)
    assert level.completed == requests
    assert_matches_the_truth(level.mean_ttft_ms, level.mean_tpot_ms, truths, idle=concurrency == 1)


Truths = tuple[list[float], list[float], list[float]]


def truth_of(records: list[dict], truth: dict[str, TruthRecord]) -> Truths:
    """Per request, from the server's stamps: true TTFT, the server's own TTFT, true TPOT."""
    ttft_true, ttft_server, tpot_true = [], [], []
    for r in records:
        t = truth[request_id(r["level"], r["index"], warmup=r["warmup"])]
        assert len(t.chunk_sent_ns) == len(r["chunk_offsets_ns"]) == OUTPUT_TOKENS
        assert r["t_send_ns"] <= t.t_recv_ns  # stamped before the server saw it
        ttft_true.append((t.chunk_sent_ns[0] - r["t_send_ns"]) / 1e6)
        ttft_server.append((t.chunk_sent_ns[0] - t.t_recv_ns) / 1e6)
        tpot_true.append((t.chunk_sent_ns[-1] - t.chunk_sent_ns[0]) / 1e6 / (OUTPUT_TOKENS - 1))
    return ttft_true, ttft_server, tpot_true


def assert_matches_the_truth(
    mean_ttft_ms: float | None, mean_tpot_ms: float | None, truths: Truths, *, idle: bool
) -> None:
    """The client's means against the truth's (and, on an idle server, the server's TTFT)."""
    ttft_true, ttft_server, tpot_true = truths
    assert mean_ttft_ms == pytest.approx(np.mean(ttft_true), abs=5.0)
    assert mean_tpot_ms == pytest.approx(np.mean(tpot_true), rel=0.05)
    assert mean_tpot_ms == pytest.approx(20, rel=0.05)
    if idle:
        assert mean_ttft_ms == pytest.approx(np.mean(ttft_server), abs=5.0)


MS = 1_000_000


def planted(*, wire_ms: float = 0.2, itl_ms: float = 20.0, n: int = 8):
    """`n` requests to a server with a 50 ms TTFT and `itl_ms` steps, sent `wire_ms` before
    the server saw them: client rows and truth records as the test reads them."""
    records, truth = [], {}
    for index in range(n):
        t_send = index * 10_000 * MS
        t_recv = t_send + round(wire_ms * MS)
        sent = [t_recv + 50 * MS + round(k * itl_ms * MS) for k in range(OUTPUT_TOKENS)]
        rid = request_id(0, index, warmup=False)
        records.append(
            {"level": 0, "index": index, "warmup": False, "t_send_ns": t_send}
            | {"chunk_offsets_ns": [s - t_send for s in sent]}
        )
        truth[rid] = TruthRecord(
            request_id=rid,
            endpoint="/v1/chat/completions",
            stream=True,
            status=200,
            fault=Fault.NONE,
            outcome=Outcome.COMPLETE,
            t_recv_ns=t_recv,
            t_done_ns=sent[-1],
            prompt_tokens=64,
            completion_tokens=OUTPUT_TOKENS,
            tokens_per_chunk=1,
            chunk_sent_ns=sent,
        )
    return records, truth


def test_a_client_within_the_margins_matches_the_truth():
    """The controls' other half: off by half of each margin, the client passes."""
    truths = truth_of(*planted())  # true TTFT 50.2 ms, server's 50 ms, TPOT 20 ms
    assert_matches_the_truth(50.2 + 2.5, 20 * 1.025, truths, idle=True)
    assert_matches_the_truth(50.2 - 2.5, 20 * 0.975, truths, idle=False)


@pytest.mark.parametrize(
    ("wire_ms", "itl_ms", "client_ttft_ms", "client_tpot_ms", "idle"),
    [
        # each breach is 1.5x one margin and within the others, so loosening that margin by
        # 2x (or dropping its check) lets the breach through and this control fails.
        # TTFT 7.5 ms off the truth (5 ms margin):
        pytest.param(0.2, 20.0, 50.2 + 7.5, 20.0, False, id="ttft-7.5-ms-over-the-truth"),
        # TPOT 1.6 ms (7.4%) under the truth's 21.6 ms steps (5% margin), yet on the nominal 20:
        pytest.param(0.2, 21.6, 50.2, 20.0, False, id="tpot-7.4%-off-the-truth"),
        # TPOT that is the truth's but 7.5% off the server's nominal 20 ms:
        pytest.param(0.2, 21.5, 50.2, 21.5, False, id="tpot-7.5%-off-the-nominal"),
        # on an idle server, t_send stamped 7.5 ms before the request left: the client's
        # TTFT equals the truth's yet is 7.5 ms over the server's own
        pytest.param(7.5, 20.0, 50 + 7.5, 20.0, True, id="t_send-stamped-7.5-ms-early"),
    ],
)
def test_a_client_off_the_truth_by_more_than_a_margin_is_caught(
    wire_ms, itl_ms, client_ttft_ms, client_tpot_ms, idle
):
    """The negative control of the comparison of client against truth."""
    truths = truth_of(*planted(wire_ms=wire_ms, itl_ms=itl_ms))
    with pytest.raises(AssertionError):
        assert_matches_the_truth(client_ttft_ms, client_tpot_ms, truths, idle=idle)


def test_a_send_stamped_after_the_server_received_it_is_caught():
    """Control of the stamp order: a t_send 1 µs after the server's t_recv is refused."""
    records, truth = planted()
    records[3]["t_send_ns"] = truth[request_id(0, 3, warmup=False)].t_recv_ns + 1_000
    with pytest.raises(AssertionError):
        truth_of(records, truth)
