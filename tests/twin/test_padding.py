"""The KV an engine reads padded to its cache: the staircase read in transformers' source,
and the doubt a change of the cache then carries in every replayed step."""

from __future__ import annotations

from dataclasses import replace

import pytest

from servelab.model import MODEL_PRESETS
from servelab.sim.policy import EXACT_RESERVE
from servelab.sim.stepcost import LinearStepCost
from servelab.twin import EngineLimits
from servelab.twin.padding import (
    KV_PADDING_INTERVAL,
    QUERY_PADDING_INTERVAL,
    KvPadding,
    PastPositions,
    padded_position_bytes,
)
from servelab.twin.whatif import what_if
from tests.twin.test_whatif import _twin


def test_positions_are_held_tokens_rounded_up_to_the_interval_and_capped_by_the_pool():
    padding = KvPadding(pool=7_680, least_ms_per_position=1e-4)
    assert padding.positions(10, 7_680) == 7_680  # a pool under the interval is read whole
    assert padding.positions(10, 40_000) == KV_PADDING_INTERVAL
    assert padding.positions(KV_PADDING_INTERVAL + 1, 40_000) == 2 * KV_PADDING_INTERVAL
    assert padding.positions(90_000, 40_000) == 40_000
    assert padding.positions(0, None) == KV_PADDING_INTERVAL


def test_a_padded_position_costs_the_gather_the_repeat_and_sdpa_over_every_layer():
    config = MODEL_PRESETS["h200-ref"].config
    kv = 2 * config.kv_heads * config.head_dim * 2
    repeated = 2 * config.heads * config.head_dim * 2
    per_layer = 3 * kv + 2 * repeated + QUERY_PADDING_INTERVAL * 2
    assert padded_position_bytes(config) == config.layers * per_layer


def test_the_run_own_cache_reads_as_fitted_and_another_moves_every_step_between_the_ends():
    padding = KvPadding(pool=4_096, least_ms_per_position=2e-4)
    fitted = LinearStepCost(base_ms=8.0, per_seq_ms=0.1, kv_capacity_tokens=4_096)
    larger = replace(fitted, kv_capacity_tokens=65_536)
    own = fitted.step_s(4, 2_000, 0)
    assert padding.reading(most=False)(fitted).step_s(4, 2_000, 0) == own
    assert padding.reading(most=True)(fitted).step_s(4, 2_000, 0) == own
    least = padding.reading(most=False)(larger).step_s(4, 2_000, 0)
    most = padding.reading(most=True)(larger).step_s(4, 2_000, 0)
    extra = (KV_PADDING_INTERVAL - 4_096) * 2e-4 / 1e3
    assert least == pytest.approx(own + extra)
    ratio = (KV_PADDING_INTERVAL + QUERY_PADDING_INTERVAL) / (4_096 + QUERY_PADDING_INTERVAL)
    assert most == pytest.approx(own * ratio)


def test_a_larger_cache_on_a_padding_engine_is_a_stated_doubt_with_both_ends_in_the_interval():
    limits = EngineLimits(EXACT_RESERVE, running_cap=16, kv_capacity_tokens=3_000)
    twin, levels = _twin(limits)
    padded = replace(twin, kv_padding=KvPadding(pool=3_000, least_ms_per_position=1e-4), _memo={})
    plain = what_if(twin, {"kv_capacity_tokens": 40_000})
    result = what_if(padded, {"kv_capacity_tokens": 40_000})
    assert any("padded to the cache" in why for why in result.extrapolated), result.extrapolated
    assert not any("padded to the cache" in why for why in plain.extrapolated)
    level = levels[-1].level
    tpot, plain_tpot = (
        result.forecast(level, "median_tpot_ms"),
        plain.forecast(level, "median_tpot_ms"),
    )
    assert tpot is not None and plain_tpot is not None
    assert tpot.high is not None and plain_tpot.high is not None
    assert tpot.high > plain_tpot.high  # every step reads more: TPOT can only grow
    assert what_if(padded, {"kv_capacity_tokens": 3_000}).extrapolated == []


def test_past_the_most_a_step_of_the_run_held_the_step_grows_with_the_positions_it_reads():
    padding = KvPadding(pool=1_000_000, least_ms_per_position=1e-4)
    fitted = LinearStepCost(base_ms=10.0, per_seq_ms=0.5, per_context_token_ms=1e-5)
    edge = KV_PADDING_INTERVAL + 5_000  # the run read two intervals at most
    past = PastPositions(fitted, padding, edge)
    assert past.step_s(8, edge - 100, 100) == fitted.step_s(8, edge - 100, 100)  # the run's own
    # more tokens in the same two intervals: the same positions, the fitted line
    assert past.step_s(8, edge + 1_000, 0) == fitted.step_s(8, edge + 1_000, 0)
    # a third interval: the step at the edge, in proportion to the positions
    held = 2 * KV_PADDING_INTERVAL + 10
    ratio = (3 * KV_PADDING_INTERVAL + QUERY_PADDING_INTERVAL) / (
        2 * KV_PADDING_INTERVAL + QUERY_PADDING_INTERVAL
    )
    at_edge = fitted.step_s(8, edge - 200, 200)
    assert past.step_s(8, held - 200, 200) == pytest.approx(at_edge * ratio)
    # a prompt past the edge alone is priced from a step of that prompt
    assert past.step_s(0, 0, held) == pytest.approx(max(fitted.step_s(0, 0, held), 0.0))


def test_a_raised_cap_on_a_padding_engine_states_the_positions_no_step_of_the_run_read():
    """A cap of 4 holds a few thousand tokens a step, 16 four times that: past the run's
    padded positions (an interval of 512 here) the interval widens towards slower steps."""
    limits = EngineLimits(EXACT_RESERVE, running_cap=4, batch_tokens=2048)
    twin, levels = _twin(limits)
    padding = KvPadding(pool=10**7, least_ms_per_position=1e-4, interval=512)
    padded = replace(twin, kv_padding=padding, _memo={})
    plain = what_if(twin, {"running_cap": 16})
    result = what_if(padded, {"running_cap": 16})
    stated = [why for why in result.extrapolated if "padded positions" in why]
    assert stated and not any("padded positions" in why for why in plain.extrapolated), stated
    level = levels[-1].level
    tpot, plain_tpot = (
        result.forecast(level, "median_tpot_ms"),
        plain.forecast(level, "median_tpot_ms"),
    )
    assert tpot is not None and plain_tpot is not None and tpot.high and plain_tpot.high
    assert tpot.high > plain_tpot.high and tpot.low == pytest.approx(plain_tpot.low, rel=1e-6)
