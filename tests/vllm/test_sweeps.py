"""Sweeps on the real vLLM: its running-request cap and its KV capacity, seen in its own
/metrics and in its log's stats lines."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from statistics import median

import pytest

from servelab.bench.results import LevelSummary
from servelab.bench.session import BenchConfig, BenchOutcome, run_bench
from servelab.bench.trial import for_engine
from servelab.diagnose import find_knee
from servelab.engines.cpu_share import SCHEDULER_NICE
from servelab.telemetry.summary import MIN_ENGINE_SAMPLES, EngineLevel
from tests.conftest import SERVELAB
from tests.vllm.conftest import CAP, CAPPED_LEVELS, KV_BLOCKS, SWEEP_WORKLOAD, VllmEngine

pytestmark = pytest.mark.timing


def _engine(level: LevelSummary) -> EngineLevel:
    assert level.telemetry is not None
    return level.telemetry.engine


def _running_with_a_queue(run_dir: Path, *, level: int) -> list[float]:
    """vLLM's running gauge in the scrapes of `level` that found at least CAP requests
    waiting: whenever it has a queue the engine should run its cap."""
    sends = [
        record["t_send_ns"]
        for record in map(json.loads, (run_dir / "requests.jsonl").read_text().splitlines())
        if record["level"] == level and not record["warmup"]
    ]
    rows = map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
    return [
        row["running"]
        for row in rows
        if row["kind"] == "metrics"
        and min(sends) <= row["t_ns"] <= max(sends)
        and row["queued"] >= CAP
    ]


def test_the_capped_sweep_fills_the_cap_queues_above_it_and_knees_at_it(
    vllm_capped_sweep: BenchOutcome,
):
    levels = vllm_capped_sweep.summary.levels
    assert [level.max_concurrency for level in levels] == list(CAPPED_LEVELS)
    # launched by `servelab tune` as a user's would be: the load generator kept its cores
    # by the adapter's own share, not by anything the test harness set
    engine_record = vllm_capped_sweep.summary.engine
    assert engine_record is not None
    share = engine_record["cpu_share"]
    assert share["scheduler_pids"] and share["scheduler_nice"] == SCHEDULER_NICE
    assert share["client_cpus"] and share["engine_cpus"]
    assert all(level.failed == 0 and level.completed > 0 for level in levels)
    engines = [_engine(level) for level in levels]
    below, at, above = engines[0], engines[1], engines[-1]
    # Each level's counts stand on /metrics alone. A busy vLLM on two cores renders its page
    # slowly (up to 0.9 s measured at 64 streams), so the scraper asks less often there:
    # the level needs the summary's minimum, not a fixed rate.
    samples = [(e.engine, e.samples, e.reason) for e in engines]
    assert all(e.available and e.engine == "vllm" for e in engines), samples
    assert all(e.samples >= MIN_ENGINE_SAMPLES for e in engines), samples
    assert all(e.sources["running"] == "metrics" for e in engines)
    # running reaches the cap and never passes it
    assert [e.running_max for e in engines] == [1, CAP, CAP, CAP]
    # nothing waits below the cap; far above it the rest wait
    assert below.queued_max == 0
    assert above.queued_max is not None and above.queued_max > 4 * CAP
    assert above.queued_mean is not None and at.queued_mean is not None
    assert above.queued_mean > at.queued_mean
    # with requests waiting the cap is full. vLLM reads its gauge after a step, before the
    # next one admits a waiting request in place of one that finished, so it may show one
    # fewer than the cap then (measured at a cap of 8: means 7.2-7.8 over such scrapes)
    with_queue = _running_with_a_queue(vllm_capped_sweep.run_dir, level=len(levels) - 1)
    assert len(with_queue) >= 3 and median(with_queue) >= CAP - 1
    # Above the cap throughput all but stops growing: uncapped, 8 -> 64 would double it
    # per doubling; here it adds little. On two shared cores the cap is not always full
    # (the client's round trips leave slots empty), so the per-doubling growth measured
    # 1.03-1.11 at a cap of 8 against the knee rule's 1.10: the knee is at the cap when
    # the rule finds one, and the growth above it stays far below an uncapped engine's.
    # At exactly the cap a closed loop leaves a slot empty from a finish to the client's
    # next send, which a queue above the cap fills: throughput may still grow to the first
    # level above the cap (a CI run: +20% per doubling from 2 to 8, +6% from 8 to 64), so
    # the knee is at the cap or there.
    knee = find_knee(levels)
    growth_above_cap = knee.growth_per_doubling[-1]
    assert growth_above_cap is not None and growth_above_cap < 1.25, knee.explanation
    first_above = next(c for c in CAPPED_LEVELS if c > CAP)
    assert not knee.found or CAP <= knee.concurrency <= first_above, knee.explanation


def test_the_log_stats_alone_show_running_and_waiting_requests(
    vllm_kv_limited: VllmEngine, tmp_path: Path
):
    """No /metrics scraped: vLLM's `Engine 000: ...` line (every second) gives the gauges.
    The KV-limited engine runs what its 12 blocks hold (a request of 512 + 128 tokens takes
    five) and queues the rest."""
    config = for_engine(
        BenchConfig(
            url=vllm_kv_limited.engine.url,
            levels=[16.0],
            duration_s=6.0,
            warmup=0,
            stream=False,
            workload=SWEEP_WORKLOAD,
            out=tmp_path / "run",
        ),
        vllm_kv_limited.engine,
        metrics=False,
    )
    (level,) = run_bench(config, log_stats=vllm_kv_limited.watched.log_stats).summary.levels
    engine = _engine(level)
    assert (engine.available, engine.engine, engine.samples) == (True, "vllm", 0)
    assert engine.log_samples >= 4
    assert set(engine.sources.values()) == {"log"}
    assert engine.running_max is not None and 1 <= engine.running_max < KV_BLOCKS // 2
    assert engine.queued_max is not None and engine.queued_max >= 8
    assert engine.gen_throughput_mean is not None and engine.gen_throughput_mean > 0


def test_a_bench_attached_by_its_log_reads_what_the_launched_run_reads(
    vllm_kv_limited: VllmEngine, tmp_path: Path
):
    """The same engine as if servelab had not launched it: `bench --url --engine-log` on
    the log file its launch writes, no /metrics. The log's stats lines give the level the
    gauges the launched run's reader gives it, and the events the log said while the load
    ran are the ones the launch's own matcher read over the same lines."""
    engine = vllm_kv_limited.engine
    matcher = vllm_kv_limited.watched.matcher
    assert matcher is not None
    seen_before = {(e.kind, e.text): e.count for e in matcher.events}
    out = tmp_path / "attached"
    done = subprocess.run(
        [
            *SERVELAB,
            "bench",
            "--url",
            engine.url,
            "--engine-log",
            str(engine.log_path),
            "--no-metrics",
            "--no-stream",
            "--concurrency",
            "16",
            "--duration",
            "6s",
            "--warmup",
            "0",
            "--input-len",
            str(SWEEP_WORKLOAD.input_len),
            "--output-len",
            str(SWEEP_WORKLOAD.output_len),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    level = LevelSummary.model_validate(json.loads((out / "summary.json").read_text())["levels"][0])
    attached = _engine(level)
    assert (attached.available, attached.engine) == (True, "vllm")
    assert attached.log_samples >= 4 and set(attached.sources.values()) == {"log"}
    assert attached.running_max is not None and 1 <= attached.running_max < KV_BLOCKS // 2
    assert attached.queued_max is not None and attached.queued_max >= 8
    new_in_launch = {
        (e.kind.value, e.text)
        for e in matcher.events
        if e.count > seen_before.get((e.kind, e.text), 0)
    }
    events = json.loads((out / "engine_events.json").read_text())
    assert {(e["kind"], e["text"]) for e in events["events"]} == new_in_launch


def test_the_kv_limited_engine_fills_its_cache_and_queues_the_rest(
    vllm_kv_limited_sweep: BenchOutcome,
):
    outcome = vllm_kv_limited_sweep
    light, full = (_engine(level) for level in outcome.summary.levels)
    assert light.queued_max == 0 and light.kv_usage_max is not None
    assert full.kv_usage_max is not None and full.kv_usage_max > 0.85
    assert full.queued_mean is not None and full.queued_mean > 1
    # each running request holds at least one block: the cache, not the cap, limits them
    assert full.running_max is not None and full.running_max < KV_BLOCKS
    assert light.kv_usage_max < full.kv_usage_max
