"""Which finished trial a new trial's prediction comes from: only one that differs from it
in limits the twin replays."""

from __future__ import annotations

from servelab.tune.results import TwinForecast
from servelab.tune.targets import Constraint
from servelab.tune.twin_forecast import limit_changes, surely_violated


def test_a_trial_changing_only_limits_is_replayed_at_their_new_values():
    base = {"knobs.max_running_requests": 64, "knobs.max_batch_tokens": 2048}
    new = {"knobs.max_running_requests": 128, "knobs.max_batch_tokens": 2048}
    assert limit_changes(base, new) == {"running_cap": 128}
    assert limit_changes(base, base) == {}


def test_a_trial_changing_anything_else_gets_no_prediction():
    base = {"knobs.max_running_requests": 64, "knobs.cuda_graph": False}
    assert limit_changes(base, {**base, "knobs.cuda_graph": True}) is None
    assert limit_changes(base, {**base, "layout": "tp=4,pp=2"}) is None
    assert limit_changes(base, {**base, "knobs.max_running_requests": "lots"}) is None


def _forecast(low: float, high: float) -> TwinForecast:
    return TwinForecast(
        from_trial=0,
        metric="median_ttft_ms",
        at=64,
        changes={"running_cap": 32},
        predicted=(low + high) / 2,
        low=low,
        high=high,
    )


def test_a_trial_is_pruned_only_where_its_whole_interval_breaks_the_constraint():
    bound = Constraint(
        text="median_ttft_ms <= 500 @ 64", metric="median_ttft_ms", at=64, op="<=", value=500
    )
    assert surely_violated(bound, _forecast(700, 900))
    assert not surely_violated(bound, _forecast(400, 900))
    assert not surely_violated(bound, _forecast(100, 300))
    floor = Constraint(
        text="total_throughput >= 1000", metric="total_throughput", at=None, op=">=", value=1000
    )
    assert surely_violated(floor, _forecast(200, 900))
    assert not surely_violated(floor, _forecast(900, 1100))


def test_a_measured_value_outside_the_interval_but_whose_band_reaches_it_is_within_noise():
    forecast = _forecast(100, 120)
    assert forecast.verdict(110) == "inside"
    assert forecast.verdict(125) == "outside"
    banded = forecast.model_copy(update={"band_low": 118.0, "band_high": 133.0})
    assert banded.verdict(125) == "within noise"
    assert "band 118-133: within noise" in banded.text(125)
    far = forecast.model_copy(update={"band_low": 122.0, "band_high": 133.0})
    assert far.verdict(125) == "outside"
