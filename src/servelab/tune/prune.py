"""Before a trial launches: does its layout fit the machine, and what does the model say?

A layout needing more GPUs than the engine may use, or weights that leave no room for a
KV cache (per `servelab model`), is pruned with the reason, at no launch cost. Where the
model knows the deployment, each trial also carries the model's account of its step (the
tensor-parallel all-reduces against the pipeline's bubble and sends), so a study over
layouts says *why* one won.

The deployment comes from the spec: the simulator's model profile names it in its
options (model, gpu, weights, kv_dtype, calibrate); the story profile is GLM-5 NVFP4 on
RTX PRO 6000; any other engine's model is a preset or a config.json, on the probe's GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.core.errors import ConfigError
from servelab.engines.base import EngineSpec
from servelab.model import Deployment, decode_step, deploy, kv_capacity, throughput_curve
from servelab.model.gpus import gpu_by_slug, gpu_for_nvml_name
from servelab.model.presets import resolve_model
from servelab.probe.report import ProbeReport
from servelab.tune.params import layout_label, layout_of
from servelab.tune.results import LayoutModel

__all__ = ["Fit", "available_gpus", "check_fit", "layout_model"]

_ACTIVATION_BYTES = 2
"""bf16 activations: what each tensor-parallel all-reduce carries per token and hidden unit."""
_STORY = ("glm-5-nvfp4", "rtx-pro-6000", "nvfp4")


@dataclass(frozen=True, slots=True)
class Fit:
    """Whether a trial's layout can run here; `reason` says why not."""

    ok: bool
    reason: str | None = None
    deployment: Deployment | None = None


def available_gpus(spec: EngineSpec, probe: ProbeReport | None, given: int | None) -> int | None:
    """GPUs the engine may use: the space's `gpus`, the simulator's own count, else the
    probe's (CUDA_VISIBLE_DEVICES counted); None when nothing says."""
    if given is not None:
        return given
    if spec.engine == "sim":
        count = spec.options.get("gpus")
        return int(count) if isinstance(count, int) else None
    if probe is None or probe.gpus is None or not probe.gpus.gpus:
        return None
    visible = spec.env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([part for part in visible.split(",") if part.strip()])
    return len(probe.gpus.gpus)


def check_fit(spec: EngineSpec, probe: ProbeReport | None, gpus: int | None) -> Fit:
    """The layout against the GPU count, then against the model (heads that divide, weights
    that leave room for a KV cache) where the model knows the deployment."""
    needed = spec.gpus_needed
    label = layout_label(layout_of(spec))
    if gpus is not None and needed > gpus:
        return Fit(False, f"{label} needs {needed} GPUs; {gpus} available")
    target = _target(spec, probe)
    if target is None:
        return Fit(True)
    try:
        return Fit(True, None, target.deploy())
    except ConfigError as exc:
        return Fit(False, str(exc))


def layout_model(
    dep: Deployment,
    *,
    load: float,
    cap: int | None,
    input_len: int,
    output_len: int,
    fits: bool,
    time_scale: float = 1.0,
) -> LayoutModel:
    """The model's closed-loop cycle of `dep` at `load` requests: each request prefills its
    prompt, then decodes `output_len` steps; the batch is what the cap and the KV cache let
    run together."""
    room = kv_capacity(dep, input_len, max(output_len, 1)).max_concurrency
    batch = max(1, min(int(load), cap or int(load), room))
    (point,) = throughput_curve(dep, input_len, output_len, [batch])
    step = decode_step(dep, batch, input_len + output_len / 2)
    message = batch / max(dep.layout.dp, 1) * dep.model.hidden * _ACTIVATION_BYTES
    cycle = _Cycle(
        decode_s=output_len * step.step_s,
        allreduce_s=output_len * step.allreduce_s,
        pipeline_s=output_len * (step.pp_send_s + step.pp_bubble_fraction * step.step_s),
        busy_s=output_len * step.gpu_busy_s,
        prefill_s=point.prefill_s,
    )
    return LayoutModel(
        tp=dep.layout.tp,
        pp=dep.layout.pp,
        batch=batch,
        kv_max_requests=room,
        step_ms=step.step_s * 1e3,
        allreduces=step.allreduces,
        allreduce_bytes=message if step.allreduces else 0.0,
        allreduce_ms=step.allreduce_s * 1e3,
        pp_send_ms=step.pp_send_s * 1e3,
        pp_bubble_fraction=step.pp_bubble_fraction,
        prefill_ms=point.prefill_s * 1e3,
        total_tokens_per_s=point.total_tokens_per_s * time_scale,
        output_tokens_per_s=point.output_tokens_per_s * time_scale,
        time_scale=time_scale,
        fits=fits,
        reason=cycle.reason(step.allreduces, message, batch, room, int(load)),
    )


@dataclass(frozen=True, slots=True)
class _Cycle:
    """Where one request cycle's time goes (seconds, at real speed)."""

    decode_s: float
    allreduce_s: float
    pipeline_s: float
    busy_s: float
    prefill_s: float

    def reason(self, allreduces: int, message: float, batch: int, room: int, load: int) -> str:
        """One sentence naming the largest share of the cycle, and the KV limit if it binds."""
        total = self.decode_s + self.prefill_s
        shares = {
            f"decode all-reduces ({allreduces} per step, {_bytes(message)} each) take "
            f"{_share(self.allreduce_s, total)} of the cycle": self.allreduce_s,
            f"the pipeline's sends and bubble take {_share(self.pipeline_s, total)} of the "
            "cycle": self.pipeline_s,
            f"prefilling the prompts takes {_share(self.prefill_s, total)} of the cycle": (
                self.prefill_s
            ),
            f"the GPUs' own decode work takes {_share(self.busy_s, total)} of the cycle": (
                self.busy_s
            ),
        }
        text = max(shares, key=lambda key: shares[key])
        if room < load and batch == room:
            text += f"; the KV cache holds only {room} requests of this length"
        return text


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole > 0 else "none"


def _bytes(n: float) -> str:
    for unit, size in (("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.0f} {unit}"
    return f"{n:.0f} B"


@dataclass(frozen=True, slots=True)
class _Target:
    """A deployment the model knows (its model and GPU resolve), at the spec's layout."""

    model: str
    gpu: str
    spec: EngineSpec
    weights: str | None = None
    kv_dtype: str = "bf16"
    calibration: str | None = None

    def deploy(self) -> Deployment:
        """The deployment; a ConfigError says why this layout cannot run it."""
        spec = self.spec
        return deploy(
            self.model,
            gpu=self.gpu,
            gpus=spec.tp * spec.pp * spec.dp,
            tp=spec.tp,
            pp=spec.pp,
            ep=spec.ep,
            dp=spec.dp,
            weights=self.weights,
            kv_dtype=self.kv_dtype,
            calibration=self.calibration,
        )


def _target(spec: EngineSpec, probe: ProbeReport | None) -> _Target | None:
    """What the model would deploy for `spec`; None when it cannot know the model or GPU."""
    options = spec.options
    if spec.engine == "sim" and options.get("profile") == "glm5-rtxpro6000-tp8":
        story_model, story_gpu, story_weights = _STORY
        return _Target(story_model, story_gpu, EngineSpec(engine="sim", tp=8), story_weights)
    model: Any
    gpu: Any
    if spec.engine == "sim":
        model, gpu = options.get("model"), options.get("gpu")
    else:
        model, gpu = spec.model, _probe_gpu(probe)
    if not isinstance(model, str) or not isinstance(gpu, str):
        return None
    try:
        resolve_model(model)
        gpu_by_slug(gpu)
    except ConfigError:
        return None
    if spec.engine != "sim":
        return _Target(model, gpu, spec)
    calibrate = options.get("calibrate")
    weights: Any = options.get("weights")
    return _Target(
        model,
        gpu,
        spec,
        weights=str(weights) if weights else None,
        kv_dtype=str(options.get("kv_dtype", "bf16")),
        calibration=str(calibrate) if calibrate and Path(str(calibrate)).is_file() else None,
    )


def _probe_gpu(probe: ProbeReport | None) -> str | None:
    if probe is None or probe.gpus is None or not probe.gpus.gpus:
        return None
    found = gpu_for_nvml_name(probe.gpus.gpus[0].name or "")
    return found.slug if found is not None else None
