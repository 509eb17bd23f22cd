"""A replay that steps through decode-only stretches at once must be the replay that plans
every step: the same times for every request and token, the same totals, bit for bit.

Drawn over every engine's policy (preempting or not, a decaying share or not), caps, KV
pools small enough to refuse and preempt, step budgets, closed and open loops, sessions
and levels sent for a set time. Some outputs are long: where few requests run, SGLang's
share decays faster than their context grows, and a refused request may be admitted in
what would otherwise be a stretch."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.sim.batching import Batcher
from servelab.sim.policy import ENGINE_POLICIES
from servelab.sim.stepcost import LinearStepCost
from servelab.twin.records import LevelLoad
from servelab.twin.replay import EngineLimits, ReplayRequest, replay_level

COST = LinearStepCost(
    base_ms=4.0, per_seq_ms=0.3, per_context_token_ms=0.002, per_prefill_token_ms=0.05
)


@st.composite
def levels(draw: st.DrawFn) -> tuple[LevelLoad, list[dict[str, Any]], EngineLimits]:
    count = draw(st.integers(1, 24))
    sessions = draw(st.booleans())
    rows: list[dict[str, Any]] = []
    for index in range(count):
        rows.append(
            {
                "index": index,
                "prompt_tokens": draw(st.integers(0, 300)),
                "output_tokens": draw(st.integers(1, 90) | st.integers(300, 900)),
                "send_s": draw(st.floats(0.0, 2.0)),
                "session": index % 3 if sessions else None,
                "turn": index // 3 if sessions else None,
                "think_s": draw(st.floats(0.0, 0.3)) if sessions else 0.0,
                "token_s": [] if draw(st.booleans()) else None,
            }
        )
    closed = draw(st.booleans())
    load = LevelLoad(
        0,
        "concurrency" if closed else "request_rate",
        float(draw(st.integers(1, 16))) if closed else 4.0,
        duration_s=draw(st.none() | st.floats(0.5, 4.0)),
    )
    limits = EngineLimits(
        policy=draw(st.sampled_from(sorted(ENGINE_POLICIES.values(), key=lambda p: p.name))),
        running_cap=draw(st.none() | st.integers(1, 12)),
        kv_capacity_tokens=draw(st.none() | st.integers(400, 3000)),
        batch_tokens=draw(st.none() | st.integers(8, 512)),
    )
    return load, rows, limits


def replayed(case: tuple[LevelLoad, list[dict[str, Any]], EngineLimits]) -> tuple[Any, ...]:
    load, rows, limits = case
    requests = [ReplayRequest(**row) for row in rows]
    result = replay_level(load, requests, step_cost=COST, limits=limits, overhead_s=0.003)
    every = [
        (r.index, r.sent_s, r.first_s, r.last_s, r.token_s, r.held, r.prefill_chunks)
        for r in result.requests
    ]
    totals = dataclasses.replace(result, requests=[])
    return every, totals


@contextlib.contextmanager
def every_step_planned() -> Iterator[None]:
    """Stretches turned off: the replay plans each step."""
    saved = Batcher.decode_stretch
    Batcher.decode_stretch = lambda self: ([], 0, 0)  # type: ignore[method-assign]
    try:
        yield
    finally:
        Batcher.decode_stretch = saved  # type: ignore[method-assign]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(levels())
def test_stretches_replay_exactly_as_every_step_planned(case) -> None:
    fast = replayed(case)
    with every_step_planned():
        slow = replayed(case)
    assert fast == slow


def test_a_closed_level_of_equal_answers_is_mostly_stretches() -> None:
    """The case stretches are for: in a closed loop most steps only decode."""
    requests = [ReplayRequest(i, 64, 128, send_s=0.0) for i in range(32)]
    calls = 0
    saved = Batcher.plan

    def counted(self: Batcher[Any]) -> Any:
        nonlocal calls
        calls += 1
        return saved(self)

    limits = EngineLimits(policy=ENGINE_POLICIES["vllm"], running_cap=8)
    try:
        Batcher.plan = counted  # type: ignore[method-assign]
        result = replay_level(
            LevelLoad(0, "concurrency", 16.0), requests, step_cost=COST, limits=limits
        )
    finally:
        Batcher.plan = saved  # type: ignore[method-assign]
    assert result.steps > 4 * 128
    assert calls < result.steps / 10, (calls, result.steps)


def test_a_request_refused_while_sglangs_share_decays_is_admitted_where_planning_admits_it():
    """One long answer runs; the next is refused for the share booked for its output,
    which SGLang lowers step by step: it is admitted part-way through, not when the
    first one leaves."""
    rows = [
        {"index": 0, "prompt_tokens": 100, "output_tokens": 900, "send_s": 0.0},
        {"index": 1, "prompt_tokens": 100, "output_tokens": 300, "send_s": 0.0},
    ]
    limits = EngineLimits(policy=ENGINE_POLICIES["sglang"], kv_capacity_tokens=1100)
    case = (LevelLoad(0, "concurrency", 2.0), rows, limits)
    fast = replayed(case)
    with every_step_planned():
        slow = replayed(case)
    assert fast == slow
    by_index = {row[0]: row for row in fast[0]}
    assert by_index[0][3] > by_index[1][2] > by_index[0][2], "admitted while the first ran"
