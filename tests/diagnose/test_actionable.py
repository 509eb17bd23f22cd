"""Findings the user can act on come first; a cap the engine cannot have is never the cause."""

from __future__ import annotations

from pathlib import Path

from servelab.diagnose.actions import knob_action
from servelab.diagnose.engineconf import engine_config
from servelab.diagnose.findings import Action, Finding, FindingKind, Severity
from servelab.diagnose.run import rank
from tests.diagnose.builders import diagnose, kinds, summary, write_run
from tests.diagnose.test_rules import capped_sweep


def test_a_knob_the_engine_lacks_is_said_and_marked_unavailable():
    conf = engine_config("embedded", [], [])
    action = knob_action(conf, "max_running_requests", 64, "raise the running-request cap")
    assert not action.available and not action.flags
    assert "not possible on embedded, which has no setting for max_running_requests" in action.text
    assert "documentation" not in action.text
    there = knob_action(conf, "kv_cache_tokens", 8192, "give the KV cache more room")
    assert there.available and there.flags == ["--cb-num-blocks", "32"]


def _finding(kind: FindingKind, impact: float, *, available: bool) -> Finding:
    return Finding(
        kind=kind,
        title=kind.value,
        severity=Severity.WARNING,
        confidence=0.8,
        evidence=[],
        explanation="",
        actions=[Action(text="do it", available=available)],
        impact=impact,
    )


def test_a_finding_nobody_can_act_on_here_ranks_below_one_they_can():
    blocked = _finding(FindingKind.RUNNING_REQUEST_CAP, 0.9, available=False)
    doable = _finding(FindingKind.KV_CAPACITY, 0.2, available=True)
    assert [f.kind for f in rank([blocked, doable])] == ["kv_capacity", "running_request_cap"]


def test_a_plateau_on_an_engine_without_a_cap_setting_is_not_a_cap(tmp_path: Path):
    sweep = capped_sweep(metrics=False)
    attached = kinds(diagnose(write_run(tmp_path / "a", summary(sweep))))
    assert "running_request_cap" in attached  # unknown engine: the sweep's shape may be a cap
    run = summary(sweep, engine={"engine": "embedded", "command": []}, target_engine="embedded")
    assert "running_request_cap" not in kinds(diagnose(write_run(tmp_path / "e", run)))
