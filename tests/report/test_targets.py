"""`--target NAME=VALUE`: parsed with its unit, judged against the sweep's levels."""

from __future__ import annotations

import pytest

from servelab.core.errors import ConfigError
from servelab.report.targets import TARGETS, TargetResult, evaluate_targets, parse_target
from tests.diagnose.builders import level
from tests.report.builders import sweep

EXAMPLES = {
    "total": ("total=1,000", 1000.0),
    "output": ("output=300", 300.0),
    "single": ("single=100", 100.0),
    "per_user": ("per_user=50", 50.0),
    "goodput": ("goodput=2.5", 2.5),
    "ttft_p50": ("ttft_p50=200ms", 200.0),
    "ttft_p99": ("ttft_p99=2s", 2000.0),
    "tpot_p50": ("tpot_p50=0.02s", 20.0),
    "tpot_p99": ("tpot_p99=50ms", 50.0),
    "itl_p99": ("itl_p99=1m", 60_000.0),
    "e2e_p99": ("e2e_p99=30s", 30_000.0),
    "errors": ("errors=1%", 1.0),
}


def judge(text: str, levels=None) -> TargetResult:
    (result,) = evaluate_targets([parse_target(text)], sweep() if levels is None else levels)
    return result


def test_every_target_name_has_an_example_here():
    """A new name in TARGETS must come with a parsing case below."""
    assert set(EXAMPLES) == set(TARGETS)


@pytest.mark.parametrize("name", list(TARGETS))
def test_every_target_parses_in_its_unit(name: str):
    text, value = EXAMPLES[name]
    target = parse_target(text)
    assert (target.name, target.text) == (name, text)
    assert target.value == pytest.approx(value)
    unit = TARGETS[name].unit
    assert target.goal.endswith(unit)
    assert (">=" in target.goal) is TARGETS[name].higher_is_better


def test_name_and_spaces_are_forgiven():
    target = parse_target(" TTFT_P99 = 1.5s ")
    assert (target.name, target.value, target.text) == ("ttft_p99", 1500.0, "ttft_p99=1.5s")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("foo=1", "target 'foo=1' is not understood"),
        ("total", "target 'total' is not understood"),
        ("total=abc", "target total: 'abc' is not a number"),
        ("total=-1", "target total: '-1' must be a finite number, 0 or more"),
        ("total=inf", "must be a finite number"),
        ("ttft_p99=fast", "target ttft_p99 'fast' is not a duration"),
        ("ttft_p99=2", "is not a duration"),  # a bare number has no unit
        ("errors=abc%", "target errors: 'abc%' is not a number"),
    ],
)
def test_a_bad_target_is_one_config_error_line(text: str, message: str):
    with pytest.raises(ConfigError) as caught:
        parse_target(text)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_name_that_is_not_understood_lists_the_names():
    with pytest.raises(ConfigError) as caught:
        parse_target("totl=1000")
    assert all(name in str(caught.value) for name in TARGETS)


# -- evaluation ----------------------------------------------------------------------------


def test_a_throughput_target_is_met_by_the_level_with_the_most_of_it():
    result = judge("total=1000")
    assert (result.met, result.level, result.concurrency) == (True, 2, 32)
    assert result.measured == pytest.approx(1200.0)
    assert result.direction == "higher"
    assert result.detail == "met: 1,200 tok/s at concurrency 32"


def test_a_latency_target_is_met_by_the_most_throughput_under_the_limit():
    """TTFT p99 under 2 s: levels 1, 8 and 32 keep under it; 32 has the most throughput."""
    result = judge("ttft_p99=2s")
    assert (result.met, result.level, result.concurrency) == (True, 2, 32)
    assert result.measured == pytest.approx(1500.0)
    assert result.direction == "lower"
    assert "the most total throughput under it" in result.detail
    tighter = judge("ttft_p99=500ms")
    assert (tighter.met, tighter.concurrency, tighter.measured) == (True, 8, 400.0)


def test_the_latency_pick_is_by_throughput_not_by_concurrency():
    """A higher concurrency with less throughput under the limit is not the one chosen."""
    levels = [
        level(0, 8, total_tps=900, tpot_ms=10, ttft_ms=100, p99_ttft_ms=200),
        level(1, 16, total_tps=800, tpot_ms=10, ttft_ms=100, p99_ttft_ms=300),
    ]
    assert judge("ttft_p99=1s", levels).concurrency == 8


def test_a_missed_throughput_target_reports_the_closest_level_and_the_shortfall():
    result = judge("total=2400")
    assert (result.met, result.concurrency, result.measured) == (False, 32, 1200.0)
    assert result.detail == "not met: best 1,200 tok/s at concurrency 32 (50% of the target)"


def test_a_missed_latency_target_reports_the_lowest_value_and_how_far_over():
    result = judge("ttft_p99=10ms")
    assert (result.met, result.concurrency, result.measured) == (False, 1, 30.0)
    assert result.detail == "not met: best 30 ms at concurrency 1 (3.0x the limit)"


def test_single_stream_is_judged_only_at_concurrency_one():
    """Level 1's 99 tok/s is the single-stream figure; busier levels have none to offer."""
    met = judge("single=90")
    assert (met.met, met.concurrency) == (True, 1)
    assert met.measured == pytest.approx(128 / (20 + 127 * 10) * 1e3)
    missed = judge("single=200")
    assert (missed.met, missed.concurrency) == (False, 1)
    without_one = judge("single=1", sweep()[1:])
    assert (without_one.met, without_one.level, without_one.measured) == (False, None, None)
    assert without_one.detail == "not measured: no level has single-stream tok/s"


@pytest.mark.parametrize("text", ["goodput=1", "tpot_p99=1s", "itl_p99=1s", "e2e_p99=1h"])
def test_a_metric_no_level_has_is_not_measured(text: str):
    result = judge(text)
    assert (result.met, result.level, result.concurrency, result.measured) == (
        False,
        None,
        None,
        None,
    )
    assert result.detail.startswith("not measured: no level has ")


def test_errors_are_the_failed_share_of_attempted_requests():
    """Level 64 fails 16 of 64 (25%): under 30% it is still too slow to be the pick."""
    levels = [
        *sweep()[:3],
        level(3, 64, total_tps=1150, tpot_ms=60, ttft_ms=9, failed=16, completed=48),
    ]
    tight = judge("errors=10%", levels)
    assert (tight.met, tight.concurrency, tight.measured) == (True, 32, 0.0)
    loose = judge("errors=0%", [levels[3]])
    assert (loose.met, loose.measured) == (False, 25.0)


def test_levels_that_completed_nothing_are_left_out():
    dead = level(4, 128, total_tps=1, tpot_ms=1, ttft_ms=1, completed=0, failed=64)
    result = judge("ttft_p99=1ms", [*sweep(), dead])
    assert result.concurrency == 1  # not the dead level's 1 ms


def test_targets_are_judged_in_the_order_given():
    targets = [parse_target("ttft_p99=2s"), parse_target("total=2000")]
    results = evaluate_targets(targets, sweep())
    assert [r.target.name for r in results] == ["ttft_p99", "total"]
    assert [r.met for r in results] == [True, False]


@pytest.mark.parametrize("text", ["total=50%", "single=100%", "goodput=2%"])
def test_a_percent_is_refused_where_the_unit_is_not_percent(text: str):
    """Only `errors` is in %: total=50% is not 50 tok/s."""
    with pytest.raises(ConfigError, match="%"):
        parse_target(text)
