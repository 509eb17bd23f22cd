"""twin.json: the fitted engine, the limits it ran under, and each level replayed against
what was measured."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "TWIN_SCHEMA",
    "MetricPair",
    "TwinFit",
    "TwinLevel",
    "TwinLimit",
    "TwinPolicy",
    "TwinResult",
    "TwinTerm",
]

TWIN_SCHEMA = "servelab.twin/1"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TwinTerm(_Model):
    """One fitted term of the step cost, with its bootstrap standard error and 90% interval."""

    name: str
    unit: str
    value: float
    stderr: float | None
    low: float | None
    high: float | None


class TwinLimit(_Model):
    """A configured limit the replay used, and where it was read."""

    name: str
    value: int | None
    source: str


class TwinPolicy(_Model):
    """The engine's admission and budget rules the replay followed."""

    name: str
    running_reserve: float
    admit_reserve: float
    reserve_floor: float | None
    admit_headroom: float
    decodes_in_budget: bool
    victim: str
    requeue_front: bool


class MetricPair(_Model):
    """A metric measured and replayed; `low`/`high` span the replays at the fit's bootstrap
    draws; `error` is replayed / measured - 1."""

    measured: float | None
    replayed: float | None
    low: float | None = None
    high: float | None = None
    error: float | None = None


class TwinLevel(_Model):
    """One level: its load, the metrics side by side, and what the engine held."""

    level: int
    load: str
    requests: int
    metrics: dict[str, MetricPair]
    explained_share: float | None = Field(
        description="Sum over requests of min(replayed, measured) E2E over the sum of the "
        "max: 1 when every request took as long in the replay as in the run."
    )
    decode_batch_measured: float | None = Field(
        description="Requests decoding at once, time-weighted, from the streams."
    )
    decode_batch_replayed: float | None
    engine_running_mean: float | None = Field(
        description="The engine's own mean count of running requests, where it reported one."
    )
    preemptions: int = 0


class TwinFit(_Model):
    """How the cost was fitted and how well."""

    source: Literal["requests", "end-to-end times", "level summaries"]
    samples: int
    requests: int
    residual_ms: float | None
    rounds: int
    converged: bool
    resamples: int
    notes: list[str] = Field(default_factory=list)


class TwinResult(_Model):
    """The twin of one run: fitted costs, limits, policy, and the levels replayed."""

    model_config = ConfigDict(extra="forbid", title="twin.json")

    schema_: str = Field(TWIN_SCHEMA, alias="schema")
    engine: str | None
    policy: TwinPolicy
    limits: list[TwinLimit]
    terms: list[TwinTerm]
    request_overhead_ms: TwinTerm
    fit: TwinFit
    levels: list[TwinLevel]
    notes: list[str] = Field(default_factory=list)

    def limit(self, name: str) -> int | None:
        return next((lim.value for lim in self.limits if lim.name == name), None)

    def term(self, name: str) -> float:
        return next(t.value for t in self.terms if t.name == name)
