"""More threads for a CPU engine, replayed: the rule's bound (compute scales at most with
its threads) becomes one end of a replay whose other end is the step as fitted, so every
metric the threads move is a stated gain with its interval."""

from __future__ import annotations

import pytest

from servelab.diagnose.findings import Evidence, ExpectedGain, Finding, FindingKind, Severity
from servelab.diagnose.twin_rank import _with_thread_gains
from servelab.sim.policy import EXACT_RESERVE
from servelab.twin import EngineLimits
from servelab.twin.lifting import Objective
from tests.twin.test_whatif import _twin


def _cpu_bound(high: float, kind: FindingKind = FindingKind.CPU_BOUND) -> Finding:
    return Finding(
        kind=kind,
        title="the engine's 2 CPU thread(s) were busy past the knee",
        severity=Severity.WARNING,
        confidence=0.8,
        evidence=[Evidence(what="engine cpu", value="2.0", source="test")],
        explanation="busy threads",
        expected_gain=ExpectedGain(
            factor=high,
            metric="total throughput",
            at="concurrency 16",
            source="engine threads",
            text=f"at most {high:.2g}x",
            low=1.0,
            high=high,
        ),
    )


def test_more_threads_are_replayed_between_no_gain_and_a_step_shorter_by_the_threads():
    limits = EngineLimits(EXACT_RESERVE, running_cap=16, batch_tokens=2048)
    twin, _ = _twin(limits)
    objective = Objective.of(twin.levels, None)
    finding = _with_thread_gains(_cpu_bound(2.0), twin, objective)
    replayed = {g.metric: g for g in finding.expected_gains if g.source != "engine threads"}
    assert {"median TPOT", "total throughput"} <= set(replayed), finding.expected_gains
    tpot = replayed["median TPOT"]
    # the near end is the run as fitted (no gain), the far end every step half as long
    assert tpot.low == pytest.approx(1.0, abs=0.05) and tpot.high == pytest.approx(2.0, rel=0.1)
    assert tpot.factor == pytest.approx(2**0.5, rel=0.1)
    throughput = replayed["total throughput"]
    assert 1.0 < throughput.factor <= 2.0 and throughput.high <= 2.0 * 1.05
    assert any(e.what == "more threads in the replay" for e in finding.evidence)


def test_a_finding_with_no_threads_to_give_or_of_another_kind_is_left_as_it_was():
    limits = EngineLimits(EXACT_RESERVE, running_cap=16, batch_tokens=2048)
    twin, _ = _twin(limits)
    objective = Objective.of(twin.levels, None)
    unmoved = _cpu_bound(1.0)
    assert _with_thread_gains(unmoved, twin, objective) is unmoved
    other = _cpu_bound(2.0, FindingKind.RUNNING_REQUEST_CAP)
    assert _with_thread_gains(other, twin, objective) is other
