"""The continuous-batching scheduler on a fake clock: its invariants, step by step."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from servelab.sim import Batcher, EngineRequest, LinearStepCost, Step
from servelab.sim.batching import Phase

BASE_MS, PER_SEQ_MS, PER_PREFILL_TOKEN_MS = 10.0, 0.5, 0.01
COST = LinearStepCost(
    base_ms=BASE_MS, per_seq_ms=PER_SEQ_MS, per_prefill_token_ms=PER_PREFILL_TOKEN_MS
)


@dataclass
class Run:
    """What a fake-clock run did: each step with its start time, and when tokens came."""

    steps: list[tuple[float, Step[int]]] = field(default_factory=list)
    admitted: list[int] = field(default_factory=list)
    first_token_s: dict[int, float] = field(default_factory=dict)
    finished_s: dict[int, float] = field(default_factory=dict)


def _batcher(**overrides) -> Batcher[int]:
    settings = {"step_cost": COST, "chunked_prefill_size": 512} | overrides
    return Batcher(**settings)


def _check(batcher: Batcher[int], step: Step[int]) -> None:
    """The invariants that must hold whenever a step has been planned."""
    if batcher.max_running is not None:
        assert len(batcher.running) <= batcher.max_running
    if batcher.kv_capacity_tokens is not None:
        assert batcher.kv_reserved_tokens <= batcher.kv_capacity_tokens
    assert batcher.kv_used_tokens == sum(r.kv_tokens for r in batcher.running)
    assert batcher.kv_used_tokens <= batcher.kv_reserved_tokens
    assert step.prefill_tokens <= batcher.chunked_prefill_size
    part_way = [r for r, chunk in step.prefill if r.prefilled + chunk < r.prompt_tokens]
    assert len(part_way) <= 1, "at most one prompt is part-way through its prefill"
    decoding = {id(r) for r in step.decode}
    assert not decoding & {id(r) for r, _ in step.prefill}
    assert all(r.prefilled == r.prompt_tokens for r in step.decode)
    # The linear cost written out: base + per decoding request + per prompt token.
    expected_ms = (
        BASE_MS + PER_SEQ_MS * len(step.decode) + PER_PREFILL_TOKEN_MS * step.prefill_tokens
    )
    assert step.duration_s == pytest.approx(expected_ms / 1000 + batcher.step_overhead_s)
    assert step.decode_context_tokens == sum(r.prompt_tokens + r.generated for r in step.decode)


def _run(batcher: Batcher[int], arrivals: list[tuple[float, EngineRequest[int]]]) -> Run:
    """Step the batcher on a fake clock; requests arrive at their times (seconds)."""
    run, pending, clock = Run(), sorted(arrivals, key=lambda item: item[0]), 0.0
    while True:
        while pending and pending[0][0] <= clock:
            batcher.submit(pending.pop(0)[1])
        step = batcher.plan()
        if step is None:
            if not pending:
                return run
            clock = pending[0][0]
            continue
        _check(batcher, step)
        run.steps.append((clock, step))
        run.admitted += [r.owner for r, _ in step.prefill if r.prefilled == 0]
        before = {id(r): r.generated for r in step.decode}
        clock += step.duration_s
        tokens = batcher.complete(step)
        for r in step.decode:  # each decoding request got exactly one token
            assert r.generated == before[id(r)] + 1
        finished_prefill = [r for r, _ in step.prefill if r.prefilled == r.prompt_tokens]
        assert [id(r) for r in tokens] == [id(r) for r in step.decode + finished_prefill]
        for r in finished_prefill:
            assert r.generated == 1
            run.first_token_s[r.owner] = clock
        for r in tokens:
            if r.phase is Phase.DONE:
                run.finished_s[r.owner] = clock


def test_random_workloads_keep_every_invariant():
    rng = random.Random(7)
    for trial in range(20):
        batcher = _batcher(
            max_running=rng.choice([None, 1, 3, 8]),
            kv_capacity_tokens=rng.choice([None, 3_000, 10_000]),
            chunked_prefill_size=rng.choice([64, 512, 8192]),
            step_overhead_s=rng.choice([0.0, 0.002]),
        )
        arrivals = []
        for index in range(40):
            prompt, output = rng.randint(0, 1_500), rng.randint(1, 60)
            if batcher.fits(prompt, output):
                arrivals.append((rng.uniform(0, 2.0), EngineRequest(prompt, output, index)))
        run = _run(batcher, arrivals)
        order = [r.owner for _, r in sorted(arrivals, key=lambda item: item[0])]
        assert run.admitted == order, f"trial {trial}: admission is not first come first served"
        assert set(run.finished_s) == set(order)
        assert not batcher.running and not batcher.waiting and batcher.kv_used_tokens == 0


def test_the_running_cap_queues_the_rest_in_arrival_order():
    batcher = _batcher(max_running=2)
    requests = [EngineRequest(10, 5, index) for index in range(5)]
    run = _run(batcher, [(0.0, r) for r in requests])
    assert max(len(step.decode) + len(step.prefill) for _, step in run.steps) == 2
    assert run.admitted == [0, 1, 2, 3, 4]
    # 2 and 3 start only when 0 and 1 are done, at the end of the same step
    assert run.first_token_s[2] > run.finished_s[0] == run.finished_s[1]


def test_kv_capacity_holds_requests_back_until_their_whole_output_fits():
    batcher = _batcher(kv_capacity_tokens=100)
    first, second = EngineRequest(40, 20, 0), EngineRequest(30, 20, 1)  # 60 + 50 > 100
    run = _run(batcher, [(0.0, first), (0.0, second)])
    assert run.first_token_s[1] > run.finished_s[0]
    assert not batcher.fits(90, 11) and batcher.fits(90, 10)
    with pytest.raises(ValueError, match="cannot fit"):
        batcher.submit(EngineRequest(90, 11, 2))


def test_a_long_prompt_spans_several_steps_within_the_prefill_budget():
    batcher = _batcher(chunked_prefill_size=8192)
    long, short = EngineRequest(20_000, 3, 0), EngineRequest(100, 3, 1)
    run = _run(batcher, [(0.0, long), (0.0, short)])
    chunks = [[(r.owner, n) for r, n in step.prefill] for _, step in run.steps[:4]]
    assert chunks == [[(0, 8192)], [(0, 8192)], [(0, 3616), (1, 100)], []]
    first_step_end = run.steps[0][0] + run.steps[0][1].duration_s
    assert run.first_token_s[0] == run.first_token_s[1] > 2 * first_step_end


def test_decoding_requests_share_each_step_and_its_duration():
    batcher = _batcher()
    requests = [EngineRequest(8, 4, index) for index in range(3)]
    run = _run(batcher, [(0.0, r) for r in requests])
    (_, prefill), *decode_steps = run.steps
    assert prefill.duration_s == pytest.approx((10 + 0.01 * 24) / 1000)
    assert [len(step.decode) for _, step in decode_steps] == [3, 3, 3]
    assert decode_steps[0][1].duration_s == pytest.approx((10 + 0.5 * 3) / 1000)
    assert len(set(run.finished_s.values())) == 1  # all three end in the same step


def test_cancelling_frees_the_slot_and_the_kv_wherever_the_request_is():
    batcher = _batcher(max_running=1, kv_capacity_tokens=50)
    running, waiting, last = (EngineRequest(10, 30, index) for index in range(3))
    for request in (running, waiting, last):
        batcher.submit(request)
    step = batcher.plan()
    assert step is not None and [r for r, _ in step.prefill] == [running]
    batcher.cancel(waiting)
    batcher.cancel(running)  # while its step is in flight
    assert batcher.complete(step) == []
    assert (batcher.kv_used_tokens, batcher.kv_reserved_tokens, len(batcher.running)) == (0, 0, 0)
    next_step = batcher.plan()
    assert next_step is not None and [r for r, _ in next_step.prefill] == [last]
    batcher.cancel(running)  # a second cancel changes nothing
    assert len(batcher.running) == 1


def test_an_empty_prompt_is_prefilled_as_one_token():
    batcher = _batcher()
    run = _run(batcher, [(0.0, EngineRequest(0, 2, 0))])
    assert run.steps[0][1].prefill_tokens == 1
    assert len(run.steps) == 2
