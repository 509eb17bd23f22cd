"""diagnose on the real vLLM, one planted limit each: its running-request cap, its KV
capacity and its step budget named first and acted on, and the cache's and the budget's
predicted gains checked by a second run that applied the action (the cap action's is
checked by the tuning study's second trial, tests/vllm/test_tune.py).

Reuses the session's vLLM engines and their sweeps; no launch or bench of its own.
"""

from __future__ import annotations

import pytest

from servelab.bench.session import BenchOutcome
from servelab.diagnose import DiagnoseOptions, diagnose_run
from servelab.diagnose.document import Diagnosis
from servelab.diagnose.findings import ActionTarget, Finding, FindingKind
from tests.vllm.conftest import Rerun

pytestmark = pytest.mark.timing


def _planted_notes(rerun: Rerun) -> list[str]:
    planted = diagnose_run(rerun.planted.run_dir, DiagnoseOptions(engine="vllm"), write=False)
    return planted.notes


def _check(rerun: Rerun):
    diagnosis = diagnose_run(rerun.applied.run_dir, DiagnoseOptions(engine="vllm"))
    check = diagnosis.prediction
    assert check is not None and check.applies.endswith(f":{rerun.finding.kind.value}"), check
    assert check.measured is not None and check.low is not None and check.high is not None
    return diagnosis, check


def test_the_capped_sweep_is_diagnosed_as_the_running_request_cap(
    vllm_capped_sweep: BenchOutcome,
):
    diagnosis = diagnose_run(vllm_capped_sweep.run_dir, DiagnoseOptions(engine="vllm"), write=True)
    top = diagnosis.findings[0]
    assert top.kind == "running_request_cap", [f.kind for f in diagnosis.findings]
    assert any("--max-num-seqs" in action.flags for action in top.actions), top.actions
    assert (vllm_capped_sweep.run_dir / "diagnosis.json").exists()


def test_the_kv_limited_engine_is_diagnosed_as_kv_capacity(vllm_kv_limited_sweep: BenchOutcome):
    diagnosis = diagnose_run(vllm_kv_limited_sweep.run_dir, DiagnoseOptions(engine="vllm"))
    first = _first_engine_finding(diagnosis)
    assert first.kind == "kv_capacity", [f.kind for f in diagnosis.findings]


def test_the_cache_kv_capacity_asked_for_gives_the_gain_it_predicted(vllm_kv_rerun: Rerun):
    """Every gain the cache's action stated lands in its interval, or its measured factor's
    own noise band reaches into it (on two cores a level of 32 streams measured 1.34x with
    a band of 0.59-2.53 in one run, 2.25x in another: the two cannot be told apart). The
    heavy level holds enough requests for a band (KV_LEVELS): without one, a factor
    outside the interval is "outside", and one such run measured 2.69x against 1.34-2.30."""
    diagnosis, _ = _check(vllm_kv_rerun)
    for each in diagnosis.predictions:
        assert each.verdict in ("inside", "within noise"), each.text
    kv = [f for f in diagnosis.findings if f.kind is FindingKind.KV_CAPACITY]
    assert not kv or kv[0].severity != "critical", "the cache it asked for still binds"


def _first_engine_finding(diagnosis: Diagnosis) -> Finding:
    """The first finding an engine setting can act on (an available knob, not conditional
    on a setting the run does not show): the one a user or `tune` would try. A finding on
    the load or outside the engine (the client on two busy cores) may rank above it."""
    return next(
        f
        for f in diagnosis.findings
        if any(
            a.target is ActionTarget.ENGINE and a.knob and a.available and not a.conditional
            for a in f.actions
        )
    )


def test_the_planted_step_budget_is_named_first_with_its_flag(vllm_budget_rerun: Rerun):
    diagnosis = diagnose_run(vllm_budget_rerun.planted.run_dir, DiagnoseOptions(engine="vllm"))
    top = _first_engine_finding(diagnosis)
    assert top.kind == "batch_token_budget", [f.kind for f in diagnosis.findings]
    assert any("--max-num-batched-tokens" in action.flags for action in top.actions), top.actions


def test_the_budget_its_action_asked_for_cuts_ttft_and_more_is_asked_where_it_binds(
    vllm_budget_rerun: Rerun,
):
    """Every gain the action stated is read back, the headline's factor is a gain well
    above this machine's wander between two launches (about 1.5x), and each lands in its
    interval: the twin's replay at the new budget, spanning the fit and a reading in which
    a step's cost grows with its prompt tokens, since the run's steps held at most 32 (kept
    pair: median TTFT 5.3x (3.3-11.1) predicted, 3.7x measured; when the rule costed the
    step itself it promised 7.2x (4.3-12) where a CI run measured 3.8x)."""
    diagnosis, check = _check(vllm_budget_rerun)
    assert check.measured > 2.0, check.text
    # by replay, every metric the budget moves is stated; where the replay did not
    # reproduce the planted run (a noisy one), the rule's one gain stands, and it says so
    replayed = not any("does not reproduce" in note for note in _planted_notes(vllm_budget_rerun))
    assert len(diagnosis.predictions) >= (2 if replayed else 1), diagnosis.predictions
    for each in diagnosis.predictions:
        assert each.verdict in ("inside", "within noise"), each.text
    # The action raises the budget at most 8x (256 tokens), below the 8 x 777 prompt tokens
    # of the heaviest level: where the rerun still reads the budget, it asks for more again.
    budget = [f for f in diagnosis.findings if f.kind is FindingKind.BATCH_TOKEN_BUDGET]
    for finding in budget:
        flags = next(a.flags for a in finding.actions if a.flags)
        assert int(flags[1]) > 256, finding.actions
