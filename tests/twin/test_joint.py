"""A cost refitted on several runs of one engine under other limits: the planted engine
swept at two step budgets, and a third budget predicted from the first run alone and from
both, against a sweep at that budget."""

from __future__ import annotations

from dataclasses import replace

import pytest

from servelab.sim.policy import EXACT_RESERVE
from servelab.twin import EngineLimits, TwinInputs, fit_twin
from servelab.twin.joint import pooled_samples, refit_jointly
from servelab.twin.whatif import what_if
from tests.twin.planted import measured_run

CONCURRENCIES = (1, 4, 16)
SHAPE = {"prompt": (480, 540), "output": (8, 16)}


def _limits(budget: int) -> EngineLimits:
    return EngineLimits(EXACT_RESERVE, running_cap=16, batch_tokens=budget)


def _twin(budget: int):
    levels, rows = measured_run(CONCURRENCIES, limits=_limits(budget), **SHAPE)
    return fit_twin(TwinInputs(levels, rows, "sim", _limits(budget), {})), levels


def test_pooled_gaps_keep_each_runs_requests_apart():
    small, _ = _twin(64)
    large, _ = _twin(1024)
    assert small.samples is not None and large.samples is not None
    pooled = pooled_samples([small.samples, large.samples])
    assert pooled.size == small.samples.size + large.samples.size
    owners = len(set(pooled.request.tolist()))
    assert owners == len(set(small.samples.request.tolist())) + len(
        set(large.samples.request.tolist())
    )


def test_a_budget_between_two_runs_is_no_longer_extrapolated_once_both_are_fitted():
    small, levels = _twin(64)
    large, _ = _twin(1024)
    alone = what_if(small, {"batch_tokens": 512})
    assert any("prefill up to" in why for why in alone.extrapolated), alone.extrapolated
    joint = refit_jointly(small, [large])
    assert joint.seen is not None and joint.seen[0] > 512
    assert any("refitted on the gaps of 2 runs" in n for n in joint.result.fit.notes)
    both = what_if(joint, {"batch_tokens": 512})
    assert not both.extrapolated, both.extrapolated
    truth_levels, _ = measured_run(CONCURRENCIES, limits=_limits(512), **SHAPE)
    for metric in ("median_ttft_ms", "total_throughput"):
        lone = alone.forecast(levels[-1].level, metric)
        pooled = both.forecast(levels[-1].level, metric)
        assert lone is not None and pooled is not None
        ratio = getattr(truth_levels[-1], metric) / getattr(levels[-1], metric)
        assert pooled.low * (1 - 1e-9) <= ratio <= pooled.high * (1 + 1e-9), (metric, pooled)
        assert pooled.factor == pytest.approx(ratio, rel=0.35), (metric, pooled, ratio)
        assert pooled.high / pooled.low < min(3.0, lone.high / lone.low), (pooled, lone)


def test_a_run_whose_answers_came_whole_has_no_gaps_to_pool():
    small, _ = _twin(64)
    large, _ = _twin(1024)
    whole = refit_jointly(small, [replace(large, samples=None)])
    assert whole is small
