"""`prefix_cache`: the engine hit its prefix cache well below what the workload could reuse.

The workload knows which prompt tokens repeat an earlier prompt's prefix, in whole blocks
of the engine's cache (`bench.prefix`): the ideal hit rate. The engine's counters give
the rate it hit over each level. A level whose measured rate falls well short of its
ideal has prompts prefilled again that a cache would have served; why, by the evidence:

- **the cache is off**: the engine says so (vLLM's cache_config_info, its command's
  `--no-enable-prefix-caching`, SGLang's `--disable-radix-cache`, the spec's
  `prefix_cache: false`), or it hit nothing at all;
- **evicted under KV pressure**: it hit some, while its KV cache ran full or it preempted
  requests: cached blocks were freed for running requests before they were reused;
- **a router spreading sessions** over several engines (data parallel): each engine sees
  only part of the repeats; named where the spec sets more than one replica.

A workload whose shared prefixes are shorter than a block is a different gap: the ideal
itself is low beside the tokens it shares, said as an info with the block size.

The TTFT the cache would save: the prefill of the missed tokens, by the model where it is
known, else at most the lightest level's TTFT in proportion (prefill grows about linearly
with the prompt at these lengths; TTFT also holds what is not prefill, so this bound is
high).
"""

from __future__ import annotations

from servelab.bench.prefix import PrefixCacheLevel
from servelab.diagnose.actions import flag_name_action, knob_action, text_action
from servelab.diagnose.facts import LevelFacts, RunFacts
from servelab.diagnose.findings import (
    Action,
    ActionTarget,
    Evidence,
    ExpectedGain,
    Finding,
    FindingKind,
    Severity,
    Tally,
)
from servelab.diagnose.signals import fmt

__all__ = ["KV_FULL", "MIN_IDEAL", "MISSED_SHARE", "OFF_RATE", "rule"]

MIN_IDEAL = 0.1
"""A workload that could reuse under a tenth of its prompt tokens has too little to gain
from its prefix cache for a miss to matter."""
MISSED_SHARE = 0.5
"""Measured below half the ideal: the engine served from cache less than half of what it
could. Between runs of one workload the hit rate moves with eviction order and timing; a
shortfall of half is far outside that and is a cause, not noise."""
OFF_RATE = 0.01
"""A hit rate under 1% where the ideal is above MIN_IDEAL: the cache did not serve at all."""
KV_FULL = 0.9
"""KV usage at or above 90% in a level: the cache ran full, and an engine evicts the
least recently used cached blocks first to make room."""
WARNING_SHARE = 0.3
"""Missed tokens at least 30% of the prompt: a material part of every prefill is redone."""

_WEIGHTS = {"cache": 0.5, "config": 0.4, "kv": 0.3}
_BLOCK_FLAG = {"vllm": "vLLM --block-size", "sglang": "SGLang --page-size"}


def rule(facts: RunFacts) -> list[Finding]:
    read = [(lv, pc) for lv in facts.measured if (pc := _counted(lv)) is not None]
    if not read:
        return _unaligned(facts)
    missed = [(lv, pc) for lv, pc in read if _short(pc)]
    if not missed:
        return _unaligned(facts)
    lv, pc = max(missed, key=lambda pair: _missed_share(pair[1]))
    ideal, hit = pc.ideal_hit_rate or 0.0, pc.hit_rate or 0.0
    tally = Tally()
    tally.add("cache", _WEIGHTS["cache"], [_rate_evidence(lv, p) for lv, p in missed])
    off = _off_setting(facts, lv)
    cause, actions = _cause(facts, lv, pc, off, tally)
    gap = _missed_share(pc)
    return [
        Finding(
            kind=FindingKind.PREFIX_CACHE,
            title=f"prefix cache hit {hit:.0%} of prompt tokens at {lv.label} where the "
            f"workload repeats {ideal:.0%}: {cause}",
            severity=Severity.WARNING if gap >= WARNING_SHARE else Severity.INFO,
            confidence=tally.confidence,
            evidence=tally.evidence,
            explanation=_explanation(pc, cause),
            actions=actions,
            expected_gain=_gain(facts, lv, gap),
            missing=_missing(facts, lv),
            levels=[lv.level for lv, _ in missed],
            impact=gap,
        )
    ]


def _counted(lv: LevelFacts) -> PrefixCacheLevel | None:
    """The level's prefix cache where both the ideal and the engine's rate are known."""
    pc = lv.summary.prefix_cache
    if pc is None or pc.hit_rate is None or pc.ideal_hit_rate is None:
        return None
    return pc if pc.ideal_hit_rate >= MIN_IDEAL else None


def _short(pc: PrefixCacheLevel) -> bool:
    return (pc.hit_rate or 0.0) < MISSED_SHARE * (pc.ideal_hit_rate or 0.0)


def _missed_share(pc: PrefixCacheLevel) -> float:
    """Prompt tokens the ideal cache serves and the engine did not, as a share."""
    return max(0.0, (pc.ideal_hit_rate or 0.0) - (pc.hit_rate or 0.0))


def _rate_evidence(lv: LevelFacts, pc: PrefixCacheLevel) -> Evidence:
    return Evidence(
        what=f"prefix-cache hit rate at {lv.label}, against the workload's ideal "
        f"{pc.ideal_hit_rate:.1%} (blocks of {pc.block_tokens}: {pc.block_source})",
        value=fmt(100 * (pc.hit_rate or 0.0)),
        unit="%",
        source=f"engine metrics ({pc.engine}) level {lv.level}: hits / queries",
    )


def _off_setting(facts: RunFacts, lv: LevelFacts) -> Evidence | None:
    """Where the engine, its command or its spec says the prefix cache is off."""
    engine = lv.engine
    if engine is not None and engine.prefix_caching is False:
        return Evidence(
            what="prefix caching, as the engine reports it",
            value="off",
            source=f"engine metrics ({engine.engine}): cache_config_info",
        )
    setting = facts.engine.resolved.get("prefix_cache")
    if setting is not None and setting.value is False:
        return Evidence(what="prefix caching, as configured", value="off", source=setting.source)
    return None


def _cause(
    facts: RunFacts, lv: LevelFacts, pc: PrefixCacheLevel, off: Evidence | None, tally: Tally
) -> tuple[str, list[Action]]:
    """The cause the evidence names, its evidence added to `tally`, and its actions."""
    enable = knob_action(
        facts.engine, "prefix_cache", True, "turn the prefix cache on to reuse repeated prompts"
    )
    if off is not None:
        tally.add("config", _WEIGHTS["config"], [off])
        return "the cache is off", [enable]
    full = _kv_pressure(lv)
    if (pc.hit_rate or 0.0) < OFF_RATE:
        if full:
            tally.note(full[0])
        return "it served nothing from cache (off, or not supported here)", [enable]
    if full:
        tally.add("kv", _WEIGHTS["kv"], full)
        bigger = flag_name_action(
            facts.engine,
            "kv_cache_tokens",
            "a larger KV cache, so cached prefixes outlive the running requests",
        )
        return "cached prefixes were evicted under KV pressure", [bigger]
    replicas = facts.engine.resolved.get("dp")
    if replicas is not None and isinstance(replicas.value, int) and replicas.value > 1:
        tally.add(
            "config",
            _WEIGHTS["config"],
            [Evidence(what="data-parallel replicas", value=replicas.value, source=replicas.source)],
        )
        route = text_action(
            "route requests that share a prefix (a conversation's turns) to the same replica"
        )
        return "requests sharing a prefix were spread over replicas", [route]
    return "the cause is not in the evidence read", [
        text_action(
            "check the engine's prefix-cache settings and its log for evictions; compare "
            "a run at lower load, where eviction is rarer"
        )
    ]


def _kv_pressure(lv: LevelFacts) -> list[Evidence]:
    found = []
    engine = lv.engine
    if engine is not None and (engine.kv_usage_max or 0.0) >= KV_FULL:
        found.append(
            Evidence(
                what=f"KV cache usage (max) at {lv.label}",
                value=fmt(100 * (engine.kv_usage_max or 0.0)),
                unit="%",
                source=f"engine metrics ({engine.engine}) level {lv.level}",
            )
        )
    if lv.preemptions:
        found.append(
            Evidence(
                what=f"preempted requests at {lv.label}",
                value=fmt(lv.preemptions),
                unit="requests",
                source=f"engine metrics level {lv.level}",
            )
        )
    return found


def _explanation(pc: PrefixCacheLevel, cause: str) -> str:
    return (
        f"Of this level's {pc.prompt_tokens:,} prompt tokens, {pc.shareable_tokens:,} "
        f"({pc.ideal_hit_rate:.0%}) repeat the start of an earlier prompt in whole blocks of "
        f"{pc.block_tokens} tokens, which a prefix cache serves without prefilling them "
        f"again; the engine's own counters say it served {pc.hit_rate:.0%}. Here "
        f"{cause}. Every missed token is prefilled once more, which lengthens TTFT and "
        "takes compute from the running requests."
    )


def _gain(facts: RunFacts, lv: LevelFacts, gap: float) -> ExpectedGain | None:
    """Median TTFT at the lightest level with the missed tokens served from cache."""
    light = (facts.closed or facts.measured)[0]
    ttft = light.summary.median_ttft_ms
    if not ttft or gap <= 0:
        return None
    prompt = light.input_tokens
    if facts.model is not None:
        saved = facts.model.prefill_ms(prompt) - facts.model.prefill_ms(prompt * (1 - gap))
        how = "the model's prefill of the missed tokens"
    else:
        saved = ttft * gap
        how = "the lightest TTFT in proportion to the missed tokens (an upper bound)"
    after = max(ttft - max(saved, 0.0), 1e-3)
    factor = ttft / after
    if factor <= 1.0:
        return None
    return ExpectedGain(
        factor=fmt(factor),
        metric="median TTFT",
        at=light.label,
        source=f"prefix cache: {gap:.0%} of prompt tokens more from cache; {how}",
        text=f"median TTFT at {light.label} from {ttft:,.0f} ms to about {after:,.0f} ms",
        low=1.0,
        high=fmt(factor),
    )


def _missing(facts: RunFacts, lv: LevelFacts) -> list[str]:
    missing = []
    if lv.engine is None or lv.engine.kv_usage_max is None:
        missing.append(f"KV usage at {lv.label}: not read; eviction cannot be told from off")
    if facts.missing.get("model"):
        missing.append(f"model: {facts.missing['model']}; the TTFT saved is an upper bound")
    return missing


def _unaligned(facts: RunFacts) -> list[Finding]:
    """An info where the workload shares prefixes shorter than the engine's blocks: the
    ideal itself is low beside the tokens it shares."""
    for lv in facts.measured:
        pc = lv.summary.prefix_cache
        if pc is None or not pc.prompt_tokens or pc.block_tokens <= 1:
            continue
        shared = pc.shared_tokens / pc.prompt_tokens
        ideal = pc.ideal_hit_rate or 0.0
        if shared < MIN_IDEAL or ideal >= MISSED_SHARE * shared:
            continue
        flag = _BLOCK_FLAG.get(facts.engine.name or "", "the engine's block size")
        return [
            Finding(
                kind=FindingKind.PREFIX_CACHE,
                title=f"the workload repeats {shared:.0%} of its prompt tokens, but only "
                f"{ideal:.0%} in whole blocks of {pc.block_tokens}",
                severity=Severity.INFO,
                confidence=0.5,
                evidence=[
                    Evidence(
                        what=f"repeated prompt tokens at {lv.label}",
                        value=fmt(100 * shared),
                        unit="%",
                        source=f"the workload, level {lv.level}",
                    ),
                    Evidence(
                        what=f"of them in whole blocks of {pc.block_tokens}",
                        value=fmt(100 * ideal),
                        unit="%",
                        source=pc.block_source,
                    ),
                ],
                explanation=(
                    "A prefix cache stores whole blocks, so a shared prefix shorter than a "
                    "block, or the part of one past its last whole block, is prefilled "
                    "again for every request."
                ),
                actions=[
                    text_action(
                        f"a smaller cache block ({flag}), where its attention backend "
                        "allows, or longer shared prefixes (a system prompt of whole blocks)",
                        ActionTarget.ENGINE,
                    )
                ],
                levels=[lv.level],
                impact=shared - ideal,
            )
        ]
    return []
