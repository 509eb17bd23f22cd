"""What every statement of the gap in layers shares: where it is stated, and the measured top.

The layers are stated at single stream (else the lightest load) and at the knee; the top
layer is always the engine as configured, the level's measured TPOT. The GPU's layers
(`layers`) and the CPU's (`cpu_layers`) put their model's layers beneath it.
"""

from __future__ import annotations

from servelab.core.units import MS_PER_S
from servelab.diagnose.document import GapLayers, GapShare, Layer
from servelab.diagnose.facts import LevelFacts, RunFacts

__all__ = ["engine_layer", "gap_at", "layer_points", "per_token"]


def layer_points(facts: RunFacts) -> list[tuple[str, LevelFacts]]:
    """(point, level): the lightest load and, when it is another level, the knee."""
    levels = facts.closed or facts.measured
    if not levels:
        return []
    lightest = levels[0]
    points = [
        ("single stream" if lightest.closed and lightest.load == 1 else "lightest load", lightest)
    ]
    knee = facts.knee_level()
    if knee is not None and knee.level != levels[0].level:
        points.append(("knee", knee))
    return points


def engine_layer(facts: RunFacts, lv: LevelFacts) -> Layer:
    """The top layer: the level's measured mean TPOT."""
    measured = lv.tpot_ms
    return Layer(
        name="engine as configured (measured)",
        available=measured is not None,
        ms_per_token=measured,
        tokens_per_s=per_token(measured),
        source=f"{lv.source}: mean TPOT",
        note=f"{facts.engine.name or 'the engine'} at {lv.label}",
    )


def per_token(ms: float | None) -> float | None:
    """ms per token -> tokens per second."""
    return MS_PER_S / ms if ms else None


def gap_at(
    point: str,
    lv: LevelFacts,
    layers: list[Layer],
    gap: float | None = None,
    shares: list[GapShare] | None = None,
) -> GapLayers:
    """One statement of the gap at `lv`, its layers bottom to top."""
    return GapLayers(
        point=point,
        level=lv.level,
        concurrency=lv.load,
        batch=round(lv.batch, 2),
        batch_source=lv.batch_source,
        layers=layers,
        gap_ms_per_token=gap,
        shares=shares or [],
    )
