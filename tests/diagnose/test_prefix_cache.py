"""`prefix_cache` on hand-built runs: the engine's hit rate against the workload's ideal.

Two levels of 1,024-token prompts whose first 768 tokens repeat an earlier prompt (a
system prompt): in blocks of 16 the ideal hit rate is 768 / 1,024 = 75%.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servelab.bench.prefix import PrefixCacheLevel
from servelab.diagnose import Diagnosis
from servelab.diagnose.findings import Finding, FindingKind, Severity
from tests.diagnose.builders import diagnose, kinds, level, summary, telemetry, write_run

PROMPT = 1024
SHARED = 768


def _cache(hit_rate: float | None, *, block: int = 16, shared: int = SHARED) -> PrefixCacheLevel:
    prompt = 64 * PROMPT
    shareable = 64 * ((min(shared, PROMPT - 1) // block) * block)
    return PrefixCacheLevel(
        block_tokens=block,
        block_source="test",
        prompt_tokens=prompt,
        shared_tokens=64 * shared,
        shareable_tokens=shareable,
        ideal_hit_rate=shareable / prompt,
        queries=float(prompt) if hit_rate is not None else None,
        hits=prompt * hit_rate if hit_rate is not None else None,
        hit_rate=hit_rate,
        engine="vllm" if hit_rate is not None else None,
    )


def _run(
    tmp_path: Path,
    hit_rates: tuple[float | None, float | None],
    *,
    engine: dict[str, Any] | None = None,
    command: list[str] | None = None,
    **cache: Any,
) -> Diagnosis:
    counts = {"running_mean": 4.0, "running_max": 4.0, "queued_max": 0.0, **(engine or {})}
    levels = [
        level(
            i,
            c,
            total_tps=1000.0 * c,
            tpot_ms=20.0,
            ttft_ms=200.0,
            input_len=PROMPT,
            output_len=64,
            telemetry=telemetry(engine=counts),
            prefix_cache=_cache(rate, **cache),
        )
        for i, (c, rate) in enumerate(zip((1, 8), hit_rates, strict=True))
    ]
    run = summary(
        levels,
        engine={"engine": "vllm", "command": command or ["vllm", "serve", "m"]},
        input_len=PROMPT,
        output_len=64,
    )
    return diagnose(write_run(tmp_path, run))


def _prefix(found: Diagnosis) -> Finding:
    finding = next((f for f in found.findings if f.kind is FindingKind.PREFIX_CACHE), None)
    assert finding is not None, kinds(found)
    return finding


def test_a_cache_turned_off_in_the_command_is_named_with_the_flag_that_turns_it_on(
    tmp_path: Path,
):
    found = _run(tmp_path, (0.0, 0.0), command=["vllm", "serve", "m", "--no-enable-prefix-caching"])
    finding = _prefix(found)
    assert "the cache is off" in finding.title
    assert finding.severity is Severity.WARNING  # 75% of every prompt prefilled again
    assert finding.actions[0].flags == ["--enable-prefix-caching"]
    assert any(e.source == "engine command: --no-enable-prefix-caching" for e in finding.evidence)
    assert finding.levels == [0, 1]
    gain = finding.expected_gain
    # no model: at most the lightest TTFT less 75% of it, 4x
    assert gain is not None and gain.high == 4.0 and gain.low == 1.0


def test_the_engines_own_report_that_caching_is_off_is_evidence(tmp_path: Path):
    finding = _prefix(_run(tmp_path, (0.0, 0.0), engine={"prefix_caching": False}))
    assert "the cache is off" in finding.title
    assert any("cache_config_info" in e.source for e in finding.evidence)


def test_hits_lost_while_the_kv_cache_ran_full_are_eviction(tmp_path: Path):
    finding = _prefix(_run(tmp_path, (0.7, 0.2), engine={"kv_usage_max": 0.98}))
    assert "evicted under KV pressure" in finding.title
    assert finding.levels == [1]  # 70% of 75% at the lightest level is not a shortfall
    assert finding.actions[0].knob == "kv_cache_tokens"


def test_a_rate_near_the_ideal_is_no_finding(tmp_path: Path):
    found = _run(tmp_path, (0.74, 0.6))
    assert FindingKind.PREFIX_CACHE.value not in kinds(found)


def test_without_the_engines_counters_nothing_is_said_of_its_hits(tmp_path: Path):
    found = _run(tmp_path, (None, None))
    assert FindingKind.PREFIX_CACHE.value not in kinds(found)


def test_prefixes_shorter_than_a_block_are_said_as_the_workloads_own_gap(tmp_path: Path):
    """100 shared tokens of 1,024 is 10% of the prompt, none of it in whole 128-token
    blocks: the engine cannot hit it, whatever its cache does."""
    found = _run(tmp_path, (None, None), block=128, shared=110)
    finding = _prefix(found)
    assert finding.severity is Severity.INFO
    assert "in whole blocks of 128" in finding.title
    assert "--block-size" in finding.actions[0].text
