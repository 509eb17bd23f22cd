"""The capacity search on synthetic levels: doubling, bisection, the boundary's re-measure
when a neighbour is within noise, and the bounds (max load, max steps, early stop)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest

from servelab.bench.attainment import SloSample
from servelab.bench.capacity import CapacityPlan, CapacitySearch
from servelab.bench.capacity_results import CapacityResult
from servelab.bench.load import LoadMode
from servelab.bench.results import LevelSummary, SweepStop
from servelab.core.errors import ConfigError
from tests.unit.helpers import level_summary

SLO = {"ttft": 2000.0}
GOOD_MS, BAD_MS = 100.0, 3000.0


def sample(shares: list[float], block: int) -> SloSample:
    """A level of len(shares) blocks of `block` requests, each block with its share good
    (spread evenly inside the block), in send order."""
    good = np.concatenate([_spread(share, block) for share in shares])
    return SloSample(good=good, values_ms={"ttft": np.where(good, GOOD_MS, BAD_MS)}, block=block)


def _spread(share: float, n: int) -> np.ndarray:
    i = np.arange(n)
    return np.floor((i + 1) * share + 1e-9) > np.floor(i * share + 1e-9)


def level(load: float, index: int, mode: LoadMode = LoadMode.CONCURRENCY) -> LevelSummary:
    summary = level_summary(max(1, int(load)), 100.0, index=index)
    if mode is LoadMode.CONCURRENCY:
        return summary.model_copy(update={"max_concurrency": int(load)})
    return summary.model_copy(
        update={"load_mode": "request_rate", "max_concurrency": None, "request_rate": load}
    )


Blocks = Callable[[float, int], list[float]]
"""The good share of each block of a level at a load, by its measurement of that load."""


def search(
    plan: CapacityPlan, blocks: Blocks, *, block: int = 4
) -> tuple[CapacityResult, SweepStop]:
    """Run the search to its end on synthetic levels; (its result, the stop it ended with)."""
    state = CapacitySearch(plan)
    seen: dict[float, int] = {}
    for index in _count():
        choice = state.next_load()
        if isinstance(choice, SweepStop):
            return state.result(), choice
        load, _ = choice
        seen[load] = seen.get(load, 0) + 1
        state.observe(level(load, index, plan.mode), sample(blocks(load, seen[load]), block))
    raise AssertionError("unreachable")


def _count() -> Iterator[int]:
    yield from range(1000)


def cap_at(capacity: float, blocks: int = 8) -> Blocks:
    """Every request good up to `capacity`, none above: verdicts far outside noise."""
    return lambda load, _: [1.0 if load <= capacity else 0.0] * blocks


def plan(**given) -> CapacityPlan:
    return CapacityPlan(slo_ms=SLO, **{"max_load": 1024, **given})


def loads(result: CapacityResult) -> list[float]:
    return [lv.load for lv in result.levels]


def test_doubles_until_a_level_fails_then_bisects_to_the_highest_that_meets():
    result, stop = search(plan(), cap_at(6))
    assert loads(result) == [1, 2, 4, 8, 6, 7]
    assert [lv.step for lv in result.levels] == ["start", "double", "double", "double"] + [
        "bisect"
    ] * 2
    assert (result.status, result.capacity) == ("found", 6)
    assert result.held is not None and result.failed is not None
    assert (result.held.load, result.failed.load) == (6, 7)
    assert [lv.judged.meets for lv in result.levels] == [True, True, True, False, True, False]
    assert stop.reason == "capacity" and stop.level == 5
    assert stop.explanation.startswith("capacity: 6 concurrent at TTFT p90 100 ms ≤ 2 s; 7 fails")


def test_bisection_stops_within_the_tolerance_of_the_failing_load():
    result, _ = search(plan(tolerance=0.1), cap_at(300))
    held, failed = result.held, result.failed
    assert held is not None and failed is not None
    assert held.load <= 300 < failed.load
    assert failed.load - held.load <= 0.1 * failed.load
    assert loads(result)[:10] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def test_a_boundary_level_within_noise_is_measured_again_and_judged_pooled():
    """7 first measures 85% good in blocks that disagree (band across 90%); measured again
    at 100% it is judged on both: 92% meets, so the boundary moves up to 7 / 8 (the two
    measurements disagree, so the pooled verdict stays within noise: said, not hidden)."""

    def blocks(load: float, measurement: int) -> list[float]:
        if load == 7:
            return [0.5, 1.0, 1.0, 0.75, 1.0, 0.75, 1.0, 0.8] if measurement == 1 else [1.0] * 8
        return [1.0 if load < 7 else 0.0] * 8

    result, _ = search(plan(), blocks)
    assert loads(result) == [1, 2, 4, 8, 6, 7, 7]
    first, again = result.levels[-2], result.levels[-1]
    assert not first.judged.meets and first.judged.within_noise
    assert "share's band" in first.judged.noise
    assert again.step == "remeasure" and again.measurements == 2
    assert again.judged.requests == first.judged.requests * 2
    assert again.judged.meets and again.judged.within_noise
    assert (result.status, result.capacity) == ("found", 7)
    assert result.failed is not None and result.failed.load == 8
    assert result.within_noise


def test_a_boundary_still_within_noise_after_its_re_measures_is_said_to_be():
    noisy = [0.5, 1.0, 1.0, 0.75, 1.0, 0.75, 1.0, 0.8]
    result, _ = search(plan(), lambda load, _: noisy if load == 7 else cap_at(6)(load, 1))
    assert [lv.step for lv in result.levels][-1] == "remeasure"
    assert loads(result).count(7) == 2  # DEFAULT_REMEASURES: once more, then the verdict
    assert result.within_noise and result.capacity == 6
    assert result.status == "found"


def test_clear_verdicts_are_not_measured_again():
    result, _ = search(plan(), cap_at(6))
    assert all(lv.step != "remeasure" for lv in result.levels)
    assert not result.within_noise


def test_a_level_without_a_band_counts_as_within_noise():
    """Four blocks are too few for a band (noise.MIN_BLOCKS): each boundary level is
    measured again, and its eight blocks pooled draw one."""
    result, _ = search(plan(), cap_at(6, blocks=4))
    assert [lv.load for lv in result.levels if lv.step == "remeasure"] == [6, 7]
    first = next(lv for lv in result.levels if lv.load == 6)
    assert first.judged.within_noise and "no band: only 4 blocks of requests" in first.judged.noise
    assert first.judged.attained_lo is None
    assert result.held is not None and result.held.measurements == 2
    assert not result.held.judged.within_noise and result.held.judged.attained_lo == 1.0
    assert result.capacity == 6 and not result.within_noise


def test_the_largest_load_allowed_ends_the_doubling_and_bounds_the_answer():
    result, stop = search(plan(max_load=20), cap_at(1000))
    assert loads(result) == [1, 2, 4, 8, 16, 20]
    assert result.levels[-1].step == "max"
    assert (result.status, result.capacity) == ("at_max", 20)
    assert "at least 20 concurrent" in stop.explanation


def test_no_load_meets_when_the_first_fails():
    result, stop = search(plan(), cap_at(0))
    assert loads(result) == [1]
    assert (result.status, result.capacity) == ("none", None)
    assert stop.explanation.startswith("capacity: no load tried kept TTFT ≤ 2 s for 90.0%")


def test_the_level_budget_bounds_the_search():
    result, stop = search(plan(max_steps=5), cap_at(100))
    assert len(result.levels) == 5
    assert (result.status, result.capacity) == ("steps", 16)
    assert "level budget ran out" in stop.explanation


def test_a_search_at_its_budget_with_its_answer_has_found_it():
    result, _ = search(plan(max_steps=6), cap_at(6))
    assert len(result.levels) == 6 and result.status == "found"


def test_open_loop_searches_the_rate_down_when_the_start_fails():
    """Rates halve from the start while they fail, then bisect in rate to 5%."""
    rate_plan = plan(mode=LoadMode.REQUEST_RATE, start=8.0, max_load=64)
    result, _ = search(rate_plan, cap_at(2.7))
    assert loads(result)[:4] == [8, 4, 2, 3]
    held, failed = result.held, result.failed
    assert held is not None and failed is not None
    assert held.load <= 2.7 < failed.load <= held.load * 1.06
    assert result.mode == "request_rate"
    assert "req/s" in result.explanation


def test_open_loop_rates_stop_halving_at_the_floor():
    rate_plan = plan(mode=LoadMode.REQUEST_RATE, start=1.0, max_load=64)
    result, _ = search(rate_plan, cap_at(0))
    assert loads(result) == [1, 0.5, 0.25, 0.125, 0.0625, 0.0312, 0.0156]
    assert result.status == "none"


def test_a_failure_under_the_give_up_load_ends_the_search_behind():
    result, stop = search(plan(give_up_below=10), cap_at(6))
    assert loads(result) == [1, 2, 4, 8]
    assert stop.reason == "behind" and result.status == "behind"
    assert result.capacity == 4


def test_the_result_before_the_end_is_searching_and_keeps_every_verdict():
    state = CapacitySearch(plan())
    for index in range(3):
        choice = state.next_load()
        assert not isinstance(choice, SweepStop)
        state.observe(level(choice[0], index), sample([1.0] * 8, 4))
    result = state.result()
    assert result.status == "searching" and result.capacity == 4
    assert len(result.levels) == 3
    assert result.explanation.endswith("(search not finished)")


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"attainment": 0.0}, "attainment must be above 0 and at most 1, got 0"),
        ({"attainment": 1.5}, "attainment must be above 0 and at most 1, got 1.5"),
        ({"slo_ms": {}}, "needs an SLO"),
        ({"start": 64.0, "max_load": 32}, "at most its largest load"),
        ({"max_steps": 0}, "at least one level"),
    ],
)
def test_a_plan_out_of_range_is_one_config_error(given, message):
    with pytest.raises(ConfigError, match=message):
        CapacityPlan(**{"slo_ms": SLO, "max_load": 1024, **given})
