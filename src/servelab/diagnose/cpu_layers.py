"""The gap in layers for an engine on the CPU: roofline -> op floor -> the engine as configured.

The rules' model is a GPU's. An engine the launched spec put on the CPU is compared here
with the CPU ceiling (`servelab.model.cpu`), built from the run's own evidence only: the
embedded preset (the model folder `<preset>-<fingerprint>`), the engine's thread count
(OMP_NUM_THREADS in the launched spec's env) and the CPU's rates at exactly that count
in the run's probe.json. A missing piece is named in the layers that needed it, never
filled in. The roofline is the model's TPOT at the level's batch (others' prefills folded
in, as `modelview` does for a GPU); the op floor adds every op's dispatch to it, since a
CPU runs each op on the thread that dispatched it; the gap is measured minus roofline,
shared between the dispatch and what the engine spends beyond the op floor.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from servelab.core.errors import ConfigError
from servelab.core.units import BYTES_PER_GB, MS_PER_S, US_PER_S
from servelab.diagnose.deployment import launched_spec, preset_from_folder
from servelab.diagnose.document import GapLayers, GapShare, Layer
from servelab.diagnose.facts import MODEL_FASTER_TOLERANCE, LevelFacts, RunFacts
from servelab.diagnose.layer_points import engine_layer, gap_at, per_token
from servelab.diagnose.modelview import ModelView
from servelab.model import CpuDeployment, cpu_deploy, cpu_from_probe, cpu_step

__all__ = ["OP_FLOOR_NAME", "ROOFLINE_NAME", "cpu_gap_layers"]

ROOFLINE_NAME = "roofline (the CPU's measured rates)"
OP_FLOOR_NAME = "op floor (eager torch ops on the CPU)"
_THREADS_ENV = "OMP_NUM_THREADS"
_BYTES_PER_MB = 1e6
_FLOP_PER_GFLOP = 1e9


@dataclass(frozen=True)
class _CpuModel:
    """The CPU deployment, or why there is none (the first missing piece of evidence)."""

    deployment: CpuDeployment | None
    missing: str | None
    threads_source: str = ""


def cpu_gap_layers(facts: RunFacts, points: list[tuple[str, LevelFacts]]) -> list[GapLayers] | None:
    """The CPU's layers at each point; None unless the launched spec's device is the CPU."""
    spec = launched_spec(facts.summary)
    if spec is None or spec.get("device") != "cpu":
        return None
    model = _cpu_model(facts, spec)
    return [_layers(facts, model, point, lv) for point, lv in points]


def _cpu_model(facts: RunFacts, spec: dict[str, Any]) -> _CpuModel:
    preset = preset_from_folder(facts.summary)
    if preset is None:
        model = spec.get("model") or (facts.summary.engine or {}).get("model")
        name = PurePath(str(model)).name if model else "no model"
        return _CpuModel(None, f"a model the catalogue knows: {name} is not an embedded preset")
    env = spec.get("env")
    env = env if isinstance(env, dict) else {}
    text = str(env.get(_THREADS_ENV, "")).strip()
    source = f"{_THREADS_ENV} in the launched spec"
    if not text:
        text = str(_probe_cpu(facts).get("omp_num_threads") or "").strip()
        source = f"{_THREADS_ENV} where the probe ran (the engine inherits it)"
    if not text.isdigit() or int(text) < 1:
        return _CpuModel(
            None, f"the engine's thread count: no {_THREADS_ENV} in the launched spec or the probe"
        )
    threads = int(text)
    if facts.probe is None:
        return _CpuModel(None, "the CPU's rates: the run has no probe.json")
    try:
        cpu = cpu_from_probe(facts.probe.document, threads, source=facts.probe.source)
        return _CpuModel(cpu_deploy(preset, cpu), None, source)
    except ConfigError as exc:
        return _CpuModel(None, f"the CPU's rates: {exc}")


def _probe_cpu(facts: RunFacts) -> dict[str, Any]:
    comm = facts.probe.document.get("comm") if facts.probe is not None else None
    cpu = comm.get("cpu") if isinstance(comm, dict) else None
    return cpu if isinstance(cpu, dict) else {}


def _layers(facts: RunFacts, model: _CpuModel, point: str, lv: LevelFacts) -> GapLayers:
    engine = engine_layer(facts, lv)
    cd = model.deployment
    if cd is None:
        why = f"needs {model.missing}"
        return gap_at(
            point,
            lv,
            [
                Layer(name=ROOFLINE_NAME, available=False, source="servelab model", note=why),
                Layer(name=OP_FLOOR_NAME, available=False, source="servelab model", note=why),
                engine,
            ],
        )
    context = lv.input_tokens + lv.output_tokens / 2
    step = cpu_step(cd, max(lv.batch, 1.0), context)
    roofline = ModelView(deployment=cd.deployment).tpot_ms(
        lv.batch, lv.input_tokens, lv.output_tokens
    )
    cpu = cd.cpu
    parts = (
        f"{step.bound}-bound; per step: {step.weight_bytes / _BYTES_PER_MB:.3g} MB of weights "
        f"and {step.kv_bytes / _BYTES_PER_MB:.3g} MB of KV at "
        f"{cpu.memory_bandwidth_bytes_s / BYTES_PER_GB:.3g} GB/s ({step.memory_s * MS_PER_S:.3g}"
        f" ms), {step.flops / _FLOP_PER_GFLOP:.3g} GFLOP at "
        f"{cpu.fp32_flops / _FLOP_PER_GFLOP:.3g} GFLOP/s ({step.compute_s * MS_PER_S:.3g} ms), "
        "plus "
        f"others' prefills; {cpu.threads} threads ({model.threads_source}); {cpu.source}"
    )
    layers = [
        Layer(
            name=ROOFLINE_NAME,
            available=True,
            ms_per_token=roofline,
            tokens_per_s=per_token(roofline),
            source="servelab model on the CPU: bytes / copy bandwidth or FLOPs / matmul rate",
            note=parts,
        ),
        _floor_layer(step.ops, step.dispatch_s, roofline, lv.tpot_ms, cpu.threads),
        engine,
    ]
    measured = lv.tpot_ms
    gap = measured - roofline if measured is not None else None
    return gap_at(point, lv, layers, gap, _shares(gap, step.dispatch_s, lv))


def _floor_layer(
    ops: int, dispatch_s: float | None, roofline_ms: float, measured: float | None, threads: int
) -> Layer:
    if dispatch_s is None:
        return Layer(
            name=OP_FLOOR_NAME,
            available=False,
            source="servelab model",
            note="needs the CPU's op dispatch: the probe's launch chain did not run whole",
        )
    floor = roofline_ms + dispatch_s * MS_PER_S
    note = (
        f"{ops:,} unfused ops per step x {dispatch_s * US_PER_S / ops:.2f} us dispatch each "
        f"(the probe's tiny-op chain at {threads} threads), added to the roofline: the "
        "thread that dispatches an op also runs it"
    )
    if measured is not None and measured < MODEL_FASTER_TOLERANCE * floor:
        note += (
            ". The run is faster than this floor: its engine dispatches fewer ops, or its "
            "weights stay in the CPU's cache"
        )
    return Layer(
        name=OP_FLOOR_NAME,
        available=True,
        ms_per_token=floor,
        tokens_per_s=per_token(floor),
        source="servelab model on the CPU: roofline + ops per step x dispatch per op",
        note=note,
    )


def _shares(gap: float | None, dispatch_s: float | None, lv: LevelFacts) -> list[GapShare]:
    if gap is None or gap <= 0 or dispatch_s is None:
        return []
    dispatch = min(dispatch_s * MS_PER_S, gap)
    parts = [
        ("op dispatch (the op floor over the roofline)", dispatch, "model: op floor"),
        (
            "engine beyond the op floor (scheduler, Python around the ops, sampling, HTTP)",
            gap - dispatch,
            f"{lv.source}, against the model",
        ),
    ]
    return [
        GapShare(what=what, ms_per_token=round(ms, 4), share=round(ms / gap, 3), source=source)
        for what, ms, source in parts
    ]
