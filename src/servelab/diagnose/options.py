"""What `diagnose` is told beyond the run directory: the deployment, the engine, the probe."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DiagnoseOptions"]


class DiagnoseOptions(BaseModel):
    """Keyword-only settings; every one may be left out (rules then say what is missing).

    The deployment (`model`, `gpu`, ...) builds `servelab model`'s ceiling; an embedded
    engine's run knows its own. `engine` phrases actions in that engine's flags when the
    run does not say which engine served it. `probe` is used when the run directory has no
    probe.json. `time_scale` is for runs of `servelab sim --time-scale X`: the model's
    times are divided by it, as the simulator's were.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = Field(default=None, description="A model preset or a config.json.")
    gpu: str | None = Field(default=None, description="GPU catalogue slug, e.g. 'h200'.")
    gpus: int | None = Field(default=None, ge=1)
    tp: int | None = Field(default=None, ge=1)
    pp: int = Field(default=1, ge=1)
    ep: int = Field(default=1, ge=1)
    dp: int = Field(default=1, ge=1)
    weights: str | None = Field(default=None, description="bf16, fp8, nvfp4, int4.")
    kv_dtype: str = "bf16"
    engine: str | None = Field(default=None, description="sglang, vllm, transformers, ...")
    probe: Path | None = Field(default=None, description="A probe.json, if the run has none.")
    time_scale: float = Field(default=1.0, gt=0)
