"""The batcher under each engine's admission and preemption rules (servelab.sim.policy),
stepped by hand: who is admitted, who is preempted when the cache runs out, where the
preempted request goes, and that it recomputes its generated tokens before it decodes."""

from __future__ import annotations

import pytest

from servelab.sim.batching import Batcher, EngineRequest, Phase
from servelab.sim.policy import EXACT_RESERVE, BatchPolicy, policy_for
from servelab.sim.stepcost import LinearStepCost

COST = LinearStepCost(base_ms=1.0)


def _batcher(policy: BatchPolicy, *, capacity: int, budget: int = 1000) -> Batcher[str]:
    return Batcher(
        step_cost=COST, chunked_prefill_size=budget, kv_capacity_tokens=capacity, policy=policy
    )


def _run(batcher: Batcher[str], steps: int) -> list[EngineRequest[str]]:
    preempted: list[EngineRequest[str]] = []
    for _ in range(steps):
        step = batcher.plan()
        if step is None:
            break
        preempted += step.preempted
        batcher.complete(step)
    return preempted


def test_vllm_books_no_output_preempts_the_newest_and_requeues_it_first() -> None:
    batcher = _batcher(policy_for("vllm"), capacity=50)
    old, new, waiting = (EngineRequest(20, 30, name) for name in ("old", "new", "waiting"))
    for request in (old, new, waiting):
        batcher.submit(request)
    step = batcher.plan()
    assert step is not None
    batcher.complete(step)  # two prompts fit (nothing booked for outputs), not a third
    assert old.phase is new.phase is Phase.RUNNING and waiting.phase is Phase.WAITING
    preempted = _run(batcher, 30)
    assert preempted[0] is new, [r.owner for r in preempted]
    assert new.preemptions >= 1
    assert old.preemptions == 0 and old.phase is not Phase.WAITING


def test_a_preempted_request_prefills_its_generated_tokens_again_and_still_finishes() -> None:
    batcher = _batcher(policy_for("vllm"), capacity=60, budget=8)
    jobs = [EngineRequest(20, 30, f"r{i}") for i in range(3)]
    for job in jobs:
        batcher.submit(job)
    recomputed = []
    for _ in range(400):
        step = batcher.plan()
        if step is None:
            break
        recomputed += [(job, chunk) for job, chunk in step.prefill if job.recompute_tokens > 0]
        batcher.complete(step)
    assert all(job.phase is Phase.DONE and job.generated == 30 for job in jobs)
    assert recomputed, "no preempted request prefilled again"
    again, _ = recomputed[0]
    assert again.prefill_target == again.prompt_tokens + again.recompute_tokens


def test_sglang_books_the_new_requests_whole_output_and_retracts_the_shortest_output() -> None:
    policy = policy_for("sglang")
    batcher = _batcher(policy, capacity=100)
    first = EngineRequest(10, 80, "first")
    second = EngineRequest(10, 80, "second")
    batcher.submit(first)
    batcher.submit(second)
    step = batcher.plan()
    assert step is not None
    batcher.complete(step)
    # 10 + 80 booked for the first: the second's 90 does not fit beside it
    assert first.phase is Phase.RUNNING and second.phase is Phase.WAITING
    lean = BatchPolicy(
        name="lean",
        running_reserve=0.0,
        admit_reserve=0.0,
        victim="fewest_output",
        requeue_front=False,
    )
    batcher = _batcher(lean, capacity=70)
    long_run, short_run = EngineRequest(10, 60, "long"), EngineRequest(10, 60, "short")
    batcher.submit(long_run)
    _run(batcher, 5)
    batcher.submit(short_run)
    preempted = _run(batcher, 80)
    assert preempted and preempted[0] is short_run  # the fewest tokens generated goes first


def test_sglangs_running_share_decays_and_restarts_from_the_outputs_left() -> None:
    policy = policy_for("sglang")
    assert policy.running_share(0.7, 0) == pytest.approx(0.7)
    assert policy.running_share(0.7, 300) == pytest.approx((0.7 + 0.098) / 2)
    assert policy.running_share(0.7, 10_000) == pytest.approx(0.098)


def test_transformers_keeps_headroom_for_new_prefills() -> None:
    batcher = _batcher(policy_for("transformers"), capacity=100)
    running, late = EngineRequest(80, 5, "running"), EngineRequest(10, 5, "late")
    batcher.submit(running)
    first = batcher.plan()
    assert first is not None
    batcher.complete(first)
    batcher.submit(late)
    step = batcher.plan()
    assert step is not None and late not in step.admitted  # 81 + 10 > 85% of 100
    roomy = _batcher(policy_for("vllm"), capacity=100)
    roomy.submit(EngineRequest(80, 5, "running"))
    first = roomy.plan()
    assert first is not None
    roomy.complete(first)
    roomy.submit(EngineRequest(10, 5, "late"))
    step = roomy.plan()
    assert step is not None and [job.owner for job in step.admitted] == ["late"]


def test_the_exact_policy_never_preempts() -> None:
    batcher = _batcher(EXACT_RESERVE, capacity=100)
    jobs = [EngineRequest(20, 30, f"r{i}") for i in range(5)]
    for job in jobs:
        batcher.submit(job)
    assert _run(batcher, 500) == []
    assert all(job.phase is Phase.DONE for job in jobs)
