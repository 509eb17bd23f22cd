"""A finding: one bottleneck (or a fact that matters), with its evidence and what to try.

Every number a rule uses is kept as `Evidence` naming where it came from (a level of
summary.json, the GPU telemetry, an engine metric, a line of engine.log, a probe verdict,
a term of the model), so a reader can check it. Evidence that would have mattered but
was not there is listed under `missing`, and the confidence says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from servelab.core.severity import Severity
from servelab.engines.base import KNOB_NAMES, LAYOUT_NAMES

__all__ = [
    "Action",
    "ActionTarget",
    "Evidence",
    "ExpectedGain",
    "Finding",
    "FindingKind",
    "Severity",
    "Tally",
    "combine",
]


class FindingKind(StrEnum):
    """What limits the run, or what else the run shows that matters."""

    RUNNING_REQUEST_CAP = "running_request_cap"
    KV_CAPACITY = "kv_capacity"
    BATCH_TOKEN_BUDGET = "batch_token_budget"
    LAUNCH_OVERHEAD = "launch_overhead"
    CUDA_GRAPH_BATCH = "cuda_graph_batch"
    COMM_LATENCY = "comm_latency"
    MEMORY_BOUND = "memory_bound"
    PREFILL_COMPUTE = "prefill_compute"
    PREFIX_CACHE = "prefix_cache"
    CLIENT_BOUND = "client_bound"
    CPU_BOUND = "cpu_bound"
    CPU_CONTENTION = "cpu_contention"
    ERRORS = "errors"
    MOE_CONFIG_MISSING = "moe_config_missing"
    ACCURACY_WARNING = "accuracy_warning"
    BROKEN_OUTPUT = "broken_output"
    NOT_DETERMINISTIC = "not_deterministic"
    NOT_BATCH_INVARIANT = "not_batch_invariant"
    QUALITY_DRIFT = "quality_drift"
    QUALITY_REQUESTS_FAILED = "quality_requests_failed"
    SLO_VIOLATION = "slo_violation"
    NOT_SATURATED = "not_saturated"
    SETTINGS_CONTRADICT_MACHINE = "settings_contradict_machine"


class Evidence(BaseModel):
    """One number (or fact) a rule used, and where it was read."""

    model_config = ConfigDict(extra="forbid")

    what: str = Field(description="What the value is, e.g. 'running requests (max)'.")
    value: float | int | str | bool | None
    unit: str | None = Field(default=None, description="e.g. 'ms', 'tok/s', '%', 'requests'.")
    source: str = Field(
        description="Where it came from: 'summary.json level 3', 'telemetry level 3', an "
        "engine metric name, 'engine.log line 42', 'probe verdict p2p-not-supported', "
        "'model: decode step'."
    )
    supports: bool = Field(
        default=True, description="False for evidence that speaks against the finding."
    )


class ActionTarget(StrEnum):
    """What an action changes, so that a tool applies only what it can set."""

    ENGINE = "engine"
    LOAD = "load"
    OUTSIDE = "outside"


_ENGINE_KNOBS = frozenset({*KNOB_NAMES, *LAYOUT_NAMES, "layout"})
"""Knobs of the engine spec an action names: its knobs and its parallel layout."""
_ENV_PREFIX = "env."
"""An engine spec's environment variable as an action's knob: env.OMP_NUM_THREADS."""


class Action(BaseModel):
    """What to change: a knob with its value and, where the engine is known, its own flags."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="The action as a sentence, flags included.")
    target: ActionTarget = Field(
        description="What it changes. engine: a setting of the engine spec (a knob, the "
        "layout, an env variable, the engine's own flags): `tune` tries these; load: a "
        "`servelab bench` setting (concurrency, rate, workers, timeout), the measurement "
        "rather than the engine; outside: what servelab cannot set on the engine or the load "
        "(the machine, a kernel, the driver, BIOS, the deployment) or something to read or "
        "measure first. A stored action without it gets one from its knob and flags."
    )
    knob: str | None = Field(
        default=None, description="servelab's knob (engine spec) or bench option, if any."
    )
    value: str | int | float | bool | None = None
    engine: str | None = Field(default=None, description="Whose flags `flags` are.")
    flags: list[str] = Field(
        default_factory=list, description="The engine's own flags, e.g. ['--max-num-seqs', '256']."
    )
    available: bool = Field(
        default=True,
        description="False when this engine has no setting for the knob: the user cannot act "
        "on it here, and the finding ranks below those they can.",
    )
    conditional: bool = Field(
        default=False,
        description="True when it applies only if a setting the run does not show has the "
        "value its text names ('if CUDA graphs are off: ...'): a finding whose settings "
        "actions are all conditional ranks below those on known settings.",
    )

    @model_validator(mode="before")
    @classmethod
    def _target_of_stored(cls, data: Any) -> Any:
        """diagnosis.json written before `target` existed: the target its shape implies."""
        if isinstance(data, dict) and "target" not in data:
            return {**data, "target": _inferred_target(data)}
        return data


def _inferred_target(data: dict[str, Any]) -> ActionTarget:
    """An engine's flags or a knob of its spec: engine; any other knob was a `servelab bench`
    option (bench_action made the only such actions): load; no knob and no flags: outside."""
    knob = data.get("knob")
    if data.get("engine") is not None or _is_engine_knob(knob):
        return ActionTarget.ENGINE
    if knob is not None or data.get("flags"):
        return ActionTarget.LOAD
    return ActionTarget.OUTSIDE


def _is_engine_knob(knob: Any) -> bool:
    return isinstance(knob, str) and (knob in _ENGINE_KNOBS or knob.startswith(_ENV_PREFIX))


class ExpectedGain(BaseModel):
    """How much faster the change should make the run, where the model (or sweep) can say."""

    model_config = ConfigDict(extra="forbid")

    factor: float = Field(description="New / old of `metric`: 2.0 is twice as fast.")
    metric: str = Field(description="e.g. 'total throughput', 'single-stream tok/s'.")
    at: str | None = Field(default=None, description="The operating point, e.g. 'concurrency 128'.")
    source: str = Field(description="'model', or how it was estimated from the sweep.")
    text: str
    low: float | None = Field(
        default=None,
        description="The least the change should give (new / old of `metric`): with `high`, "
        "the interval a measured factor is judged against. 1.0 for a gain stated only as a "
        "bound ('up to').",
    )
    high: float | None = Field(default=None, description="The most the change should give.")

    @model_validator(mode="after")
    def _ordered(self) -> ExpectedGain:
        if self.low is not None and self.high is not None and not self.low <= self.high:
            raise ValueError(f"expected gain interval [{self.low}, {self.high}] is reversed")
        return self

    def holds(self, measured: float) -> bool | None:
        """Whether a measured factor lies in the interval; None without one."""
        if self.low is None or self.high is None:
            return None
        return self.low <= measured <= self.high


class Finding(BaseModel):
    """One explained bottleneck or fact, with its evidence, its confidence and what to try."""

    model_config = ConfigDict(extra="forbid")

    kind: FindingKind
    title: str
    severity: Severity
    confidence: float = Field(ge=0, le=1, description="How sure the rule is, from its evidence.")
    evidence: list[Evidence]
    explanation: str = Field(description="Why this causes what was measured.")
    actions: list[Action] = Field(default_factory=list)
    expected_gain: ExpectedGain | None = Field(
        default=None, description="The headline gain: the first of `expected_gains`."
    )
    expected_gains: list[ExpectedGain] = Field(
        default_factory=list,
        description="Every metric the action should move, each with its interval (a "
        "diagnosis.json written before this field has its one `expected_gain` here).",
    )
    missing: list[str] = Field(
        default_factory=list, description="Evidence that was not available, and what it costs."
    )
    levels: list[int] = Field(default_factory=list, description="The sweep levels it is about.")
    impact: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Share of the time it accounts for (1 - 1/expected gain, or the rule's "
        "own measure); orders findings of equal severity.",
    )

    @model_validator(mode="after")
    def _gains(self) -> Finding:
        if self.expected_gain is not None and not self.expected_gains:
            self.expected_gains = [self.expected_gain]
        elif self.expected_gain is None and self.expected_gains:
            self.expected_gain = self.expected_gains[0]
        return self


def combine(*weights: float) -> float:
    """Independent pieces of evidence, each right with probability w, as a noisy OR.

    Two sources of 0.5 give 0.75; the result stays below 0.95 because no rule sees
    everything that happens inside an engine.
    """
    doubt = 1.0
    for weight in weights:
        doubt *= 1.0 - max(0.0, min(weight, 1.0))
    return round(min(1.0 - doubt, 0.95), 3)


@dataclass
class Tally:
    """A rule's evidence as it is gathered, each independent source with its weight."""

    evidence: list[Evidence] = field(default_factory=list)
    sources: dict[str, float] = field(default_factory=dict)

    def add(self, source: str, weight: float, evidence: list[Evidence]) -> bool:
        """Count `source` if it brought evidence; True if it did."""
        if not evidence:
            return False
        self.evidence += evidence
        self.sources[source] = max(weight, self.sources.get(source, 0.0))
        return True

    def note(self, evidence: Evidence | None) -> None:
        """Evidence shown for context (or against), not counted as a source."""
        if evidence is not None:
            self.evidence.append(evidence)

    def count(self, *sources: str) -> int:
        """How many of these sources brought evidence."""
        return sum(source in self.sources for source in sources)

    @property
    def confidence(self) -> float:
        return combine(*self.sources.values())
