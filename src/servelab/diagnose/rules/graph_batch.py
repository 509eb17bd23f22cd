"""`cuda_graph_batch`: decode batches above the largest CUDA-graph batch run eager.

SGLang and vLLM capture one CUDA graph per decode batch size up to a largest, M (SGLang
`--cuda-graph-max-bs-decode`, `--cuda-graph-max-bs` in older releases; vLLM
`--max-cudagraph-capture-size`). A step of b <= M running requests replays the graph of
the next captured size (SGLang's `can_run`: batch size <= max_bs; vLLM pads to the next
capture size); a step of more is launched kernel by kernel, paying the host's launch
overhead the graphs remove (see `launch_overhead`). What shows it:

- the configuration: graphs on, and M from the command or the engine's log
  (`servelab.diagnose.engineconf`; an engine's default is not guessed);
- the running batch of a level above M: the engine's mean count of running requests
  (/metrics or its stats lines), else the closed-loop concurrency, at most the running
  cap, an upper bound (requests waiting or in prefill are not in the decode batch);
- the sweep: TPOT above M longer than the replayed steps below it explain.

The gain is an interval from the run's own numbers. Let T_M be the TPOT of the largest
level at or below M (batch b_M, its steps replayed) and T that of the largest level above
(batch b, eager). Replayed, that level's TPOT T_g would be:

- at least T_M: a step of more requests does no less work (the most gain, T / T_M);
- at most T_M x b / b_M: a step is a part that does not grow with the batch (the weights
  read, the launches) and a part that grows at most in proportion to it (the least gain,
  T / (T_M x b / b_M), and never below 1);
- the point: T_M times the model's own growth of the TPOT from b_M to b, inside the
  interval; without the model, the TPOT halfway between the two ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servelab.diagnose.engineconf import GRAPH_MAX_FLAGS, EngineConfig
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

__all__ = ["CAPTURE_STEP", "CAPTURE_STEP_LARGE", "GAIN_NOISE", "rule"]

GAIN_NOISE = 0.1
"""A point gain within 10% of none is information, not a warning: a level's mean TPOT
moves by that much between repeats of the same run (docs/DIAGNOSE.md, the noise bands)."""
CAPTURE_STEP = 8
"""Both engines' default sizes step by 8 up to 256 (SGLang 8..256 after 1, 2, 4; vLLM
8..248 after 1, 2, 4), so a largest size that is a multiple of 8 is itself captured."""
CAPTURE_STEP_LARGE = 16
"""... and by 16 above 256 (vLLM 256..512; SGLang's older releases extend by 16)."""
_LARGE = 256

_WEIGHTS = {"config": 0.6, "metrics": 0.6, "load": 0.3, "sweep": 0.4}
"""The configured limit with graphs on counts as much as launch_overhead's graphs-off
setting; the engine's own running count as much as the other rules' metrics; a batch
bounded by the concurrency half as much (it is an upper bound); the sweep's step-up less,
since other causes lengthen a larger batch's step too."""


@dataclass(frozen=True)
class _Point:
    """A level and its running batch, with where the batch was read."""

    level: LevelFacts
    batch: float
    source: str
    engine_counts: bool


def rule(facts: RunFacts) -> list[Finding]:
    conf = facts.engine
    limit, flag, graphs = conf.cuda_graph_max_batch, conf.cuda_graph_flag, conf.cuda_graphs
    if limit is None or flag is None or graphs is None or not graphs.value:
        return []
    cap = conf.running_cap.value if conf.running_cap else None
    points = [p for lv in facts.measured if (p := _point(lv, cap)) is not None]
    above = [p for p in points if p.batch > limit.value]
    if not above:
        return []
    below = [p for p in points if p.batch <= limit.value and p.level.tpot_ms]
    base = max(below, key=lambda p: p.batch) if below else None
    top = max(above, key=lambda p: p.batch)
    tally = Tally()
    configured = Evidence(
        what="largest CUDA-graph batch", value=limit.value, unit="requests", source=limit.source
    )
    on = Evidence(what="CUDA graphs", value="on", source=graphs.source)
    tally.add("config", _WEIGHTS["config"], [configured, on])
    for key, counted in (("metrics", True), ("load", False)):
        batches = [_batch_evidence(p) for p in above if p.engine_counts is counted]
        tally.add(key, _WEIGHTS[key], batches)
    gain = _gain(facts, base, top) if base is not None else None
    costs = gain is not None and gain.factor >= 1 + GAIN_NOISE
    if base is not None:
        sweep = _sweep_evidence(base, top)
        if costs:
            tally.add("sweep", _WEIGHTS["sweep"], sweep)
        else:
            for evidence in sweep:
                evidence.supports = False
                tally.note(evidence)
    labels = ", ".join(p.level.label for p in above)
    return [
        Finding(
            kind=FindingKind.CUDA_GRAPH_BATCH,
            title=f"decode batches above the largest CUDA-graph batch ({limit.value}) run "
            f"eager at {labels}",
            severity=Severity.WARNING if costs else Severity.INFO,
            confidence=tally.confidence,
            evidence=tally.evidence,
            explanation=_explanation(conf, above, top),
            actions=[_action(conf, flag, above, limit.value)],
            expected_gain=gain,
            missing=_missing(above, base),
            levels=[p.level.level for p in above],
            impact=max(0.0, 1 - 1 / gain.factor) if gain is not None else 0.0,
        )
    ]


def _point(lv: LevelFacts, cap: int | None) -> _Point | None:
    """The level's running batch: the engine's count, else a closed loop's concurrency
    (at most the running cap); None for an open-loop level without counts."""
    engine = lv.engine
    if engine is not None and engine.running_mean is not None:
        return _Point(lv, engine.running_mean, "engine metrics: running requests (mean)", True)
    if not lv.closed:
        return None
    if cap is not None and lv.load > cap:
        return _Point(lv, float(cap), f"{lv.label}, at most the running cap {cap}", False)
    return _Point(lv, lv.load, f"{lv.label} (requests in flight: the batch is at most this)", False)


def _batch_evidence(point: _Point) -> Evidence:
    return Evidence(
        what=f"running batch at {point.level.label}",
        value=fmt(point.batch),
        unit="requests",
        source=point.source,
    )


def _sweep_evidence(base: _Point, top: _Point) -> list[Evidence]:
    assert base.level.tpot_ms is not None and top.level.tpot_ms is not None
    return [
        Evidence(
            what=f"TPOT at {base.level.label} (batch {base.batch:.3g}, replayed)",
            value=fmt(base.level.tpot_ms),
            unit="ms",
            source=base.level.source,
        ),
        Evidence(
            what=f"TPOT at {top.level.label} (batch {top.batch:.3g}, eager)",
            value=fmt(top.level.tpot_ms),
            unit="ms",
            source=top.level.source,
        ),
    ]


def _gain(facts: RunFacts, base: _Point, top: _Point) -> ExpectedGain | None:
    """TPOT at the top level replayed: between T_M and T_M x b / b_M (module docstring)."""
    measured, replayed = top.level.tpot_ms, base.level.tpot_ms
    if measured is None or replayed is None or replayed <= 0:
        return None
    growth = top.batch / base.batch
    most, least = measured / replayed, max(measured / (replayed * growth), 1.0)
    most = max(most, least)
    base_model, top_model = base.level.model, top.level.model
    if facts.model is not None and base_model is not None and top_model is not None:
        model_growth = top_model.tpot_ms / base_model.tpot_ms
        how = f"the model's growth of the TPOT between the two batches ({model_growth:.3g}x)"
    else:
        model_growth = (1 + growth) / 2
        how = "the TPOT halfway between the two (no model)"
    point = min(max(measured / (replayed * model_growth), least), most)
    label = top.level.label
    metric = f"decode speed at {label}"
    return ExpectedGain(
        factor=fmt(point),
        metric=metric,
        at=label,
        source="the sweep: TPOT at and above the largest CUDA-graph batch",
        text=(
            f"graphs up to batch {math.ceil(top.batch)}: about {point:.2g}x {metric} "
            f"({least:.2g}-{most:.2g}x), its TPOT of {measured:.3g} ms replayed at least "
            f"{replayed:.3g} ms (the TPOT at {base.level.label}, batch {base.batch:.3g}) and "
            f"at most that grown with the batch ({growth:.3g}x); the point: {how}"
        ),
        low=fmt(least),
        high=fmt(most),
    )


def _explanation(conf: EngineConfig, above: list[_Point], top: _Point) -> str:
    limit = conf.cuda_graph_max_batch
    assert limit is not None
    batches = ", ".join(f"{p.batch:.3g} at {p.level.label}" for p in above)
    text = (
        f"The engine replays decode steps as CUDA graphs up to a batch of {limit.value} "
        f"requests ({limit.source}). The running batch was above it ({batches}), so those "
        "steps were launched kernel by kernel: each pays the host's launch and Python "
        "overhead that a graph replay removes, the cost launch_overhead measures at a light "
        "load. Each captured size costs graph memory taken from the KV cache's budget: a "
        "larger largest size leaves a little less cache."
    )
    if not top.engine_counts:
        text += (
            " Without the engine's running count the batch is the level's concurrency, an "
            "upper bound: requests waiting or in prefill are not in the decode batch."
        )
    return text


def _action(conf: EngineConfig, flag: str, above: list[_Point], limit: int) -> Action:
    """Graphs up to the largest running batch seen, rounded up to a size both engines'
    default lists capture, with the flag that set the limit."""
    largest = max(_peak(p) for p in above)
    step = CAPTURE_STEP if largest <= _LARGE else CAPTURE_STEP_LARGE
    size = max(math.ceil(largest / step) * step, limit + step)
    why = f"capture CUDA graphs up to the largest running batch ({largest:.3g})"
    if flag in GRAPH_MAX_FLAGS:
        return Action(
            target=ActionTarget.ENGINE,
            text=f"{why}: {flag} {size}",
            value=size,
            engine=conf.name,
            flags=[flag, str(size)],
        )
    return Action(
        target=ActionTarget.ENGINE,
        text=f"{why}: make {size} the largest size {flag} captures (it set {limit})",
        value=size,
        engine=conf.name,
    )


def _peak(point: _Point) -> float:
    """The most requests the level ran at once: the engine's peak, else its batch."""
    engine = point.level.engine
    if point.engine_counts and engine is not None and engine.running_max is not None:
        return max(engine.running_max, point.batch)
    return point.batch


def _missing(above: list[_Point], base: _Point | None) -> list[str]:
    missing = []
    if not any(p.engine_counts for p in above):
        missing.append(
            "metrics: no running count from the engine; the batch is the concurrency, at "
            "most the running cap (an upper bound)"
        )
    if base is None:
        missing.append(
            "no level ran at or below the largest CUDA-graph batch: the run has no replayed "
            "step to compare with, so no gain is stated"
        )
    return missing
