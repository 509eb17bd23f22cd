"""Which finished trial a new trial's prediction comes from: only one that differs from it
in limits the twin replays."""

from __future__ import annotations

from servelab.tune.twin_forecast import limit_changes


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
