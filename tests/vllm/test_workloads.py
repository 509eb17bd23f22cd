"""The workloads people run, on the real vLLM: conversations and trace replay against its
prefix cache, measured per level beside the workload's own ideal hit rate."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from servelab.bench.capacity import CapacityPlan
from servelab.bench.load import LoadMode
from servelab.bench.prefix import PrefixCacheLevel
from servelab.bench.session import BenchConfig, BenchOutcome, run_bench
from servelab.bench.traces import load_replay
from servelab.bench.trial import for_engine
from servelab.bench.workload import WorkloadSpec
from servelab.diagnose import DiagnoseOptions, diagnose_run
from servelab.diagnose.findings import FindingKind
from tests.traces import MOONCAKE
from tests.vllm.conftest import (
    CONVERSATIONS,
    KV_BLOCK_TOKENS,
    WORKLOADS_CAP,
    Rerun,
    VllmEngine,
    sweep_without_pauses,
)

pytestmark = pytest.mark.timing

NEAR_IDEAL = 0.10
"""The issue's bar: the measured hit rate within 10 points of the workload's ideal."""


def _once(config: BenchConfig, engine: VllmEngine) -> BenchOutcome:
    """One sweep, never repeated: a second one of the same prompts would hit the first's
    cache (timing does not move a hit rate, so a pause of the machine is no reason to)."""
    return run_bench(for_engine(config, engine.engine, metrics=True))


def _cache(outcome: BenchOutcome) -> PrefixCacheLevel:
    (level,) = outcome.summary.levels
    assert level.failed == 0 and level.completed, level.errors
    cache = level.prefix_cache
    assert cache is not None and cache.hit_rate is not None, cache
    assert cache.block_tokens == KV_BLOCK_TOKENS, cache.block_source  # vLLM's own report
    return cache


def test_conversations_hit_the_cache_as_often_as_the_history_allows(
    vllm_workloads: VllmEngine, tmp_path: Path
):
    """Measured by hand on this engine: 74.2% ideal, 74.2% hit."""
    config = dataclasses.replace(CONVERSATIONS, url=vllm_workloads.url, out=tmp_path / "run")
    outcome = _once(config, vllm_workloads)
    cache = _cache(outcome)
    assert cache.ideal_hit_rate is not None and cache.ideal_hit_rate > 0.6
    assert abs(cache.hit_rate - cache.ideal_hit_rate) <= NEAR_IDEAL, cache
    (level,) = outcome.summary.levels
    assert level.turns is not None and [t.turn for t in level.turns] == [0, 1, 2]
    inputs = [t.mean_input_tokens or 0 for t in level.turns]
    assert inputs == sorted(inputs) and inputs[2] - inputs[0] > 2 * 128  # the history grows


def test_a_mooncake_trace_replays_with_its_shared_blocks_hitting_the_cache(
    vllm_workloads: VllmEngine, tmp_path: Path
):
    """The fixture's 20 requests over 3.8 s, sent at their timestamps: its repeated 512-token
    blocks are whole blocks of vLLM's 128, so the engine can hit all of them (measured by
    hand: 58.3% ideal, 59.6% hit)."""
    replay = load_replay(MOONCAKE, speed=1.0, window=(None, None))
    config = BenchConfig(
        url=vllm_workloads.url,
        name="vllm-mooncake",
        mode=LoadMode.REQUEST_RATE,
        levels=[replay.rate],
        warmup=0,
        workload=WorkloadSpec(dataset="trace", path=MOONCAKE, replay=replay),
        out=tmp_path / "run",
    )
    outcome = _once(config, vllm_workloads)
    cache = _cache(outcome)
    (level,) = outcome.summary.levels
    assert level.completed == 20
    assert cache.ideal_hit_rate is not None and cache.ideal_hit_rate > 0.4
    assert abs(cache.hit_rate - cache.ideal_hit_rate) <= NEAR_IDEAL, cache


def test_with_the_cache_off_nothing_hits_and_diagnose_names_the_flag(vllm_budget_rerun: Rerun):
    """The step budget's second engine runs with `prefix_cache: false`
    (`--no-enable-prefix-caching`): the same conversations hit nothing of their 74%."""
    assert vllm_budget_rerun.uncached is not None
    cache = _cache(vllm_budget_rerun.uncached)
    assert cache.ideal_hit_rate is not None and cache.ideal_hit_rate > 0.6
    assert cache.hit_rate < 0.02, cache
    diagnosis = diagnose_run(vllm_budget_rerun.uncached.run_dir, DiagnoseOptions(engine="vllm"))
    finding = next(f for f in diagnosis.findings if f.kind is FindingKind.PREFIX_CACHE)
    assert "the cache is off" in finding.title, finding.title
    assert finding.actions[0].flags == ["--enable-prefix-caching"], finding.actions


def test_capacity_under_a_ttft_slo_is_the_running_cap(vllm_workloads: VllmEngine, tmp_path: Path):
    """A cap of C = 4 running requests; 64-token prompts, 256-token replies, so a request
    holds its slot for S, about 256 decode steps (the cap's own median E2E, measured
    first). SLO: TTFT <= S / 4 for 90% of requests.

    - N <= 4 concurrent: each request is admitted at once (a finished request's client
      sends its next into the slot it freed): TTFT is a 64-token prefill, all meet.
    - N = 5: requests of one length admitted together finish together, so each time the
      four running end, one of the five clients has waited the whole S for a slot: one
      request in five reads a TTFT of about S and misses, 80% < 90%. More clients only
      queue more (benchmarks/capacity_search.py: a cap C implies a capacity of
      floor(C / 0.9) = 4). So the search doubles 1, 2, 4, fails at 8, and bisects down to
      the cap: 4 holds, and no load above it does.

    The bound is relative to S, since milliseconds are wrong on a faster or slower machine
    (one CI run read S of about 1.2 s, another 463 ms), and it sits between two readings
    far apart: at or below the cap the p90 TTFT read 12-33 ms in 17 levels (S / 4 was
    142-172 ms), at 5 streams 502-856 ms. A machine that wanders by half moves neither
    across it.

    TTFT needs the engine's `uni` executor (`vllm_workloads`). With a Worker process, a
    third of the levels on two cores came in one burst at their end (TTFT = E2E), and they
    ran slow: an SLO on E2E at 1.5 S then read a capacity of 1 on CI (2 streams at a p90
    of 834 ms against S of 463 ms), and on E2E the machine's wander in a full suite (a
    step of 1.7 ms one minute, 2.5 ms the next) still read 1 where a search a minute
    earlier had read 4. The bursts come back when a third process keeps a core busy at
    normal priority (a busy loop beside the search: one stream read a p90 TTFT of 320 ms,
    equal to its E2E), so this test needs the two cores to itself, as the suite gives it."""
    workload = WorkloadSpec(input_len=64, output_len=256)
    probe = BenchConfig(
        url=vllm_workloads.url,
        levels=[float(WORKLOADS_CAP)],
        duration_s=4.0,
        warmup=8,
        workload=workload,
        out=tmp_path / "probe",
    )
    (at_cap,) = _once(probe, vllm_workloads).summary.levels
    service_ms = at_cap.median_e2e_latency_ms
    assert service_ms is not None, at_cap
    plan = CapacityPlan(slo_ms={"ttft": service_ms / 4}, max_load=16.0)
    config = BenchConfig(
        url=vllm_workloads.url,
        name="vllm-capacity",
        duration_s=8.0,
        warmup=4,
        workload=workload,
        slo_ms=plan.slo_ms,
        capacity=plan,
        out=tmp_path / "run",
    )
    summary = sweep_without_pauses(config, vllm_workloads, pauses_only=True).summary
    capacity = summary.capacity
    assert capacity is not None and capacity.status == "found", capacity
    assert capacity.capacity == WORKLOADS_CAP, capacity.explanation
    assert capacity.failed is not None and capacity.failed.load == WORKLOADS_CAP + 1
    running = [
        level.telemetry.engine.running_max
        for level in summary.levels
        if level.telemetry is not None and (level.max_concurrency or 0) > WORKLOADS_CAP
    ]
    # vLLM's own count: the cap and never more (a level's scrapes may all catch it between
    # steps, reading 0 running: one of four such levels did)
    assert running and max(r or 0 for r in running) == WORKLOADS_CAP
    assert all((r or 0) <= WORKLOADS_CAP for r in running)
