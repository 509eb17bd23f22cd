"""The largest concurrency worth sweeping: what the model says the KV cache holds.

Past the requests of the workload's size that the cache holds at once, the engine can
only queue more, so the adaptive sweep stops there. The model knows it when the spec's
model is one it can build (a preset, or a config.json) and the probe saw a GPU of the
catalogue; otherwise the sweep keeps its default cap and the knee and stop rules end it.
"""

from __future__ import annotations

from servelab.core.errors import ConfigError
from servelab.engines.base import EngineSpec
from servelab.model import deploy, kv_capacity
from servelab.model.gpus import gpu_for_nvml_name
from servelab.probe.report import ProbeReport

__all__ = ["kv_room"]


def kv_room(
    spec: EngineSpec, probe: ProbeReport, *, input_len: int, output_len: int
) -> tuple[int, str] | None:
    """(requests the model's KV cache holds at these lengths, where that figure came from)."""
    if spec.model is None or probe.gpus is None or not probe.gpus.gpus:
        return None
    gpu = gpu_for_nvml_name(probe.gpus.gpus[0].name or "")
    if gpu is None:
        return None
    try:
        dep = deploy(
            spec.model,
            gpu=gpu,
            gpus=spec.tp * spec.pp * spec.dp,
            tp=spec.tp,
            pp=spec.pp,
            dp=spec.dp,
        )
        room = kv_capacity(dep, input_len, max(output_len, 1)).max_concurrency
    except ConfigError:
        return None
    if room < 1:
        return None
    return room, f"the model's KV capacity for {spec.model} on {dep.gpus}x {gpu.slug}"
