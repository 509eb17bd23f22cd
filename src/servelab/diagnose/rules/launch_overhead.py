"""`launch_overhead`: the GPU waits for the host; each step costs far more than its work.

A decode step's work is what the model counts (bytes read, FLOPs, collectives). An engine
that launches each kernel from Python (no CUDA graphs), schedules in the step's critical
path or synchronises with the host every step spends time the GPU is idle. What shows it:

- the model: measured TPOT at the lightest load well above the model's at the same batch,
  the excess mostly per step (the same whatever the batch: see `servelab.diagnose.gap`);
- GPU telemetry: low power and idle SMs while the load runs;
- the configuration: CUDA graphs off (the command or the log).

CUDA graphs not known to be on or off (an attached engine without its log, an engine whose
default the knob map does not say) are neither: the action to turn them on is then
conditional ("if CUDA graphs are off: ..."), said as missing evidence, and ranks the
finding below those on known settings.

Under tensor parallelism the same per-step excess can be all-reduces slower than the
model assumed; degraded links in the probe make `comm_latency` the likelier reading.

The expected gain of CUDA graphs is an interval (docs/DIAGNOSE.md derives it). Eager, a
step costs at least its eager floor F_e (its kernels dispatched one by one); what the
measured step T spends beyond it, T - F_e, is the engine's own: partly the Python around
each op inside the forward pass (which a graph replay skips), partly the scheduler,
sampling and host syncs outside it (which stay). The two ends:

- least: all of the engine's own time stays, T_graphs = F_g + max(T - F_e, 0), with F_g
  the graph floor (the same kernels replayed);
- most: only the kernels' own time stays, T_graphs = max(F_g, u x T), with u the GPU's
  busy share over the level (NVML utilization: the share of time a kernel ran, so u x T is
  the kernel time of a step, which graphs do not shorten); without telemetry, F_g.

One run does not say how the engine's own time splits: each of its milliseconds is as
likely inside the forward pass as outside, so the point estimate is the TPOT halfway
between the two ends (time adds; the middle of the interval in ratio terms, the geometric
mean, would assume the split multiplies).
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.diagnose.actions import knob_action, text_action
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
from servelab.diagnose.gap import Split, split_excess
from servelab.diagnose.signals import degraded_links, fmt, gpu_busy, gpu_idle
from servelab.diagnose.trace_evidence import launch_evidence

__all__ = ["BUSY_DISCOUNT", "CRITICAL_RATIO", "OVERHEAD_RATIO", "rule"]

OVERHEAD_RATIO = 1.5
"""Measured TPOT this many times the model's: a third of the step is not the hardware's
work. Good engines reach 80-90% of the datasheet (the probe's memory copy: 89%), so a
well-tuned one sits at 1.1-1.3x the model."""
CRITICAL_RATIO = 3.0
"""Two thirds of the step outside the hardware's work."""
BUSY_DISCOUNT = 0.5
"""A GPU that telemetry shows busy makes host overhead half as likely an explanation."""

_WEIGHTS = {"model": 0.5, "telemetry": 0.5, "config": 0.6, "trace": 0.6}
_COMM_SHARED_WEIGHT = 0.35
"""The model's gap counts less when the excess may be communication (TP with bad links)."""
_IF_OFF = "if CUDA graphs are off"
_UNKNOWN_GRAPHS = (
    "CUDA graphs: not known to be on or off (no engine log says, and no recorded command "
    "shows the flag; SGLang and vLLM capture them unless --disable-cuda-graph / "
    "--enforce-eager): the CUDA-graph action is conditional"
)


def rule(facts: RunFacts) -> list[Finding]:
    levels = facts.closed or facts.measured
    if not levels:
        return []
    low = levels[0]
    tally = Tally()
    ratio = low.ratio
    if ratio is not None and ratio < OVERHEAD_RATIO:
        return []  # near the model: there is no overhead to explain
    links = degraded_links(facts) if facts.model is not None and facts.model.parallel else []
    split = split_excess(facts, low)
    if ratio is not None:
        weight = _COMM_SHARED_WEIGHT if links else _WEIGHTS["model"]
        tally.add("model", weight, _gap_evidence(low, ratio, split))
    tally.add("telemetry", _WEIGHTS["telemetry"], gpu_idle(low))
    busy = gpu_busy(low)
    for evidence in busy:
        tally.note(evidence)
    graphs = facts.engine.cuda_graphs
    if graphs is not None:
        seen = Evidence(
            what="CUDA graphs", value="off" if not graphs.value else "on", source=graphs.source
        )
        if graphs.value:
            seen.supports = False
            tally.note(seen)
        else:
            tally.add("config", _WEIGHTS["config"], [seen])
    traced, traced_busy = launch_evidence(facts.traces)
    tally.add("trace", _WEIGHTS["trace"], traced)
    for evidence in traced_busy:
        tally.note(evidence)
    if not tally.count("model", "telemetry", "trace"):
        return []
    busy = busy or traced_busy
    strong = len(tally.sources) >= 2 and not busy
    severity = (
        Severity.CRITICAL
        if strong and (ratio is None or ratio >= CRITICAL_RATIO)
        else Severity.WARNING
    )
    graphs_on = graphs is not None and graphs.value
    unknown = graphs is None
    ceiling = _ceiling_gain(low, split)
    gain = _gain(low, ceiling, None if graphs_on else _graphs_gain(low), unknown=unknown)
    missing = [f"{key}: {why}" for key, why in facts.missing.items() if key in ("model", "gpu")]
    if unknown:
        missing.append(_UNKNOWN_GRAPHS)
    if links:
        missing.append(
            "the probe shows degraded GPU links: part of this excess may be communication "
            "(see comm_latency)"
        )
    return [
        Finding(
            kind=FindingKind.LAUNCH_OVERHEAD,
            title=_title(low, ratio),
            severity=severity,
            confidence=round(tally.confidence * (BUSY_DISCOUNT if busy else 1.0), 3),
            evidence=tally.evidence,
            explanation=_explanation(low, split, graphs_on, bool(busy), unknown=unknown),
            actions=_actions(facts, graphs_on, unknown=unknown),
            expected_gain=gain,
            missing=missing,
            levels=[low.level],
            impact=max(0.0, 1 - 1 / ceiling[0]) if ceiling else 0.5,
        )
    ]


def _title(low: LevelFacts, ratio: float | None) -> str:
    if ratio is None:
        return f"the GPU is idle most of each step at {low.label}"
    return f"each decode step takes {ratio:.1f}x the model's at {low.label}: host overhead"


def _gap_evidence(low: LevelFacts, ratio: float, split: Split | None) -> list[Evidence]:
    assert low.model is not None and low.tpot_ms is not None
    found = [
        Evidence(what=f"TPOT at {low.label}", value=fmt(low.tpot_ms), unit="ms", source=low.source),
        Evidence(
            what=f"model TPOT at batch {low.batch:.3g}",
            value=fmt(low.model.tpot_ms),
            unit="ms",
            source="model: decode step",
        ),
        Evidence(what="measured / model", value=fmt(ratio), unit="x", source=low.source),
    ]
    if split is not None and split.per_step_ms is not None and split.neighbour is not None:
        found.append(
            Evidence(
                what=f"per-step part of the excess (from {split.neighbour.label})",
                value=fmt(split.per_step_ms),
                unit="ms",
                source=f"{low.source}, {split.neighbour.source} with the model",
            )
        )
    return found


def _explanation(
    low: LevelFacts, split: Split | None, graphs_on: bool, busy: bool, *, unknown: bool
) -> str:
    text = (
        "Each decode step costs the engine much more than the hardware's work for it. The "
        "usual reason is the host: the GPU waits while it launches kernels one by one, "
        "schedules the batch or synchronises. The cost is paid every step, so it sets the "
        "single-stream speed."
    )
    if low.model is not None:
        kernels = low.model.floor.kernels
        text += (
            f" Its {kernels.per_step:,} kernels per step ({kernels.style}) cannot take less "
            f"than {low.model.graph_floor_tpot_ms:.3g} ms replayed as a CUDA graph, or "
            f"{low.model.eager_floor_tpot_ms:.3g} ms launched one by one."
        )
    if split is not None and split.per_step_ms is not None and split.per_request_ms is not None:
        text += (
            f" Of the excess, {split.per_step_ms:,.1f} ms per step is the same whatever the "
            f"batch and {split.per_request_ms:,.1f} ms grows with the requests in it."
        )
    if graphs_on:
        text += " CUDA graphs are on, so the time goes elsewhere: the scheduler, sampling, Python."
    elif unknown:
        text += (
            " Whether CUDA graphs are on is not known: if they are off, turning them on is the "
            "first thing to try; if on, the time goes to the scheduler, sampling, Python."
        )
    if busy:
        text += (
            " But the GPU is busy, not waiting: its kernels run slower than the model's bytes "
            "and FLOPs say (untuned kernels, an attention backend), which only a kernel trace "
            "separates from host overhead."
        )
    return text


def _actions(facts: RunFacts, graphs_on: bool, *, unknown: bool) -> list[Action]:
    actions = []
    if unknown:
        why = f"{_IF_OFF}: replay each step as a CUDA graph"
        action = knob_action(facts.engine, "cuda_graphs", True, why)
        actions.append(action.model_copy(update={"conditional": True}))
    elif not graphs_on:
        actions.append(
            knob_action(facts.engine, "cuda_graphs", True, "replay each step as a CUDA graph")
        )
    actions.append(
        text_action(
            "profile a few decode steps (the engine's torch profiler) to see what the host "
            "does between kernels"
        )
    )
    return actions


def _ceiling_gain(low: LevelFacts, split: Split | None) -> tuple[float, str] | None:
    """The most there is to win per step: the per-step excess beyond the kernel floor gone
    (the floor itself stays: it is the kernels' own latency, replayed)."""
    if low.tpot_ms is None or low.model is None:
        return None
    kernel_part = max(low.model.graph_floor_tpot_ms - low.model.tpot_ms, 0.0)
    if split is not None and split.per_step_ms is not None:
        remaining = low.tpot_ms - max(split.per_step_ms - kernel_part, 0.0)
        how = "removing the per-step excess beyond the kernel floor"
    else:
        remaining, how = low.model.graph_floor_tpot_ms, "a step as short as the kernel floor"
    return max(low.tpot_ms / remaining, 1.0) if remaining > 0 else 1.0, how


@dataclass(frozen=True)
class _GraphsGain:
    """CUDA graphs on, from the measured step: TPOT with graphs at the interval's two ends,
    and the engine's own time beyond the eager floor."""

    measured_ms: float
    slowest_ms: float
    fastest_ms: float
    fastest_source: str
    own_ms: float

    @property
    def point_ms(self) -> float:
        return (self.slowest_ms + self.fastest_ms) / 2

    @property
    def factor(self) -> float:
        return self.measured_ms / self.point_ms


def _graphs_gain(low: LevelFacts) -> _GraphsGain | None:
    """None where the floor says launches cost nothing graphs can save, or the run is
    already at the graph floor."""
    model, measured = low.model, low.tpot_ms
    if model is None or measured is None:
        return None
    if model.eager_floor_tpot_ms <= model.graph_floor_tpot_ms:
        return None
    own = max(measured - model.eager_floor_tpot_ms, 0.0)
    slowest = model.graph_floor_tpot_ms + own
    if slowest >= measured:
        return None
    fastest, source = model.graph_floor_tpot_ms, "the kernel floor with graphs"
    util = low.gpu.util_mean_pct if low.gpu is not None else None
    if util is not None and util / 100 * measured > fastest:
        fastest = util / 100 * measured
        source = f"the kernels' own time ({util:.3g}% GPU busy x {measured:.3g} ms)"
    return _GraphsGain(measured, slowest, min(fastest, slowest), source, own)


def _gain(
    low: LevelFacts,
    ceiling: tuple[float, str] | None,
    graphs: _GraphsGain | None,
    *,
    unknown: bool = False,
) -> ExpectedGain | None:
    if low.tpot_ms is None or low.model is None or ceiling is None:
        return None
    metric = "single-stream tok/s" if low.load == 1 else f"decode speed at {low.label}"
    top, how = ceiling
    if graphs is None:
        return ExpectedGain(
            factor=fmt(top),
            metric=metric,
            at=low.label,
            source="model (kernel floor) and the sweep",
            text=f"{how}: up to {top:.1f}x {metric}",
            low=1.0,
            high=fmt(top),
        )
    factor = graphs.factor
    top = max(top, factor)
    least, most = graphs.measured_ms / graphs.slowest_ms, graphs.measured_ms / graphs.fastest_ms
    return ExpectedGain(
        factor=fmt(factor),
        metric=metric,
        at=low.label,
        source="model (kernel floors), the sweep and GPU telemetry",
        text=(
            (f"{_IF_OFF}, " if unknown else "")
            + f"CUDA graphs on: about {factor:.1f}x {metric} ({least:.2g}-{most:.2g}x), "
            f"TPOT from {low.tpot_ms:.3g} ms to {graphs.slowest_ms:.3g}-"
            f"{graphs.fastest_ms:.3g} ms: at most the kernel floor with graphs "
            f"({low.model.graph_floor_tpot_ms:.3g} ms) plus the {graphs.own_ms:.3g} ms the "
            f"engine spends beyond its eager floor ({low.model.eager_floor_tpot_ms:.3g} ms), "
            f"at least {graphs.fastest_source}; {how}: up to {top:.1f}x"
        ),
        low=fmt(least),
        high=fmt(most),
    )
