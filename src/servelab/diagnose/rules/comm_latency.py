"""`comm_latency`: collectives between GPUs are a large part of every decode step.

Tensor parallelism all-reduces twice per layer per step. At small batches each message is
a few kilobytes, so its time is the collective's latency, paid 2 x layers times per
token whatever the batch; without GPU peer-to-peer each one is staged through host
memory. What shows it:

- the model: communication is the largest term of its step at the run's lightest load
  (`servelab model` says "communication-bound"), the probe's measured links in its figures;
- the probe: P2P unsupported or slow copies, NCCL through SHM, a VM's flat topology;
- the run: measured near the model (the comm-bound ceiling is what it runs at), or far
  above it with degraded links (the collectives are slower than even the model thought);
- GPU telemetry: NVML utilization high at low power (kernels spinning in a collective);
- the log: NCCL warnings about peer access.

Without a probe it cannot tell slow links from launch overhead in a measured excess.
"""

from __future__ import annotations

from servelab.diagnose.actions import layout_action, text_action
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
from servelab.diagnose.modelview import ModelView
from servelab.diagnose.rules.launch_overhead import OVERHEAD_RATIO
from servelab.diagnose.signals import degraded_links, fmt
from servelab.diagnose.trace_evidence import comm_evidence
from servelab.engines.signatures import EventKind

__all__ = [
    "COMM_SHARE",
    "COMM_WARNING_SHARE",
    "SPIN_POWER_PCT",
    "SPIN_UTIL_PCT",
    "engine_slow_paths",
    "rule",
]

COMM_SHARE = 0.3
"""Communication at least this share of the model's step: worth a finding (info)."""
COMM_WARNING_SHARE = 0.5
"""The model's collective time half of the measured step: the run is communication-bound
(faster collectives are worth up to 2x), a warning; critical when the probe shows the
links degraded. An engine far slower than the model dilutes the share: its own overhead
is then the larger part (launch_overhead)."""
SPIN_UTIL_PCT = 80.0
SPIN_POWER_PCT = 60.0
"""NVML utilization above 80% at under 60% power: a kernel is resident (a collective
polling its peers) without doing the work that draws power (the story's 100% at 55%)."""

_WEIGHTS = {
    "model": 0.4,
    "probe": 0.5,
    "measured": 0.3,
    "telemetry": 0.3,
    "log": 0.4,
    "trace": 0.4,
}


def rule(facts: RunFacts) -> list[Finding]:
    model = facts.model
    levels = facts.closed or facts.measured
    parallel = (model is not None and model.parallel) or (
        facts.engine.tp is not None and facts.engine.tp.value > 1
    )
    if not levels or not parallel:
        return []
    low = levels[0]
    tally = Tally()
    share = _share(low)
    if share is not None and share >= COMM_SHARE:
        tally.add("model", _WEIGHTS["model"], _model_evidence(low, share))
    links = degraded_links(facts)
    tally.add("probe", _WEIGHTS["probe"], links)
    slow_paths = engine_slow_paths(facts)
    tally.add("engine paths", _WEIGHTS["probe"], slow_paths)
    links = links + [e for e in slow_paths if e.what in _LINK_WORDS]
    ratio = low.ratio
    if ratio is not None and (share or 0) >= COMM_SHARE and ratio < OVERHEAD_RATIO:
        tally.add("measured", _WEIGHTS["measured"], [_ratio(low, ratio, "at the ceiling")])
    elif ratio is not None and links and ratio >= OVERHEAD_RATIO:
        tally.add("measured", _WEIGHTS["measured"], [_ratio(low, ratio, "above the ceiling")])
    tally.add("telemetry", _WEIGHTS["telemetry"], _spinning(levels))
    tally.add(
        "log",
        _WEIGHTS["log"],
        [
            Evidence(
                what=event.kind.value,
                value=event.text[:200],
                source=f"engine.log line {event.line_no} (x{event.count})",
            )
            for event in facts.events_of(EventKind.NCCL_WARNING)
        ],
    )
    tally.add("trace", _WEIGHTS["trace"], comm_evidence(facts.traces))
    if not tally.count("model", "probe", "trace", "engine paths"):
        return []
    measured_share = _measured_share(low, share)
    if measured_share is not None:
        tally.note(
            Evidence(
                what=f"the model's collective time / the measured TPOT at {low.label}",
                value=fmt(100 * measured_share),
                unit="%",
                source=f"model: decode step, {low.source}",
            )
        )
    else:
        measured_share = share
    if links and (measured_share or 0) >= COMM_WARNING_SHARE:
        severity = Severity.CRITICAL
    elif (measured_share or 0) >= COMM_WARNING_SHARE or links:
        severity = Severity.WARNING
    else:
        severity = Severity.INFO
    gain = _gain(model, low) if model is not None else None
    missing = [f"{key}: {why}" for key, why in facts.missing.items() if key in ("probe", "model")]
    if links and facts.probe is not None and not _allreduce_measured(facts):
        missing.append(
            "the probe measured no all-reduce: the model's all-reduce latency is an estimate, "
            "and without P2P the real one may be larger (servelab probe --comm on all GPUs)"
        )
    return [
        Finding(
            kind=FindingKind.COMM_LATENCY,
            title=_title(low, share, bool(links)),
            severity=severity,
            confidence=tally.confidence,
            evidence=tally.evidence,
            explanation=(
                "Every decode step waits for the all-reduces of tensor parallelism, two per "
                "layer; at small batches each carries a few kilobytes, so it costs the "
                "collective's latency, not its bandwidth, and that latency does not shrink "
                "with the batch. Without peer-to-peer between the GPUs each one is staged "
                "through host memory and costs more."
            ),
            actions=_actions(facts, model, low, bool(links)),
            expected_gain=gain,
            missing=missing,
            levels=[low.level],
            impact=min(1.0, measured_share) if measured_share is not None else 0.3,
        )
    ]


def engine_slow_paths(facts: RunFacts) -> list[Evidence]:
    """What the engine's own log says of its collectives' path, beside the probe's P2P
    verdict: custom all-reduce turned off (every small all-reduce then goes through NCCL,
    slower at the few kilobytes of a decode step, whatever the reason), and NCCL carrying
    a channel between GPUs of this box through shared memory (SHM is only ever used
    inside one host) rather than P2P. Where either says the GPUs have no P2P path, the
    links are degraded, as the probe's verdict would say."""
    out = []
    for event in facts.events_of(EventKind.CUSTOM_ALLREDUCE_OFF):
        reason = str(event.fields.get("reason") or event.text[:160])
        out.append(
            Evidence(
                what=_NO_P2P if reason in _NO_P2P_REASONS else "custom all-reduce off",
                value=reason,
                source=f"engine.log line {event.line_no}",
            )
        )
    staged = [
        event
        for event in facts.events_of(EventKind.NCCL_TRANSPORT)
        if event.fields.get("transport") == "SHM"
    ]
    if staged:
        kinds = sorted({str(e.fields.get("via") or "SHM") for e in staged})
        out.append(
            Evidence(
                what=_SHM,
                value=f"{sum(e.count for e in staged)} channel lines via {', '.join(kinds)}",
                source=f"engine.log line {staged[0].line_no} (NCCL_DEBUG=INFO)",
            )
        )
    return out


_NO_P2P = "custom all-reduce off: no P2P between the GPUs"
_SHM = "NCCL channels between GPUs of this box through shared memory, not P2P"
_LINK_WORDS = frozenset({_NO_P2P, _SHM})
_NO_P2P_REASONS = frozenset({"no p2p", "pcie more than two"})
"""Custom all-reduce's reasons that are about the links (vLLM and SGLang's
custom_all_reduce.py): no P2P, or PCIe-only GPUs past two."""


def _share(lv: LevelFacts) -> float | None:
    if lv.model is None or not lv.model.step.step_s:
        return None
    return lv.model.step.communication_s / lv.model.step.step_s


def _measured_share(lv: LevelFacts, share: float | None) -> float | None:
    """The model's collective time as a share of the measured step, for a run well above
    the model (near it, the model's own breakdown describes the run); None otherwise."""
    ratio = lv.ratio
    if share is None or ratio is None or ratio < OVERHEAD_RATIO:
        return None
    return min(1.0, share / ratio)


def _allreduce_measured(facts: RunFacts) -> bool:
    comm = facts.probe.document.get("comm") if facts.probe is not None else None
    return isinstance(comm, dict) and bool((comm.get("allreduce") or {}).get("points"))


def _title(lv: LevelFacts, share: float | None, links: bool) -> str:
    if share is None:
        return "GPU links degraded under tensor parallelism"
    where = " over degraded links" if links else ""
    return f"collectives are {share:.0%} of each decode step at {lv.label}{where}"


def _model_evidence(lv: LevelFacts, share: float) -> list[Evidence]:
    assert lv.model is not None
    step = lv.model.step
    found = [
        Evidence(
            what=f"communication share of the model's step at batch {lv.batch:.3g}",
            value=fmt(100 * share),
            unit="%",
            source="model: decode step",
        ),
        Evidence(
            what=f"all-reduces per step ({step.allreduces})",
            value=fmt(step.allreduce_s * 1e3),
            unit="ms (unscaled)",
            source="model: decode step",
        ),
    ]
    if lv.model.datasheet_tpot_ms is not None:
        found.append(
            Evidence(
                what="model TPOT with the datasheet's links / with the probe's",
                value=f"{lv.model.datasheet_tpot_ms:.3g} / {lv.model.tpot_ms:.3g}",
                unit="ms",
                source="model calibrated by the probe",
            )
        )
    return found


def _ratio(lv: LevelFacts, ratio: float, how: str) -> Evidence:
    return Evidence(
        what=f"measured / model TPOT at {lv.label} ({how})",
        value=fmt(ratio),
        unit="x",
        source=lv.source,
    )


def _spinning(levels: list[LevelFacts]) -> list[Evidence]:
    for lv in levels:
        gpu = lv.gpu
        if gpu is None or gpu.util_mean_pct is None or gpu.power_mean_pct is None:
            continue
        if gpu.util_mean_pct >= SPIN_UTIL_PCT and gpu.power_mean_pct <= SPIN_POWER_PCT:
            source = f"telemetry level {lv.level}"
            return [
                Evidence(
                    what="NVML utilization (mean)",
                    value=fmt(gpu.util_mean_pct),
                    unit="%",
                    source=source,
                ),
                Evidence(
                    what="GPU power (mean), % of the limit",
                    value=fmt(gpu.power_mean_pct),
                    unit="%",
                    source=source,
                ),
            ]
    return []


def _alternatives(model: ModelView) -> list[tuple[dict[str, int], ModelView]]:
    """Layouts with half the tensor-parallel ranks that still fit: pp x 2, or dp x 2."""
    layout = model.deployment.layout
    if layout.tp < 2 or layout.tp % 2:
        return []
    found = []
    for change in (
        {"tp": layout.tp // 2, "pp": layout.pp * 2},
        {"tp": layout.tp // 2, "dp": layout.dp * 2},
    ):
        view = model.variant(layout=layout.model_copy(update=change))
        if view is not None:
            found.append((change, view))
    return found


def _best_layout(model: ModelView, lv: LevelFacts) -> tuple[float, dict[str, int]] | None:
    """The layout with fewer TP ranks the model finds fastest at this batch, if faster."""
    now = model.tpot_ms(lv.batch, lv.input_tokens, lv.output_tokens)
    best: tuple[float, dict[str, int]] | None = None
    for change, view in _alternatives(model):
        faster = now / view.tpot_ms(lv.batch, lv.input_tokens, lv.output_tokens)
        if faster > 1 and (best is None or faster > best[0]):
            best = (faster, change)
    return best


def _label(change: dict[str, int]) -> str:
    return ",".join(f"{key}={value}" for key, value in change.items())


def _gain(model: ModelView, lv: LevelFacts) -> ExpectedGain | None:
    best = _best_layout(model, lv)
    if best is None:
        return None
    factor, change = best
    return ExpectedGain(
        factor=fmt(factor),
        metric=f"decode speed at {lv.label}",
        at=_label(change),
        source="model",
        text=f"{_label(change)}: {factor:.2f}x the decode speed at {lv.label}, per the model",
        low=1.0,
        high=fmt(factor),
    )


def _actions(facts: RunFacts, model: ModelView | None, lv: LevelFacts, links: bool) -> list[Action]:
    actions = []
    if links:
        actions.append(
            text_action(
                "give the GPUs peer-to-peer: bare metal or a container rather than a VM, "
                "or a VM with P2P passed through; check `nvidia-smi topo -p2p r`"
            )
        )
    best = _best_layout(model, lv) if model is not None else None
    if best is not None:
        actions.append(
            layout_action(facts.engine, best[1], f"fewer tensor-parallel ranks ({_label(best[1])})")
        )
    actions.append(
        text_action(
            "keep the tensor-parallel group on the fastest links (one NUMA node, one switch)",
            ActionTarget.ENGINE,  # the GPUs the spec gives it (CUDA_VISIBLE_DEVICES)
        )
    )
    return actions
