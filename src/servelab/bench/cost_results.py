"""Typed cost results: the price a run was given, and what its tokens cost at each level.

Stored in summary.json (`BenchSummary.price`, `LevelSummary.cost`). Every number is
derived from the level's own fields (bench.cost, docs/METRICS.md "Cost and energy"), so
a reader can check it by hand from the same file.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CostPart", "HourlyPrice", "LevelCost", "Price", "PriceBasis"]

PriceBasis = Literal["gpu_hour", "machine_hour"]
CostPart = Literal["price", "energy"]
"""What `LevelCost.unavailable` explains: the priced fields, or the energy fields."""


class HourlyPrice(BaseModel):
    """A price as the user gave it, before the GPU count it multiplies is known."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    basis: PriceBasis = Field(description="Per GPU-hour or per whole-machine hour.")
    usd: float = Field(gt=0, description="US dollars per GPU-hour or per machine-hour.")
    source: str = Field(description="Where it was given, e.g. `servelab bench --gpu-hour-price`.")


class Price(BaseModel):
    """What the deployment costs an hour, and where each part of that came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    basis: PriceBasis = Field(
        description="gpu_hour: usd_per_gpu_hour x gpus; machine_hour: the whole machine."
    )
    usd_per_gpu_hour: float | None = Field(
        description="The price per GPU-hour given, in USD; None for a machine price."
    )
    usd_per_machine_hour: float | None = Field(
        description="The price per machine-hour given, in USD; None for a GPU price."
    )
    gpus: int | None = Field(
        description="GPUs the deployment holds (multiplies a GPU price); None where no "
        "source knew it (a machine price needs none)."
    )
    gpus_source: str | None = Field(
        description="Where `gpus` came from: the engine spec's layout, --gpus, or the probe."
    )
    price_source: str = Field(
        description="Which command and option gave the price (a report's overrides the run's)."
    )
    usd_per_hour: float = Field(
        description="The deployment's cost per hour, in USD: usd_per_gpu_hour x gpus, or "
        "usd_per_machine_hour."
    )


class LevelCost(BaseModel):
    """One level's cost per token (from the price) and energy per token (from sampled GPU
    power); a field that cannot be given is None with the reason under `unavailable`."""

    model_config = ConfigDict(extra="forbid")

    usd_per_m_total_tokens: float | None = Field(
        default=None,
        description="Price.usd_per_hour / 3600 / total_throughput x 1e6: USD per million "
        "input + output tokens at this level's rate.",
    )
    usd_per_m_output_tokens: float | None = Field(
        default=None,
        description="Price.usd_per_hour / 3600 / output_throughput x 1e6: USD per million "
        "output tokens.",
    )
    gpu_energy_j: float | None = Field(
        default=None,
        description="The sampled GPUs' energy over the level (telemetry.gpu.overall.energy_j), "
        "in J: GPU power only, not the host, fans or network.",
    )
    j_per_output_token: float | None = Field(
        default=None, description="gpu_energy_j / total_output_tokens, in J per token."
    )
    j_per_total_token: float | None = Field(
        default=None,
        description="gpu_energy_j / (total_input_tokens + total_output_tokens), in J per token.",
    )
    total_tokens_per_s_per_mw: float | None = Field(
        default=None,
        description="total_throughput / (telemetry.gpu.overall.power_mean_w / 1e6): total "
        "tok/s per megawatt of sampled GPU power.",
    )
    unavailable: dict[CostPart, str] = Field(
        default_factory=dict,
        description="Why the price's or the energy's fields are None: no price given, GPU "
        "power not sampled, no tokens completed.",
    )
