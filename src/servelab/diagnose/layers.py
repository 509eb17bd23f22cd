"""The gap in layers at the lightest load (single stream) and at the knee.

roofline (datasheet) -> roofline with the probe's measured figures -> kernel floor (the
same step no faster than its kernels replayed as a CUDA graph: kernels x per-kernel
latency, `servelab.model.kernels`) -> the engine as configured (measured TPOT). The gap
is measured minus the datasheet roofline; its shares are what the probe's measurements
account for, what the kernels' latency adds (floor - roofline), then the engine's excess
over the floor, split into its per-step and per-request parts (`servelab.diagnose.gap`):
the floor is paid once per step, so it comes out of the per-step part.
"""

from __future__ import annotations

from servelab.core.units import MS_PER_S
from servelab.diagnose.cpu_layers import cpu_gap_layers
from servelab.diagnose.document import GapLayers, GapShare, Layer
from servelab.diagnose.facts import MODEL_FASTER_TOLERANCE, LevelFacts, ModelPoint, RunFacts
from servelab.diagnose.gap import split_excess
from servelab.diagnose.layer_points import engine_layer, gap_at, layer_points, per_token

__all__ = ["KERNEL_FLOOR_NOTE", "gap_layers"]

KERNEL_FLOOR_NOTE = "needs the model: kernels per step x per-kernel latency"


def gap_layers(facts: RunFacts) -> list[GapLayers]:
    """The layers at single stream (else the lightest load) and, if another level, the knee;
    for an engine the spec put on the CPU, the CPU's layers (`cpu_layers`)."""
    points = layer_points(facts)
    if facts.model is None:
        cpu = cpu_gap_layers(facts, points)
        if cpu is not None:
            return cpu
    return [_layers(facts, point, lv) for point, lv in points]


def _layers(facts: RunFacts, point: str, lv: LevelFacts) -> GapLayers:
    measured = lv.tpot_ms
    engine = engine_layer(facts, lv)
    if lv.model is None or facts.model is None:
        kernel = Layer(
            name="kernel floor", available=False, source="replayed kernels", note=KERNEL_FLOOR_NOTE
        )
        roofline = Layer(
            name="roofline",
            available=False,
            source="model",
            note=facts.missing.get("model", "no model"),
        )
        return gap_at(point, lv, [roofline, kernel, engine])
    scale = facts.model.time_scale
    step = lv.model.step
    parts = (
        f"{step.bound}-bound; per step: GPU busy {step.gpu_busy_s * MS_PER_S / scale:.3g} ms, "
        f"communication {step.communication_s * MS_PER_S / scale:.3g} ms, overhead "
        f"{step.overhead_s * MS_PER_S / scale:.3g} ms, plus others' prefills"
    )
    datasheet = lv.model.datasheet_tpot_ms or lv.model.tpot_ms
    layers = [
        Layer(
            name="roofline (datasheet)",
            available=True,
            ms_per_token=datasheet,
            tokens_per_s=per_token(datasheet),
            source="servelab model: memory or compute, communication, per-step allowance",
            note=parts if lv.model.datasheet_tpot_ms is None else None,
        )
    ]
    if lv.model.datasheet_tpot_ms is not None:
        layers.append(
            Layer(
                name="roofline (the probe's measured figures)",
                available=True,
                ms_per_token=lv.model.tpot_ms,
                tokens_per_s=per_token(lv.model.tpot_ms),
                source="servelab model calibrated by the probe",
                note=parts,
            )
        )
    layers += [_kernel_layer(lv.model, measured), engine]
    gap = measured - datasheet if measured is not None else None
    return gap_at(point, lv, layers, gap, _shares(facts, lv, gap))


def _kernel_layer(model: ModelPoint, measured: float | None) -> Layer:
    floor = model.floor
    kernels = floor.kernels
    note = (
        f"{kernels.per_step:,} {kernels.style} kernels per step x "
        f"{floor.graph_us_per_kernel:.1f} us replayed as a CUDA graph; eager, "
        f"{floor.eager_us_per_kernel:.1f} us each: {model.eager_floor_tpot_ms:.3g} ms per "
        f"token. Per-kernel latencies: {floor.source}"
    )
    if measured is not None and measured < MODEL_FASTER_TOLERANCE * model.graph_floor_tpot_ms:
        note += (
            ". The run is faster than this floor: its engine launches fewer kernels than "
            f"{kernels.style} ones counted"
        )
    return Layer(
        name="kernel floor (CUDA graphs)",
        available=True,
        ms_per_token=model.graph_floor_tpot_ms,
        tokens_per_s=per_token(model.graph_floor_tpot_ms),
        source="servelab model: kernels per step x per-kernel latency, at least the roofline",
        note=note,
    )


def _shares(facts: RunFacts, lv: LevelFacts, gap: float | None) -> list[GapShare]:
    if gap is None or gap <= 0 or lv.model is None:
        return []
    parts: list[tuple[str, float, str]] = []
    if lv.model.datasheet_tpot_ms is not None:
        parts.append(
            (
                "the probe's measured figures (memory, matmul, links)",
                lv.model.tpot_ms - lv.model.datasheet_tpot_ms,
                "model calibrated by the probe",
            )
        )
    split = split_excess(facts, lv)
    if split is None:
        return _rounded(parts, gap)
    # The floor is paid once per step: it comes out of the per-step part of the excess.
    step_part = split.per_step_ms if split.per_step_ms is not None else split.excess_ms
    kernels = max(min(lv.model.graph_floor_tpot_ms - lv.model.tpot_ms, step_part), 0.0)
    if kernels > 0:
        parts.append(
            ("kernel latency (the kernel floor over the roofline)", kernels, "model: kernel floor")
        )
    if split.per_step_ms is not None and split.neighbour is not None:
        source = f"{lv.source} and {split.neighbour.source}, against the model"
        parts.append(
            (
                "engine, per step beyond the kernel floor (launches, scheduling, host)",
                split.per_step_ms - kernels,
                source,
            )
        )
        parts.append(("engine, per running request", split.per_request_ms or 0.0, source))
    else:
        parts.append(
            (
                "engine beyond the kernel floor (not split: needs a level at another batch)",
                split.excess_ms - kernels,
                lv.source,
            )
        )
    return _rounded(parts, gap)


def _rounded(parts: list[tuple[str, float, str]], gap: float) -> list[GapShare]:
    return [
        GapShare(what=what, ms_per_token=round(ms, 4), share=round(ms / gap, 3), source=source)
        for what, ms, source in parts
    ]
