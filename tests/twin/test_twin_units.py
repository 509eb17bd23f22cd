"""The twin against an engine whose step cost is known: the batcher itself, run in virtual
time with a planted cost, its streams written as the client writes them.

The fit must find the planted terms within its own intervals where the run can tell them
apart, and the replay must give the levels back; a cost the run cannot see (the same
context in every step) must come out with a wide interval, not a confident wrong one.
"""

from __future__ import annotations

import pytest

from servelab.bench.results import LevelSummary
from servelab.sim.policy import EXACT_RESERVE, policy_for
from servelab.sim.stepcost import LinearStepCost
from servelab.twin import EngineLimits, TwinInputs, build_twin
from servelab.twin.model import slo_miss_share
from servelab.twin.records import LevelLoad
from servelab.twin.replay import ReplayRequest, replay_level
from tests.twin.planted import LIMITS, OVERHEAD_S, PLANTED, measured_run, planted_requests


@pytest.fixture(scope="module")
def planted_run() -> tuple[list[LevelSummary], list[dict]]:
    return measured_run((1, 4, 16))


def test_the_fit_finds_each_planted_term_within_its_interval(planted_run) -> None:
    levels, rows = planted_run
    twin = build_twin(TwinInputs(levels, rows, "sim", LIMITS, {}))
    assert twin.fit.source == "requests" and twin.fit.converged
    planted = {
        "base": PLANTED.base_ms,
        "per_seq": PLANTED.per_seq_ms,
        "per_context_token": PLANTED.per_context_token_ms,
        "per_prefill_token": PLANTED.per_prefill_token_ms,
        "prefill_step": PLANTED.prefill_step_ms,
    }
    for term in twin.terms:
        assert term.low is not None and term.high is not None
        assert term.low * 0.98 <= planted[term.name] <= term.high * 1.02, term
    assert twin.request_overhead_ms.value == pytest.approx(OVERHEAD_S * 1000, abs=0.5)


def test_the_replay_gives_every_level_back(planted_run) -> None:
    levels, rows = planted_run
    twin = build_twin(TwinInputs(levels, rows, "sim", LIMITS, {}))
    for level in twin.levels:
        for name in ("median_tpot_ms", "median_ttft_ms", "output_throughput"):
            assert level.metrics[name].error == pytest.approx(0.0, abs=0.03), (level.load, name)
        assert level.explained_share is not None and level.explained_share > 0.95
        assert level.decode_batch_replayed == pytest.approx(level.decode_batch_measured, rel=0.05)


def test_a_replay_without_the_cap_misses_the_queue_the_cap_made(planted_run) -> None:
    """The negative control: the limits matter, so a replay under the wrong ones must miss."""
    levels, rows = planted_run
    uncapped = EngineLimits(EXACT_RESERVE, running_cap=None, batch_tokens=512)
    twin = build_twin(TwinInputs(levels, rows, "sim", uncapped, {}))
    heaviest = twin.levels[-1]
    assert heaviest.metrics["median_ttft_ms"].error < -0.3


def test_a_term_the_run_cannot_separate_gets_a_wide_interval() -> None:
    """Every request the same size at one concurrency: per-request and per-context costs
    are the same column up to a factor, so the fit cannot split them."""
    levels, rows = measured_run((8,), prompt=(200, 201), output=(40, 41))
    twin = build_twin(TwinInputs(levels, rows, "sim", LIMITS, {}))
    separable, _ = measured_run((1, 4, 16))
    wide = build_twin(TwinInputs(separable, _, "sim", LIMITS, {}))
    seq = next(t for t in twin.terms if t.name == "per_seq")
    seq_separable = next(t for t in wide.terms if t.name == "per_seq")
    assert (seq.high - seq.low) > 3 * (seq_separable.high - seq_separable.low)
    assert twin.levels[0].metrics["median_tpot_ms"].error == pytest.approx(0.0, abs=0.03)


def test_a_run_without_requests_is_fitted_from_its_level_summaries(planted_run) -> None:
    levels, _ = planted_run
    twin = build_twin(TwinInputs(levels, [], "sim", LIMITS, {}))
    assert twin.fit.source == "level summaries"
    assert "no requests.jsonl" in twin.fit.notes[0]
    for level in twin.levels:
        assert level.metrics["median_tpot_ms"].error == pytest.approx(0.0, abs=0.15)


def test_the_replay_follows_the_engines_preemption_policy() -> None:
    """A cache too small for every output: vLLM's policy preempts and recomputes, so each
    request still gets all its tokens; the exact policy queues instead and never preempts."""
    cost = LinearStepCost(base_ms=5.0, per_seq_ms=0.1)
    for engine, preempts in (("vllm", True), ("sim", False)):
        requests = planted_requests(24, 1, prompt=(100, 101), output=(100, 101))
        limits = EngineLimits(policy_for(engine), kv_capacity_tokens=1200, batch_tokens=2048)
        replay = replay_level(
            LevelLoad(0, "concurrency", 12.0), requests, step_cost=cost, limits=limits
        )
        assert (replay.preemptions > 0) is preempts, engine
        assert all(len(r.token_s or []) == r.output_tokens for r in requests), engine


def test_open_loop_and_conversations_are_sent_as_recorded() -> None:
    cost = LinearStepCost(base_ms=10.0)
    open_loop = [ReplayRequest(i, 10, 5, send_s=0.5 * i) for i in range(4)]
    replay_level(LevelLoad(0, "request_rate", 2.0), open_loop, step_cost=cost, limits=LIMITS)
    assert [r.sent_s for r in open_loop] == [0.0, 0.5, 1.0, 1.5]
    turns = [
        ReplayRequest(0, 10, 5, send_s=0.0, session=7, turn=0),
        ReplayRequest(1, 20, 5, send_s=9.0, session=7, turn=1, think_s=0.25),
    ]
    replay_level(LevelLoad(0, "concurrency", 1.0), turns, step_cost=cost, limits=LIMITS)
    assert turns[1].sent_s == pytest.approx((turns[0].last_s or 0) + 0.25)


def _closed_level(count: int) -> list[ReplayRequest]:
    return [ReplayRequest(i, 40 + i, 10, send_s=0.0 if i < 2 else 0.3 * i) for i in range(count)]


def test_a_level_sent_for_a_set_time_sends_until_then_and_no_later() -> None:
    """Two streams for 1 s: each request takes ten 20 ms steps, so a slot sends one every
    0.2 s (the last at 0.8 s), whatever the run recorded: the six recorded, sent again in
    order, then the next ones' sizes from the start."""
    recorded = _closed_level(6)
    replay = replay_level(
        LevelLoad(0, "concurrency", 2.0, duration_s=1.0),
        recorded,
        step_cost=LinearStepCost(base_ms=20.0),
        limits=LIMITS,
    )
    sends = sorted(r.sent_s for r in replay.requests if r.sent_s is not None)
    assert sends == pytest.approx([0.0, 0.0, 0.2, 0.2, 0.4, 0.4, 0.6, 0.6, 0.8, 0.8])
    assert all(r.last_s is not None for r in replay.requests)
    again = replay.requests[len(recorded) :]
    assert [r.prompt_tokens for r in again] == [40, 41, 42, 43]
    assert all(r.sent_s is not None and r.sent_s >= 0.6 for r in again)


def test_a_slower_engine_sends_fewer_requests_in_the_set_time() -> None:
    """One request of ten 100 ms steps at a time, for 1.5 s: the second is sent at 1.0 s
    and the third, due at 2.0 s, never; without the time every recorded request is sent."""
    recorded = _closed_level(5)
    cost = LinearStepCost(base_ms=100.0)
    timed = replay_level(
        LevelLoad(0, "concurrency", 1.0, duration_s=1.5), recorded, step_cost=cost, limits=LIMITS
    )
    assert [r.sent_s for r in timed.requests] == pytest.approx([0.0, 1.0, None, None, None])
    assert slo_miss_share(timed, {"e2e": 5_000.0}) == pytest.approx(0.5 / 3)
    recorded = _closed_level(5)
    whole = replay_level(LevelLoad(0, "concurrency", 1.0), recorded, step_cost=cost, limits=LIMITS)
    assert len(whole.requests) == 5
    assert all(r.last_s is not None for r in whole.requests)
