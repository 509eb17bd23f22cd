"""Every metric definition of docs/METRICS.md on hand-computed request traces."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.bench.load import LevelSpec, LoadMode
from servelab.bench.metrics import WorkerStats, compute_level, itl_ns
from servelab.bench.records import ErrorKind, OutputTokenSource, RequestRecord

MS = 1_000_000
BASE = 10_000 * MS


def record(
    index: int,
    send_ms: float,
    chunks_ms: list[float],
    *,
    tokens: int | None = None,
    chunk_tokens: list[int] | None = None,
    end_ms: float | None = None,
    ok: bool = True,
    error_kind: ErrorKind | None = None,
    warmup: bool = False,
    source: OutputTokenSource = OutputTokenSource.USAGE,
    prompt_tokens: int | None = 10,
    scheduled_ms: float | None = None,
) -> RequestRecord:
    send = BASE + int(send_ms * MS)
    return RequestRecord(
        index=index,
        level=0,
        warmup=warmup,
        worker=0,
        t_send_ns=send,
        t_scheduled_ns=BASE + int((send_ms if scheduled_ms is None else scheduled_ms) * MS),
        t_end_ns=BASE + int((end_ms if end_ms is not None else send_ms + chunks_ms[-1]) * MS),
        ok=ok,
        max_tokens=tokens or 0,
        input_tokens_target=10,
        chunk_offsets_ns=[int(c * MS) for c in chunks_ms],
        chunk_tokens=chunk_tokens,
        output_tokens=tokens if tokens is not None else len(chunks_ms),
        output_token_source=source,
        prompt_tokens=prompt_tokens,
        error_kind=error_kind,
    )


LEVEL = LevelSpec(
    index=0, mode=LoadMode.CONCURRENCY, value=2, num_requests=2, duration_s=None, warmup=0
)
WORKERS = [WorkerStats(worker=0, loop_lag_p99_ns=0, loop_lag_max_ns=0, cpu_s=0.1, wall_s=1.0)]


def test_single_request_ttft_tpot_itl_e2e():
    r = record(0, 0, [100, 120, 140])
    s = compute_level([r], level=LEVEL, workers=WORKERS)
    assert s.mean_ttft_ms == pytest.approx(100)
    assert s.mean_e2e_latency_ms == pytest.approx(140)
    assert s.mean_tpot_ms == pytest.approx(20)
    assert s.mean_itl_ms == pytest.approx(20)
    assert s.completed == 1 and s.failed == 0
    assert s.duration == pytest.approx(0.140)
    assert s.output_throughput == pytest.approx(3 / 0.140)


def test_multi_token_chunk_counts_its_gap_per_token():
    r = record(0, 0, [50, 90, 100], tokens=5, chunk_tokens=[1, 3, 1])
    gaps = [(g / MS, k) for g, k in itl_ns(r)]
    assert gaps == [(pytest.approx(40 / 3), 3), (pytest.approx(10), 1)]
    s = compute_level([r], level=LEVEL, workers=WORKERS)
    assert s.mean_tpot_ms == pytest.approx((100 - 50) / 4)
    assert s.mean_itl_ms == pytest.approx((40 + 10) / 4)
    assert s.max_output_tokens_per_s == 5


def test_chunk_without_tokens_carries_its_gap_forward():
    r = record(0, 0, [10, 20, 40], tokens=2, chunk_tokens=[1, 0, 1])
    assert [(g / MS, k) for g, k in itl_ns(r)] == [(pytest.approx(30), 1)]


def test_throughputs_duration_and_littles_law():
    a = record(0, 0, [100, 200, 300])  # E2E 300 ms
    b = record(1, 100, [100, 200, 400], prompt_tokens=30)  # sent at 100, E2E 400, ends at 500
    s = compute_level([a, b], level=LEVEL, workers=WORKERS)
    assert s.duration == pytest.approx(0.5)
    assert s.total_input_tokens == 40
    assert s.total_output_tokens == 6
    assert s.request_throughput == pytest.approx(2 / 0.5)
    assert s.input_throughput == pytest.approx(40 / 0.5)
    assert s.total_throughput == pytest.approx(46 / 0.5)
    assert s.concurrency == pytest.approx((0.3 + 0.4) / 0.5)
    assert s.max_concurrent_requests == 2
    assert s.median_ttft_ms == pytest.approx(100)
    assert s.p99_e2e_latency_ms == pytest.approx(300 + 0.99 * 100)


def test_max_concurrent_is_exact_and_back_to_back_do_not_overlap():
    a = record(0, 0, [100])
    b = record(1, 100, [100])  # starts exactly when a ends
    c = record(2, 50, [100])
    s = compute_level([a, b, c], level=LEVEL, workers=WORKERS)
    assert s.max_concurrent_requests == 2


def test_peak_tokens_in_one_second_bucket():
    a = record(0, 0, [100, 900, 1100, 1200, 1300], tokens=5)
    s = compute_level([a], level=LEVEL, workers=WORKERS)
    assert s.max_output_tokens_per_s == 3


def test_errors_and_cancelled_and_warmup():
    good = record(0, 0, [100, 200])
    bad = record(1, 0, [50], ok=False, error_kind=ErrorKind.DROPPED, end_ms=600)
    bad.error = "connection cut"
    cancelled = record(2, 0, [10], ok=False, error_kind=ErrorKind.CANCELLED, end_ms=5000)
    warm = record(3, -1000, [100, 200], warmup=True)
    s = compute_level([good, bad, cancelled, warm], level=LEVEL, workers=WORKERS)
    assert (s.completed, s.failed, s.cancelled, s.warmup_requests) == (1, 1, 1, 1)
    assert s.num_requests == 3
    assert s.errors == {"dropped": 1}
    assert s.error_examples == {"dropped": "connection cut"}
    assert s.duration == pytest.approx(0.6)  # the failed request's end counts; cancelled does not


def test_goodput_counts_errors_in_the_denominator():
    fast = record(0, 0, [50, 60, 70])  # ttft 50, tpot 10
    slow = record(1, 0, [300, 310, 320])  # ttft 300
    failed = record(2, 0, [10], ok=False, error_kind=ErrorKind.HTTP, end_ms=320)
    s = compute_level(
        [fast, slow, failed], level=LEVEL, workers=WORKERS, slo_ms={"ttft": 200, "tpot": 15}
    )
    assert s.good_fraction == pytest.approx(1 / 3)
    assert s.request_goodput == pytest.approx(1 / 0.32)


def test_missing_usage_is_flagged_estimated():
    r = record(0, 0, [10, 20], source=OutputTokenSource.CHUNKS, prompt_tokens=None)
    s = compute_level([r], level=LEVEL, workers=WORKERS)
    assert s.output_tokens_estimated
    assert s.input_token_source == "workload"
    assert s.total_input_tokens == 10


def test_single_stream_only_at_concurrency_one():
    r = record(0, 0, [100, 150, 200, 250])  # 4 tokens in 250 ms
    one = LevelSpec(
        index=0, mode=LoadMode.CONCURRENCY, value=1, num_requests=1, duration_s=None, warmup=0
    )
    assert compute_level([r], level=one, workers=WORKERS).single_stream_tok_s == pytest.approx(16)
    assert compute_level([r], level=LEVEL, workers=WORKERS).single_stream_tok_s is None


def test_single_token_output_has_no_tpot():
    r = record(0, 0, [100])
    s = compute_level([r], level=LEVEL, workers=WORKERS)
    assert s.mean_tpot_ms is None and s.mean_itl_ms is None
    assert s.mean_ttft_ms == pytest.approx(100)


def test_non_streamed_e2e_ends_with_the_body():
    r = record(0, 0, [1], end_ms=250)
    r.chunk_offsets_ns = []
    s = compute_level([r], level=LEVEL, workers=WORKERS)
    assert s.mean_e2e_latency_ms == pytest.approx(250)
    assert s.mean_ttft_ms is None


def workers(p99_lag_ms: float = 0, max_lag_ms: float = 0, cpu_s: float = 0.1) -> list:
    return [
        WorkerStats(
            worker=0,
            loop_lag_p99_ns=int(p99_lag_ms * MS),
            loop_lag_max_ns=int(max_lag_ms * MS),
            cpu_s=cpu_s,
            wall_s=1.0,
        )
    ]


def streams(itl_ms: float, n: int = 4, lag_ms: float = 0) -> list[RequestRecord]:
    """n requests of 5 chunks itl_ms apart, each sent lag_ms after it was due."""
    return [
        record(i, 1000 * i + lag_ms, [50 + itl_ms * k for k in range(5)], scheduled_ms=1000 * i)
        for i in range(n)
    ]


OPEN = LevelSpec(
    index=0, mode=LoadMode.REQUEST_RATE, value=100, num_requests=4, duration_s=None, warmup=0
)


def test_loop_lag_near_the_itl_is_client_bound():
    s = compute_level(streams(itl_ms=5), level=LEVEL, workers=workers(4.9, 4.9))
    assert s.client.client_bound
    assert s.client.p99_loop_lag_ms == pytest.approx(4.9)
    assert "p99 loop lag 4.9 ms > 10% of median ITL 5.0 ms" in (s.client.client_bound_reason or "")


def test_lag_small_against_the_latencies_is_not_client_bound():
    s = compute_level(streams(itl_ms=100, lag_ms=6), level=LEVEL, workers=workers(6, 8))
    assert not s.client.client_bound and s.client.client_bound_reason is None
    assert s.client.max_loop_lag_ms == pytest.approx(8)
    assert s.client.p99_schedule_lag_ms == pytest.approx(6)


def test_open_loop_schedule_lag_is_judged_against_the_arrival_gap():
    rate_10 = dataclasses.replace(OPEN, value=10)  # gap 100 ms
    s = compute_level(streams(itl_ms=20, lag_ms=6), level=rate_10, workers=workers())
    assert not s.client.client_bound
    s = compute_level(streams(itl_ms=20, lag_ms=2), level=OPEN, workers=workers())  # gap 10 ms
    assert s.client.client_bound
    reason = s.client.client_bound_reason or ""
    assert "p99 schedule lag 2.0 ms > 10% of mean inter-arrival gap 10.0 ms" in reason


def test_one_lag_longer_than_the_itl_is_client_bound():
    s = compute_level(streams(itl_ms=20), level=LEVEL, workers=workers(0.5, 30))
    assert s.client.client_bound
    assert "max loop lag 30.0 ms > median ITL 20.0 ms" in (s.client.client_bound_reason or "")


def test_a_closed_loop_send_lag_is_judged_against_the_request_it_delays():
    # Requests of 5 chunks 10 ms apart after 50 ms: E2E 90 ms. A closed-loop slot sent
    # 12 ms late (longer than an ITL) blurs no latency, all timed from the send; it costs
    # 12 / 90 of one request's offered load, under the 10% share only at p99 over 101.
    late = [*streams(itl_ms=10, n=100), record(100, 12, [10, 20], scheduled_ms=0)]
    s = compute_level(late, level=LEVEL, workers=workers())
    assert s.client.max_schedule_lag_ms == 12.0 and not s.client.client_bound
    # 120 ms late: longer than a whole request, the slot sat idle longer than it served
    later = [*streams(itl_ms=10, n=100), record(100, 120, [10, 20], scheduled_ms=0)]
    s = compute_level(later, level=LEVEL, workers=workers())
    assert "max schedule lag 120.0 ms > median E2E latency 90.0 ms" in (
        s.client.client_bound_reason or ""
    )


def test_a_busy_worker_is_client_bound():
    s = compute_level(streams(itl_ms=20), level=LEVEL, workers=workers(cpu_s=0.95))
    assert s.client.client_bound and s.client.max_cpu_pct == pytest.approx(95)
    assert "worker CPU 95% of a core" in (s.client.client_bound_reason or "")
    assert not compute_level(streams(itl_ms=20), level=LEVEL, workers=workers()).client.client_bound


def test_unknown_tpot_fails_a_tpot_slo_like_unknown_ttft_fails_a_ttft_slo():
    streamed = record(0, 0, [50, 60, 70])  # ttft 50, tpot 10
    one_token = record(1, 0, [50])  # streamed, but one token: no TPOT
    body = record(2, 0, [1], end_ms=70)  # non-streamed: neither TTFT nor TPOT
    body.chunk_offsets_ns = []
    records = [streamed, one_token, body]
    s = compute_level(records, level=LEVEL, workers=WORKERS, slo_ms={"tpot": 15})
    assert s.good_fraction == pytest.approx(1 / 3)
    s = compute_level([streamed, body], level=LEVEL, workers=WORKERS, slo_ms={"e2e": 100})
    assert s.good_fraction == pytest.approx(1)


def test_good_fraction_is_null_when_nothing_was_attempted():
    cancelled = record(0, 0, [10], ok=False, error_kind=ErrorKind.CANCELLED)
    s = compute_level([cancelled], level=LEVEL, workers=WORKERS, slo_ms={"ttft": 200})
    assert s.good_fraction is None
    assert s.request_goodput == 0


def test_peak_bucket_starts_at_the_levels_first_send_not_the_first_completed():
    failed = record(0, 0, [10], ok=False, error_kind=ErrorKind.HTTP, end_ms=10)
    # sent at 500 ms, chunks at 1.0-1.9 s of the level: one bucket from the level's start,
    # split 5 + 5 over two buckets counted from this request's own send
    done = record(1, 500, [500 + 100 * i for i in range(10)])
    s = compute_level([failed, done], level=LEVEL, workers=WORKERS)
    assert s.max_output_tokens_per_s == 10


def test_itl_statistics_weigh_multi_token_chunks_without_expanding_them():
    """A server claiming 10^12 tokens over three chunks: the statistics, in bounded memory."""
    r = record(0, 0, [100, 110, 130], tokens=10**12 + 2, chunk_tokens=[1, 1, 10**12])
    s = compute_level([r], level=LEVEL, workers=WORKERS)
    assert s.median_itl_ms == pytest.approx(20 / 10**12)
    assert s.p99_itl_ms == pytest.approx(20 / 10**12)


def test_weighted_itl_statistics_match_the_expanded_definition():
    r = record(0, 0, [50, 90, 100, 130, 131], tokens=9, chunk_tokens=[1, 3, 1, 2, 2])
    gaps_ms = [40 / 3] * 3 + [10] + [15] * 2 + [0.5] * 2
    s = compute_level([r], level=LEVEL, workers=WORKERS)
    expanded = np.asarray(gaps_ms)
    assert s.mean_itl_ms == pytest.approx(expanded.mean())
    assert s.std_itl_ms == pytest.approx(expanded.std())
    assert s.median_itl_ms == pytest.approx(np.median(expanded))
    for q in (90, 95, 99):
        assert getattr(s, f"p{q}_itl_ms") == pytest.approx(np.percentile(expanded, q))


@settings(max_examples=200, deadline=None)
@given(
    gaps=st.lists(
        st.tuples(st.integers(min_value=0, max_value=10**8), st.integers(min_value=1, max_value=5)),
        min_size=1,
        max_size=30,
    )
)
def test_itl_statistics_equal_numpy_on_the_expanded_gaps(gaps: list[tuple[int, int]]):
    offsets = [0]
    for gap, _ in gaps:
        offsets.append(offsets[-1] + gap)
    tokens = [1] + [k for _, k in gaps]
    r = record(0, 0, [o / MS for o in offsets], tokens=sum(tokens), chunk_tokens=tokens)
    r.chunk_offsets_ns = offsets
    expanded = np.asarray([gap / k / MS for gap, k in gaps for _ in range(k)])
    s = compute_level([r], level=LEVEL, workers=WORKERS)
    assert s.mean_itl_ms == pytest.approx(expanded.mean(), abs=1e-9)
    assert s.std_itl_ms == pytest.approx(expanded.std(), abs=1e-6)
    assert s.median_itl_ms == pytest.approx(np.median(expanded), abs=1e-9)
    for q in (90, 95, 99):
        assert getattr(s, f"p{q}_itl_ms") == pytest.approx(np.percentile(expanded, q), abs=1e-9)
