"""The diagnosis document (diagnosis.json, `servelab diagnose --json`): findings and layers.

The single-stream gap is stated in layers, from the hardware's ceiling down to what was
measured: the roofline of `servelab model` (memory or compute time plus communication
and its per-step allowance, from the datasheet), the same with the probe's measurements
in place of the datasheet's, the kernel floor (the same step no faster than its kernels
replayed as a CUDA graph: kernels per step x per-kernel latency) and the engine as
configured. Each layer is one decode step per token; the shares say how much of the gap
each piece of evidence accounts for.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from servelab.bench.knee import Knee
from servelab.diagnose.check import PredictionCheck
from servelab.diagnose.findings import Finding

__all__ = [
    "SCHEMA",
    "CeilingPoint",
    "ConfiguredSetting",
    "Diagnosis",
    "GapLayers",
    "GapShare",
    "Layer",
    "SourceStatus",
]

SCHEMA = "servelab.diagnosis/1"


class Layer(BaseModel):
    """One layer of the gap: a decode step's time per token at the layers' batch."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="roofline, measured figures, kernel floor, engine.")
    available: bool
    ms_per_token: float | None = Field(default=None, description="Decode step, ms per token.")
    tokens_per_s: float | None = Field(default=None, description="1000 / ms_per_token.")
    source: str = Field(description="Where the number comes from.")
    note: str | None = Field(default=None, description="What it holds, or why it is absent.")


class GapShare(BaseModel):
    """A part of the gap between the roofline and the measured step, and what shows it."""

    model_config = ConfigDict(extra="forbid")

    what: str
    ms_per_token: float
    share: float = Field(description="Of the whole gap, 0-1.")
    source: str


class GapLayers(BaseModel):
    """The layers at one operating point (single stream, or the knee)."""

    model_config = ConfigDict(extra="forbid")

    point: str = Field(description="'single stream' or 'knee'.")
    level: int = Field(description="The sweep level measured there.")
    concurrency: float = Field(description="The level's concurrency (target or Little's).")
    batch: float = Field(description="Requests decoding together: the model's batch.")
    batch_source: str
    layers: list[Layer]
    gap_ms_per_token: float | None = Field(
        default=None, description="Measured step - roofline step; None without the model."
    )
    shares: list[GapShare] = Field(default_factory=list)


class CeilingPoint(BaseModel):
    """The model's closed-loop ceiling at one level's concurrency and request lengths."""

    model_config = ConfigDict(extra="forbid")

    concurrency: int
    total_tok_s: float = Field(description="Total tokens/s the modelled deployment allows.")
    measured_total_tok_s: float = Field(description="What the level measured, for the ratio.")


class ConfiguredSetting(BaseModel):
    """One setting the run was launched with or the engine resolved, and where it was read."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="servelab's knob, or the engine's own field name.")
    value: float | int | str | bool | list[str] | None
    source: str = Field(description="engine spec, engine command, or an engine.log line.")


class SourceStatus(BaseModel):
    """Whether one kind of evidence was there, and why not."""

    model_config = ConfigDict(extra="forbid")

    available: bool
    detail: str


class Diagnosis(BaseModel):
    """Everything `servelab diagnose` says about one run directory."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(default=SCHEMA, alias="schema")
    run_dir: str
    run_name: str
    engine: str | None = Field(description="Whose flags the actions are in; None: knobs.")
    deployment: str | None = Field(
        description="The model's deployment, e.g. 'h200-ref on 1x h200'."
    )
    time_scale: float = Field(description="The model's times were divided by this.")
    knee: Knee
    findings: list[Finding] = Field(description="Most important first.")
    layers: list[GapLayers] = Field(default_factory=list)
    ceiling: list[CeilingPoint] = Field(
        default_factory=list, description="The model's ceiling at each closed-loop level."
    )
    sources: dict[str, SourceStatus] = Field(
        description="summary, gpu telemetry, engine metrics, engine log, probe, model."
    )
    configuration: list[ConfiguredSetting] = Field(
        default_factory=list,
        description="What the run was configured with: the spec's knobs, the command's flags "
        "and the engine's resolved settings, each with its source. The rules read them.",
    )
    notes: list[str] = Field(default_factory=list)
    prediction: PredictionCheck | None = Field(
        default=None,
        description="This run applied an earlier run's finding (summary.json run.applies): "
        "that finding's expected gain against what this run measured.",
    )
    predictions: list[PredictionCheck] = Field(
        default_factory=list,
        description="Every gain that finding stated, each checked; `prediction` is the first.",
    )

    @property
    def top(self) -> Finding | None:
        """The most important finding."""
        return self.findings[0] if self.findings else None
