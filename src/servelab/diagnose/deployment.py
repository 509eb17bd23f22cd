"""Which deployment the run measured, for the model's ceiling: given, or known by the run.

Given (`--model`, `--gpu`, ...) it must build, or the input is bad. Otherwise the embedded
engine knows its own preset (its model folder is named after it, and the model catalogue
holds its GPU presets), and a probe's measured GPUs name the catalogue slug. When nothing
says, there is no model and the rules say what they could not compare.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath

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

__all__ = ["ModelChoice", "choose_model"]

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
    name = options.model or _embedded_preset(files)
    if name is None:
        return ModelChoice(None, "no model: give --model (and --gpu, --tp) for the ceiling", notes)
    calibration = _calibration(files, notes)
    layout = _Layout(
        gpu=options.gpu or (calibration.gpu_slug if calibration else None),
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


def _embedded_preset(files: RunFiles) -> str | None:
    """The embedded engine's preset, from its model folder `<preset>-<fingerprint>`."""
    if files.engine != "embedded":
        return None
    model = (files.summary.engine or {}).get("model") or files.summary.run.target.get("model")
    if not isinstance(model, str):
        return None
    match = _EMBEDDED_FOLDER.match(PurePath(model).name)
    preset = match.group("preset") if match else model
    return preset if preset in MODEL_PRESETS else None


def _calibration(files: RunFiles, notes: list[str]) -> Calibration | None:
    if files.probe is None or not isinstance(files.probe.document.get("comm"), dict):
        return None
    try:
        return calibration_from_probe(files.probe.document)
    except ConfigError as exc:
        notes.append(f"the probe does not calibrate the model: {exc}")
        return None
