"""Predictions by replay and limits ranked by lifting, against an engine whose every term is
known: the batcher with a planted cost. Each prediction is checked against a second sweep
of that engine at the new value, as a rerun would check it; each ranking against the
limit that was planted.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from servelab.sim.policy import EXACT_RESERVE
from servelab.sim.stepcost import LinearStepCost
from servelab.twin import EngineLimits, TwinInputs, fit_twin
from servelab.twin.lifting import Objective, lift_limits
from servelab.twin.model import SLO_MISSES
from servelab.twin.whatif import launch_saved, launch_saved_with_batch, what_if, what_if_step
from tests.twin.planted import measured_run

CONCURRENCIES = (1, 4, 16)


def _twin(limits: EngineLimits, **shape):
    levels, rows = measured_run(CONCURRENCIES, limits=limits, **shape)
    return fit_twin(TwinInputs(levels, rows, "sim", limits, {})), levels


def _truth(limits: EngineLimits, metric: str, **shape) -> float:
    levels, _ = measured_run(CONCURRENCIES, limits=limits, **shape)
    value = getattr(levels[-1], metric)
    assert value
    return value


@pytest.mark.parametrize("metric", ["median_ttft_ms", "total_throughput"])
def test_a_raised_cap_is_predicted_by_replay_and_a_second_sweep_lands_inside(metric: str):
    capped = EngineLimits(EXACT_RESERVE, running_cap=4, batch_tokens=2048)
    twin, levels = _twin(capped)
    result = what_if(twin, {"running_cap": 16})
    forecast = result.forecast(levels[-1].level, metric)
    assert forecast is not None and forecast.factor is not None
    measured = getattr(levels[-1], metric)
    truth = _truth(EngineLimits(EXACT_RESERVE, running_cap=16, batch_tokens=2048), metric)
    assert forecast.low <= truth / measured <= forecast.high, (forecast, truth / measured)
    assert forecast.predicted == pytest.approx(truth, rel=0.35)
    # the run decoded at most 4 at once; 16 is past it, and the prediction says so
    assert any("decode up to" in why for why in result.extrapolated), result.extrapolated


def test_the_same_limits_predict_no_change():
    limits = EngineLimits(EXACT_RESERVE, running_cap=4, batch_tokens=2048)
    twin, _ = _twin(limits)
    result = what_if(twin, {"running_cap": 4})
    assert not result.extrapolated
    for forecast in result.forecasts:
        assert forecast.factor == pytest.approx(1.0)
        assert forecast.low == pytest.approx(1.0) and forecast.high == pytest.approx(1.0)


def test_a_budget_past_the_runs_chunks_spans_both_readings_and_holds_the_truth():
    """Prompts 8x the budget: steps of 64 prompt tokens. A budget of 1,024 makes steps the
    run never had; the interval must still hold a second sweep at 1,024."""
    small = EngineLimits(EXACT_RESERVE, running_cap=16, batch_tokens=64)
    shape = {"prompt": (480, 540), "output": (8, 16)}
    twin, levels = _twin(small, **shape)
    result = what_if(twin, {"batch_tokens": 1024})
    assert any("prefill up to" in why for why in result.extrapolated), result.extrapolated
    forecast = result.forecast(levels[-1].level, "median_ttft_ms")
    assert forecast is not None and forecast.factor is not None
    truth = _truth(
        EngineLimits(EXACT_RESERVE, running_cap=16, batch_tokens=1024),
        **shape,
        metric="median_ttft_ms",
    )
    ratio = truth / levels[-1].median_ttft_ms
    assert ratio < 1
    assert forecast.low <= ratio <= forecast.high, (forecast, ratio)


def test_lifting_names_the_planted_cap_and_leaves_a_roomy_budget_set_but_not_binding():
    limits = EngineLimits(EXACT_RESERVE, running_cap=4, batch_tokens=4096)
    twin, levels = _twin(limits)
    lifts = lift_limits(twin, Objective.of(levels, knee_concurrency=None))
    by_name = {lift.limit: lift for lift in lifts}
    assert lifts[0].limit == "running_cap" and lifts[0].binding, lifts[0]
    assert lifts[0].lifted == max(CONCURRENCIES)
    assert lifts[0].latency is not None and lifts[0].latency.factor < 1
    budget = by_name["batch_tokens"]
    assert not budget.binding and budget.score == 0.0
    assert budget.latency is not None and budget.latency.factor == pytest.approx(1.0)


def test_a_small_budget_binds_and_its_lift_states_the_trade_on_tpot():
    """A larger budget lets whole prompts into the steps that decode: TTFT falls and the
    decoding requests' steps lengthen, a trade the lift must state as one."""
    limits = EngineLimits(EXACT_RESERVE, running_cap=16, batch_tokens=64)
    twin, levels = _twin(limits, prompt=(480, 540), output=(40, 80))
    lifts = lift_limits(twin, Objective.of(levels, knee_concurrency=None))
    budget = next(lift for lift in lifts if lift.limit == "batch_tokens")
    assert budget.binding and lifts[0] is budget
    assert any(trade.startswith("median TPOT") for trade in budget.trades), budget.trades


def test_a_per_step_saving_replayed_gains_less_where_steps_are_batched():
    """CUDA graphs save launches per step: at one stream that is most of the step, at 16
    the per-request and per-token terms stay. The two ends bracket the point."""
    limits = EngineLimits(EXACT_RESERVE, running_cap=16, batch_tokens=2048)
    twin, levels = _twin(limits)
    result = what_if_step(twin, [launch_saved(2.0), launch_saved(4.0)], "graphs")
    single = result.forecast(levels[0].level, "median_tpot_ms")
    heavy = result.forecast(levels[-1].level, "median_tpot_ms")
    assert single is not None and heavy is not None
    assert single.low <= single.factor <= single.high < 1
    assert heavy.factor > single.factor, (single, heavy)
    assert result.notes == ["graphs"] and not result.changes


def test_with_slos_the_objective_is_the_share_of_requests_missing_them():
    """A TTFT SLO the capped run's queue breaks: lifting the cap cuts the share missing it."""
    limits = EngineLimits(EXACT_RESERVE, running_cap=4, batch_tokens=4096)
    twin, levels = _twin(limits)
    worst = levels[-1]
    assert worst.median_ttft_ms
    with_slo = replace(twin, slo_ms={"ttft": worst.median_ttft_ms / 4}, _memo={})
    lifts = lift_limits(with_slo, Objective.of(levels, knee_concurrency=None))
    cap = lifts[0]
    assert cap.limit == "running_cap" and cap.binding
    assert cap.latency is not None and cap.latency.metric == SLO_MISSES
    assert cap.latency.factor < 1 and cap.latency.predicted < 0.5, cap.latency


def test_a_step_is_never_faster_than_the_work_the_model_says_it_does():
    """A budget lifted far past the run's chunks: with a floor that prices each prompt
    token (the hardware's compute), the replay's prefill cannot come for free."""
    small = EngineLimits(EXACT_RESERVE, running_cap=16, batch_tokens=64)
    shape = {"prompt": (480, 540), "output": (8, 16)}
    twin, levels = _twin(small, **shape)
    free = what_if(twin, {"batch_tokens": 8192}).forecast(levels[-1].level, "median_ttft_ms")
    floored = replace(twin, floor=lambda n, context, prompt: prompt * 1e-4, _memo={})
    paid = what_if(floored, {"batch_tokens": 8192}).forecast(levels[-1].level, "median_ttft_ms")
    assert free is not None and paid is not None
    assert paid.factor > free.factor, (free, paid)


def test_a_small_cache_is_lifted_to_what_flies_at_once_and_no_further_than_the_machine():
    """A cache of 1,024 tokens under 16 requests of up to ~600 tokens each: the lift holds
    the heaviest level's requests at once, unless the machine's own ceiling is lower; a
    ceiling at or below the set cache leaves nothing to lift."""
    limits = EngineLimits(EXACT_RESERVE, running_cap=16, batch_tokens=4096, kv_capacity_tokens=1024)
    twin, levels = _twin(limits, prompt=(400, 500), output=(40, 80))
    objective = Objective.of(levels, knee_concurrency=None)
    [cache] = [lift for lift in lift_limits(twin, objective) if lift.limit == "kv_capacity_tokens"]
    rows = twin.per_level[levels[-1].level]
    flying = sorted((r.prompt_tokens + r.output_tokens for r in rows), reverse=True)[:16]
    assert cache.lifted == sum(flying) and cache.binding
    assert cache.latency is not None and cache.latency.factor < 1
    capped = lift_limits(twin, objective, ceilings={"kv_capacity_tokens": 4000})
    assert [lift.lifted for lift in capped if lift.limit == "kv_capacity_tokens"] == [4000]
    none_left = lift_limits(twin, objective, ceilings={"kv_capacity_tokens": 1024})
    assert all(lift.limit != "kv_capacity_tokens" for lift in none_left)


def test_graphs_that_also_take_the_per_request_launches_leave_the_batch_only_its_gpu_work():
    """The far end of CUDA graphs: what each request adds to a step beyond the model's GPU
    work for it was launches, and goes with them. A lone step is the per-step saving's;
    a batched one is that step plus the GPU work the floor says the batch adds."""

    def floor(batch: int, context: int, prefill: int) -> float:
        return (0.5 + 0.01 * batch) / 1e3

    eager = LinearStepCost(base_ms=20.0, per_seq_ms=3.0)
    graphed = launch_saved_with_batch(12.0, floor)(eager)
    assert graphed.step_s(1, 100, 0) == pytest.approx((20.0 - 12.0 + 3.0) / 1e3)
    assert graphed.step_s(16, 1600, 0) == pytest.approx((20.0 - 12.0 + 3.0 + 0.15) / 1e3)
    per_step_only = launch_saved(12.0)(eager)
    assert per_step_only.step_s(16, 1600, 0) == pytest.approx((8.0 + 48.0) / 1e3)
    # never slower than the per-step saving alone
    cheap = LinearStepCost(base_ms=20.0, per_seq_ms=0.0)
    assert launch_saved_with_batch(12.0, floor)(cheap).step_s(16, 0, 0) == pytest.approx(8e-3)
