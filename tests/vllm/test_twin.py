"""The twin on the real vLLM runs the suite already makes (no launch of its own): each is
fitted from its own requests (streamed: from the gaps between chunks or from the
end-to-end times, whichever replays closer; answered whole: the end-to-end times) and
replayed under the limits diagnose read.

How close each level comes is benchmarks/twin_fidelity.py's to report (on copies of these
runs kept under benchmarks/results/twin); here the twin must exist, say what it was
fitted from, stay within half of every level's median E2E, and depend on the limits: the
planted step budget, lifted in the replay, must put the heaviest level's TTFT short.

`SERVELAB_KEEP_RUNS=DIR` copies each run directory there.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from servelab.bench.results import BenchSummary
from servelab.diagnose import DiagnoseOptions, diagnose_run
from servelab.diagnose.findings import FindingKind
from servelab.sim.policy import policy_for
from servelab.store import REQUESTS_FILE, TWIN_FILE, RunDir
from servelab.twin import EngineLimits, TwinInputs, TwinResult, build_twin

STREAMED = "streamed"
"""Fitted both ways: from the gaps ("requests") or the end-to-end times, the closer kept."""
RUNS: dict[str, tuple[Callable[[pytest.FixtureRequest], Path], str]] = {
    "kv-limited": (
        lambda r: r.getfixturevalue("vllm_kv_limited_sweep").run_dir,
        "end-to-end times",
    ),
    "kv-applied": (
        lambda r: r.getfixturevalue("vllm_kv_rerun").applied.run_dir,
        "end-to-end times",
    ),
    "budget-planted": (
        lambda r: r.getfixturevalue("vllm_budget_rerun").planted.run_dir,
        STREAMED,
    ),
    "budget-applied": (
        lambda r: r.getfixturevalue("vllm_budget_rerun").applied.run_dir,
        STREAMED,
    ),
    "conversations": (
        lambda r: r.getfixturevalue("vllm_budget_rerun").uncached.run_dir,
        STREAMED,
    ),
}
SANITY = 0.5
"""A level's replayed median E2E within half of the measured: a twin that works at all."""
BAR = 0.25


def _keep(run_dir: Path, name: str) -> None:
    keep = os.environ.get("SERVELAB_KEEP_RUNS")
    if keep:
        shutil.copytree(run_dir, Path(keep) / name, dirs_exist_ok=True)


def _twin(run_dir: Path) -> TwinResult:
    twin = RunDir(run_dir).load(TWIN_FILE, TwinResult)
    assert twin is not None
    return twin


@pytest.mark.parametrize("name", RUNS)
def test_each_vllm_run_is_fitted_from_its_own_requests_and_replayed(
    name: str, request: pytest.FixtureRequest
) -> None:
    run_dir, source = RUNS[name][0](request), RUNS[name][1]
    diagnosis = diagnose_run(run_dir, DiagnoseOptions(engine="vllm"), write=True)
    _keep(run_dir, name)
    assert diagnosis.sources["twin"].available, diagnosis.sources["twin"].detail
    twin = _twin(run_dir)
    if source == STREAMED:
        kept = twin.fit.source
        assert kept in ("requests", "end-to-end times")
        assert any(note.startswith(f"fitted from {kept}, whose replay") for note in twin.notes)
    else:
        assert twin.fit.source == source
    assert twin.policy.name == "vllm" and twin.policy.decodes_in_budget
    assert twin.limit("running_cap") is not None
    # the twin replays the engine, not the client: a level diagnose found client-bound
    # (the load generator's own lag in every E2E, on two busy cores) is not held to it
    client_bound = {
        level
        for f in diagnosis.findings
        if f.kind is FindingKind.CLIENT_BOUND
        for level in f.levels
    }
    for level in twin.levels:
        if level.level in client_bound:
            continue
        error = level.metrics["median_e2e_latency_ms"].error
        assert error is not None and abs(error) <= SANITY, (name, level.load, error)


def test_the_planted_budget_is_what_the_replay_needs(request: pytest.FixtureRequest) -> None:
    """The negative control on a real engine: the same run replayed without its 32-token
    step budget (refitted, so the cost may absorb what it can) puts the heaviest level's
    TTFT short of the measured by more than the bar, and further off than the replay under
    the configured budget: a budget lifted can only let prompts through sooner."""
    run_dir = request.getfixturevalue("vllm_budget_rerun").planted.run_dir
    run = RunDir(run_dir)
    summary = run.load_summary(BenchSummary)
    assert summary is not None
    rows = list(run.iter_jsonl(REQUESTS_FILE))
    diagnose_run(run_dir, DiagnoseOptions(engine="vllm"), write=True)
    read = _twin(run_dir)
    assert read.limit("batch_tokens") == 32, read.limits
    configured = EngineLimits(
        policy_for("vllm"),
        running_cap=read.limit("running_cap"),
        kv_capacity_tokens=read.limit("kv_capacity_tokens"),
        batch_tokens=32,
    )
    lifted = dataclasses.replace(configured, batch_tokens=None)
    errors = []
    for limits in (configured, lifted):
        twin = build_twin(TwinInputs(summary.levels, rows, "vllm", limits, {}))
        errors.append(twin.levels[-1].metrics["median_ttft_ms"].error)
    right, wrong = errors
    assert right is not None and wrong is not None
    assert wrong < -BAR and wrong < right and abs(wrong) > abs(right), errors
