"""A level with a trace's arrivals: open loop at those times, dealt round-robin to workers."""

from __future__ import annotations

import orjson
import pytest

from servelab.bench import runner
from servelab.bench.endpoint import EndpointConfig, RequestItem
from servelab.bench.load import LevelSpec, LoadMode
from servelab.bench.metrics import compute_level

MS = 1_000_000
S = 1_000_000_000
GOOD = [
    b"data: "
    + orjson.dumps({"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": "stop"}]})
    + b"\n\n",
    b"data: [DONE]\n\n",
]


def _level(arrivals_ns: tuple[int, ...], *, rate: float = 1.0) -> LevelSpec:
    return LevelSpec(
        index=0,
        mode=LoadMode.REQUEST_RATE,
        value=rate,
        num_requests=None,
        duration_s=None,
        warmup=0,
        arrivals_ns=arrivals_ns,
    )


def test_a_trace_level_is_open_loop_without_a_gamma_shape():
    level = _level((0, S), rate=1.0)
    assert level.gamma_shape is None and level.rate == 1.0
    assert level.label == "trace replay, mean 1/s"
    drawn = LevelSpec(0, LoadMode.REQUEST_RATE, 4.0, 10, None, 0, burstiness=0.5)
    assert drawn.gamma_shape == 0.5
    with pytest.raises(ValueError, match="open loop"):
        LevelSpec(0, LoadMode.CONCURRENCY, 4.0, 10, None, 0, arrivals_ns=(0,))


def test_phases_carry_the_arrivals_round_robin():
    arrivals = (0, 0, 5 * MS, 9 * MS, 9 * MS)
    items = [RequestItem(prompt=f"p{i}", max_tokens=1) for i in range(5)]
    phases = runner._measured_phases(_level(arrivals), items, 2, seed=0)
    assert [[i for i, _ in p.items] for p in phases] == [[0, 2, 4], [1, 3]]
    assert [p.offsets_ns for p in phases] == [[0, 5 * MS, 9 * MS], [0, 9 * MS]]
    assert [item.prompt for _, item in phases[1].items] == ["p1", "p3"]


def test_workers_follow_the_busiest_second_not_the_mean(monkeypatch):
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 16)
    burst = tuple([0] * 130 + [100 * S])  # 131 requests over 100 s, 130 in the first second
    assert runner.default_workers(_level(burst, rate=1.3)) == 3
    assert runner.default_workers(_level((0, S, 2 * S), rate=1.0)) == 1


def test_requests_leave_at_their_planned_times_and_the_summary_says_how_late(canned_server):
    canned_server.replies = [GOOD]
    arrivals = (0, 0, 40 * MS, 80 * MS, 80 * MS, 150 * MS)
    level = _level(arrivals, rate=5 / 0.15)
    outcome = runner.run_level(
        level,
        endpoint=EndpointConfig(base_url=canned_server.url, model="m"),
        items=[RequestItem(prompt=f"p{i}", max_tokens=1) for i in range(len(arrivals))],
        warmup_items=[],
        workers=2,
        seed=0,
        on_records=lambda _: None,
        on_event=lambda _: None,
    )
    records = sorted(outcome.records, key=lambda r: r.index)
    assert [r.worker for r in records] == [0, 1, 0, 1, 0, 1]
    start = records[0].t_scheduled_ns
    assert tuple(r.t_scheduled_ns - start for r in records) == arrivals
    lags_ns = [max(r.t_send_ns - r.t_scheduled_ns - r.connect_ns, 0) for r in records]
    summary = compute_level(outcome.records, level=level, workers=outcome.workers)
    assert summary.burstiness is None and summary.request_rate == pytest.approx(5 / 0.15)
    assert summary.client.max_schedule_lag_ms == pytest.approx(max(lags_ns) / MS)
    assert summary.completed == len(arrivals)
