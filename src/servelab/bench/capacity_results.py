"""Typed results of a capacity search: each level's verdict against the SLO, and the answer.

Stored in summary.json (`BenchSummary.capacity`) and rewritten after every level, so a
search stopped by Ctrl-C or a crash keeps every verdict it reached. The rule behind each
field is bench.attainment's (the verdict) and bench.capacity's (the search).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CapacityLevel",
    "CapacityResult",
    "CapacityStatus",
    "CapacityStep",
    "LevelJudgement",
    "SloQuantile",
]

CapacityStep = Literal["start", "double", "max", "bisect", "remeasure"]
CapacityStatus = Literal["searching", "found", "none", "at_max", "steps", "behind"]

_INFINITE = (
    " None where it is infinite (a failed request, or one without the metric, counts as "
    "infinitely slow) or no band was drawn (`noise` says why)."
)


class SloQuantile(BaseModel):
    """One SLO metric at a level, read at the attainment share."""

    model_config = ConfigDict(extra="forbid")

    metric: str = Field(description="ttft, tpot or e2e.")
    slo_ms: float = Field(description="The SLO's bound, in ms.")
    value_ms: float | None = Field(
        description="The attainment quantile: the smallest value that at least `attainment` "
        "of the level's attempted requests stay at or under, in ms. At or under `slo_ms` "
        "exactly when this SLO alone is attained." + _INFINITE
    )
    band_lo_ms: float | None = Field(description="The band's low end, in ms." + _INFINITE)
    band_hi_ms: float | None = Field(description="The band's high end, in ms." + _INFINITE)


class LevelJudgement(BaseModel):
    """What one load's requests (every measurement of it, pooled) say about the SLO."""

    model_config = ConfigDict(extra="forbid")

    requests: int = Field(description="Attempted requests judged (completed + failed).")
    attained: float = Field(description="Share of them that completed and met every SLO.")
    attained_lo: float | None = Field(description="The share's band, low end; None: no band.")
    attained_hi: float | None = Field(description="The share's band, high end; None: no band.")
    quantiles: list[SloQuantile] = Field(description="Each SLO metric at the attainment share.")
    binding: str = Field(
        description="The SLO metric nearest its bound (largest value / bound): the one named."
    )
    meets: bool = Field(description="attained >= attainment.")
    within_noise: bool = Field(
        description="A repeat could reverse `meets`: the share's band reaches both sides of "
        "the attainment, the binding metric's band both sides of its bound, or no band."
    )
    noise: str = Field(description="Why it is within noise, or that it is not, in words.")


class CapacityLevel(BaseModel):
    """One level the search ran, and the verdict on its load after it."""

    model_config = ConfigDict(extra="forbid")

    level: int = Field(description="The level's position in summary.json's levels.")
    load: float = Field(description="Concurrency or request rate (requests/s).")
    step: CapacityStep = Field(
        description="Why this load was run: start, double (twice the last that met), max "
        "(the doubling clipped to the largest load allowed), bisect, remeasure."
    )
    measurements: int = Field(description="Measurements of this load pooled in the verdict.")
    judged: LevelJudgement


class CapacityResult(BaseModel):
    """The highest load that meets the SLO, and every level that found it."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["concurrency", "request_rate"]
    slo_ms: dict[str, float] = Field(description="The SLOs, in ms, by metric.")
    attainment: float = Field(
        description="Share of a level's attempted requests that must meet every SLO."
    )
    status: CapacityStatus = Field(
        description="searching (not finished: interrupted), found (the boundary is within "
        "the tolerance), none (the lowest load tried fails), at_max (the largest load allowed "
        "meets), steps (the level budget ran out first), behind (a tuning trial stopped "
        "below the best trial's capacity)."
    )
    capacity: float | None = Field(
        description="The highest load that meets the SLO below the lowest that fails; None "
        "when none met."
    )
    held: CapacityLevel | None = Field(
        description="The boundary's meeting level (its latest, pooled verdict)."
    )
    failed: CapacityLevel | None = Field(
        description="The boundary's failing level: the lowest load that fails."
    )
    within_noise: bool = Field(
        description="A boundary level is still within noise after its re-measures."
    )
    levels: list[CapacityLevel] = Field(description="Every level of the search, in order.")
    plan: str = Field(description="The search's settings, in words.")
    explanation: str = Field(description="The answer, in one sentence.")
