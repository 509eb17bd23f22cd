"""The untried settings of a listed space, ranked by the twin's prediction."""

from __future__ import annotations

from typing import Any

from servelab.tune.grid_order import rank_untried, untried_settings
from servelab.tune.results import ObjectiveSpec, TwinForecast
from servelab.tune.targets import Constraint

GRID = {"knobs.max_running_requests": [16, 64, 256], "knobs.max_batch_tokens": [512, 2048]}
THROUGHPUT = ObjectiveSpec(metric="total_throughput", at=64, direction="maximize", unit="tok/s")
TTFT = Constraint(text="median_ttft_ms <= 400", metric="median_ttft_ms", at=64, op="<=", value=400)


def _forecast(params: dict[str, Any], target: ObjectiveSpec | Constraint) -> TwinForecast | None:
    """Throughput grows with the cap; TTFT breaks its bound only at the largest budget
    with the smallest cap; nothing is predicted for a budget of 512 with a cap of 16."""
    cap, budget = params["knobs.max_running_requests"], params["knobs.max_batch_tokens"]
    if (cap, budget) == (16, 512):
        return None
    value = float(cap * 10) if target.metric == "total_throughput" else float(cap * budget / 20)
    if target.metric == "median_ttft_ms":
        value = 900.0 if (cap, budget) == (16, 2048) else 100.0
    return TwinForecast(
        from_trial=0,
        metric=target.metric,
        at=64,
        changes={},
        predicted=value,
        low=value * 0.8,
        high=value * 1.2,
    )


def test_untried_settings_leave_out_every_setting_a_trial_had():
    tried = [{"knobs.max_running_requests": 64, "knobs.max_batch_tokens": 512}]
    untried = untried_settings(GRID, tried)
    assert len(untried) == 5 and tried[0] not in untried


def test_the_best_predicted_comes_first_and_a_ruled_out_setting_last():
    untried = untried_settings(GRID, [])
    ranked = rank_untried(untried, THROUGHPUT, [TTFT], _forecast)
    caps = [
        (r.params["knobs.max_running_requests"], r.params["knobs.max_batch_tokens"]) for r in ranked
    ]
    assert len(ranked) == 5, caps
    assert caps[0][0] == 256 and caps[-1] == (16, 2048), caps
    assert ranked[-1].ruled_out is not None and "median_ttft_ms <= 400" in ranked[-1].ruled_out
    assert "ranked 1 of 5" in ranked[0].text(1, 5)
    lower = ObjectiveSpec(metric="total_throughput", at=64, direction="minimize", unit="tok/s")
    assert rank_untried(untried, lower, [], _forecast)[0].params["knobs.max_running_requests"] == 16
