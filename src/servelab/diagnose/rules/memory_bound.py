"""`memory_bound`: the healthy verdict. Decode runs near the time its bytes take to read.

A decode step reads every weight it touches and the KV cache once; when that takes longer
than its FLOPs, the step's floor is memory time. A run whose TPOT is within 1.5x of the
model's, at a batch where the model's step is GPU time (memory, or at large batches
compute), runs near the roofline: the engine is not the problem, and gains come from
moving fewer bytes (smaller weight or KV formats), more FLOPs per byte, or more GPUs.
(Near a communication-bound ceiling the verdict is `comm_latency`.) What shows it:

- the model: measured TPOT near its TPOT where its bound is memory (or compute);
- GPU telemetry: DRAM bandwidth (GPM) busy, power well up (evidence for), or DRAM idle
  (against: the model's bytes are not what the engine reads).
"""

from __future__ import annotations

from servelab.diagnose.actions import knob_action
from servelab.diagnose.facts import LevelFacts, RunFacts
from servelab.diagnose.findings import (
    Action,
    Evidence,
    ExpectedGain,
    Finding,
    FindingKind,
    Severity,
    Tally,
)
from servelab.diagnose.rules.launch_overhead import OVERHEAD_RATIO
from servelab.diagnose.signals import fmt
from servelab.diagnose.trace_evidence import kernel_evidence
from servelab.model import Format, KvDtype, weight_plan

__all__ = ["DRAM_BUSY_PCT", "DRAM_IDLE_PCT", "rule"]

DRAM_BUSY_PCT = 50.0
"""GPM DRAM bandwidth utilization above half: the GPU is reading memory most of the time."""
DRAM_IDLE_PCT = 20.0
"""Below a fifth: the GPU is not memory-bound, whatever the model says."""

_WEIGHTS = {"model": 0.6, "telemetry": 0.4}
_GPU_BOUNDS = ("memory", "compute")
_SMALLER_WEIGHTS = {Format.BF16: Format.FP8}


def rule(facts: RunFacts) -> list[Finding]:
    near = [
        lv
        for lv in facts.measured
        if lv.ratio is not None
        and lv.ratio < OVERHEAD_RATIO
        and lv.model is not None
        and lv.model.step.bound in _GPU_BOUNDS
    ]
    busy = [lv for lv in facts.measured if _dram_at_least(lv, DRAM_BUSY_PCT)]
    if not near and not (busy and facts.model is None):
        return []
    tally = Tally()
    tally.add("model", _WEIGHTS["model"], [e for lv in near for e in _near_evidence(lv)])
    tally.add("telemetry", _WEIGHTS["telemetry"], [_dram_evidence(lv) for lv in busy])
    for evidence in kernel_evidence(facts.traces):
        tally.note(evidence)  # which kernel reads the bytes: shown, not counted
    idle = [lv for lv in near if _dram_below(lv, DRAM_IDLE_PCT)]
    for lv in idle:
        against = _dram_evidence(lv)
        against.supports = False
        tally.note(against)
    confidence = tally.confidence * (0.5 if idle else 1.0)
    about = near or busy
    best = min(about, key=lambda lv: lv.ratio or 1.0)
    gains = _what_ifs(facts, best)
    return [
        Finding(
            kind=FindingKind.MEMORY_BOUND,
            title=f"decode runs near the roofline ({_bounds(about)}, {_span(about)})",
            severity=Severity.INFO,
            confidence=round(confidence, 3),
            evidence=tally.evidence,
            explanation=(
                "Each decode step takes about as long as reading its weights and KV cache "
                "at the GPU's memory bandwidth: the engine adds little. To go faster, read "
                "fewer bytes per token (a smaller weight format, an fp8 KV cache at long "
                "contexts, more requests per step) or spread them over more GPUs."
            ),
            actions=[action for action, _ in gains],
            expected_gain=max((gain for _, gain in gains), key=lambda g: g.factor, default=None),
            missing=[f"{k}: {why}" for k, why in facts.missing.items() if k in ("model", "gpu")],
            levels=[lv.level for lv in about],
            impact=min(1.0, 1 / (best.ratio or 1.0)) if best.ratio else 0.5,
        )
    ]


def _bounds(levels: list[LevelFacts]) -> str:
    bounds = sorted({lv.model.step.bound for lv in levels if lv.model is not None})
    return " then ".join(f"{bound}-bound" for bound in bounds) or "memory-bound"


def _span(levels: list[LevelFacts]) -> str:
    if len(levels) == 1:
        return levels[0].label
    return f"{levels[0].label} to {levels[-1].label}"


def _dram(lv: LevelFacts) -> float | None:
    return lv.gpu.gpm_dram_bw_util_mean_pct if lv.gpu is not None else None


def _dram_at_least(lv: LevelFacts, pct: float) -> bool:
    """DRAM utilization measured and at least `pct`; False when not measured."""
    dram = _dram(lv)
    return dram is not None and dram >= pct


def _dram_below(lv: LevelFacts, pct: float) -> bool:
    """DRAM utilization measured and below `pct`; False when not measured."""
    dram = _dram(lv)
    return dram is not None and dram < pct


def _dram_evidence(lv: LevelFacts) -> Evidence:
    return Evidence(
        what=f"DRAM bandwidth utilization (GPM) at {lv.label}",
        value=fmt(_dram(lv) or 0.0),
        unit="%",
        source=f"telemetry level {lv.level}",
    )


def _near_evidence(lv: LevelFacts) -> list[Evidence]:
    assert lv.model is not None and lv.ratio is not None
    step = lv.model.step
    return [
        Evidence(
            what=f"measured / model TPOT at {lv.label}",
            value=fmt(lv.ratio),
            unit="x",
            source=lv.source,
        ),
        Evidence(
            what=f"GPU-busy share of the model's step at batch {lv.batch:.3g} ({step.bound})",
            value=fmt(100 * step.gpu_busy_s / step.step_s) if step.step_s else None,
            unit="%",
            source="model: decode step",
        ),
    ]


def _what_ifs(facts: RunFacts, lv: LevelFacts) -> list[tuple[Action, ExpectedGain]]:
    """Smaller weights and an fp8 KV cache, where the model says they help by 10% or more."""
    model = facts.model
    if model is None:
        return []
    found = []
    now = model.tpot_ms(lv.batch, lv.input_tokens, lv.output_tokens)
    plan = model.deployment.weights
    smaller = _SMALLER_WEIGHTS.get(plan.name)
    candidates: list[tuple[str, object, dict[str, object], str]] = []
    if smaller is not None:
        candidates.append(
            (
                "quantization",
                smaller.value,
                {"weights": weight_plan(smaller)},
                f"{smaller.value} weights",
            )
        )
    if model.deployment.kv_dtype is KvDtype.BF16:
        candidates.append(
            ("kv_cache_dtype", "fp8_e4m3", {"kv_dtype": KvDtype.FP8}, "an fp8 KV cache")
        )
    for knob, value, update, what in candidates:
        view = model.variant(**update)
        if view is None:
            continue
        factor = now / view.tpot_ms(lv.batch, lv.input_tokens, lv.output_tokens)
        if factor < 1.1:
            continue
        gain = ExpectedGain(
            factor=fmt(factor),
            metric=f"decode speed at {lv.label}",
            at=lv.label,
            source="model",
            text=f"{what}: {factor:.2f}x the decode speed at {lv.label}, per the model",
            low=1.0,
            high=fmt(factor),
        )
        found.append((knob_action(facts.engine, knob, value, f"read fewer bytes: {what}"), gain))
    return found
