"""Which deployment the run measured, for the model's ceiling: given, or known by the run.

Given (`--model`, `--gpu`, ...) it must build, or the input is bad. Otherwise the embedded
engine knows its own preset (its model folder is named after it, and the model catalogue
holds its GPU presets), and a probe's measured GPUs name the catalogue slug. When nothing
says, there is no model and the rules say what they could not compare. An engine the
spec put on the CPU has no GPU deployment: the rules' model is a GPU's, and the CPU's
ceiling is stated in the gap layers instead (`servelab.diagnose.cpu_layers`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import yaml

from servelab.bench.results import BenchSummary
from servelab.core.errors import ConfigError
from servelab.diagnose.engineconf import EngineConfig
from servelab.diagnose.inputs import RunFiles
from servelab.diagnose.modelview import ModelView
from servelab.diagnose.options import DiagnoseOptions
from servelab.model import (
    MODEL_PRESETS,
    Calibration,
    Deployment,
    KernelStyle,
    calibration_from_probe,
    deploy,
)
from servelab.model.gpus import gpu_for_nvml_name

__all__ = [
    "CPU_DETAIL",
    "ModelChoice",
    "choose_model",
    "embedded_preset",
    "launched_spec",
    "preset_from_folder",
]

CPU_DETAIL = (
    "no GPU model: the engine ran on the CPU (the gap layers hold the CPU's roofline and op floor)"
)

_EMBEDDED_FOLDER = re.compile(r"^(?P<preset>.+)-[0-9a-f]{8,}$")
_KERNELS = {
    "embedded": KernelStyle.UNFUSED,
    "transformers": KernelStyle.UNFUSED,
    "sglang": KernelStyle.FUSED,
    "vllm": KernelStyle.FUSED,
}
"""Whose kernels each engine runs, for the kernel floor; others take the preset's."""


@dataclass(frozen=True)
class _Layout:
    """The deployment's GPU and layout, from the options and what the run says."""

    gpu: str | None
    tp: int | None
    kernels: KernelStyle | None
    options: DiagnoseOptions

    def deploy(self, name: str, calibration: Calibration | None) -> Deployment:
        options = self.options
        return deploy(
            name,
            gpu=self.gpu,
            gpus=options.gpus,
            tp=self.tp,
            pp=options.pp,
            ep=options.ep,
            dp=options.dp,
            weights=options.weights,
            kv_dtype=options.kv_dtype,
            kernels=self.kernels,
            calibration=calibration,
        )


@dataclass(frozen=True)
class ModelChoice:
    """The model view (or None), what was used, and notes about calibration."""

    view: ModelView | None
    detail: str
    notes: list[str]


def choose_model(files: RunFiles, options: DiagnoseOptions, conf: EngineConfig) -> ModelChoice:
    """The deployment to compare with; a ConfigError only when the user's own flags fail."""
    notes: list[str] = []
    if options.model is None and (launched_spec(files.summary) or {}).get("device") == "cpu":
        return ModelChoice(None, CPU_DETAIL, notes)
    name = options.model or embedded_preset(files.summary, files.engine)
    if name is None:
        return ModelChoice(None, "no model: give --model (and --gpu, --tp) for the ceiling", notes)
    calibration = _calibration(files, notes)
    layout = _Layout(
        gpu=options.gpu or (calibration.gpu_slug if calibration else None) or _probed_gpu(files),
        tp=options.tp or (conf.tp.value if conf.tp else None),
        kernels=_KERNELS.get(conf.name or ""),
        options=options,
    )
    try:
        datasheet = layout.deploy(name, None)
    except ConfigError as exc:
        if options.model is not None:
            raise
        return ModelChoice(None, f"no model: {name}: {exc}", notes)
    calibrated = None
    if calibration is not None:
        try:
            calibrated = layout.deploy(name, calibration)
        except ConfigError as exc:
            notes.append(f"the probe does not calibrate the model: {exc}")
    view = ModelView(
        deployment=calibrated or datasheet,
        datasheet=datasheet if calibrated is not None else None,
        time_scale=options.time_scale,
    )
    how = "given" if options.model else "the embedded engine's preset"
    return ModelChoice(view, f"{view.label} ({how})", notes)


def embedded_preset(summary: BenchSummary, engine: str | None) -> str | None:
    """The embedded engine's preset, from its model folder `<preset>-<fingerprint>`."""
    return preset_from_folder(summary) if engine == "embedded" else None


def preset_from_folder(summary: BenchSummary) -> str | None:
    """The model preset an embedded model folder `<preset>-<fingerprint>` was built from,
    whichever engine served it (vLLM's CPU build serves the same folders)."""
    model = (summary.engine or {}).get("model") or summary.run.target.get("model")
    if not isinstance(model, str):
        return None
    match = _EMBEDDED_FOLDER.match(PurePath(model).name)
    preset = match.group("preset") if match else model
    return preset if preset in MODEL_PRESETS else None


def launched_spec(summary: BenchSummary) -> dict[str, Any] | None:
    """The spec the run launched (summary.json engine.spec, YAML), as plain data; None for
    a run attached by URL or a spec that does not read."""
    text = (summary.engine or {}).get("spec")
    if not isinstance(text, str):
        return None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    return data if isinstance(data, dict) else None


def _probed_gpu(files: RunFiles) -> str | None:
    """The catalogue slug of the GPUs the probe saw through NVML (a probe without `--comm`
    measures nothing, but still names the card: a run on an H100 is priced as one, not as
    the preset's GPU); None when they differ or none is in the catalogue."""
    if files.probe is None:
        return None
    listed = (files.probe.document.get("gpus") or {}).get("gpus") or []
    specs = {gpu_for_nvml_name(str(g.get("name") or "")) for g in listed if isinstance(g, dict)}
    if len(specs) != 1:
        return None
    spec = specs.pop()
    return spec.slug if spec is not None else None


def _calibration(files: RunFiles, notes: list[str]) -> Calibration | None:
    if files.probe is None or not isinstance(files.probe.document.get("comm"), dict):
        return None
    if not files.probe.document["comm"].get("devices"):
        return None  # no GPU was measured (a CPU-only probe): nothing to calibrate with
    try:
        return calibration_from_probe(files.probe.document)
    except ConfigError as exc:
        notes.append(f"the probe does not calibrate the model: {exc}")
        return None
