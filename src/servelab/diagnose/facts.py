"""The run as the rules see it: each level's numbers, its telemetry, and the model beside it.

Built once from the run directory, so each rule is a small function of `RunFacts`. The
decode batch of a level (what the model is asked about) is the engine's own mean count
of running requests where /metrics had it; else, by Little's law applied to the decode
phase, concurrency x (1 - mean TTFT / mean E2E) (the share of each request's time spent
decoding rather than waiting or prefilling), bounded by a configured running cap.

A level's engine counts are read only over MIN_ENGINE_SAMPLES samples of their source
(/metrics or the log's stats lines): a summary.json written before the summary refused
fewer still holds such counts, and one scrape between two steps reads 0 running at any
load. Such a level has no engine counts (`engine` None) and says why (`engine_missing`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servelab.bench.knee import Knee
from servelab.bench.quality.results import QualityResult
from servelab.bench.results import BenchSummary, LevelSummary
from servelab.core.units import MS_PER_S
from servelab.diagnose.engineconf import EngineConfig
from servelab.diagnose.inputs import ProbeDoc
from servelab.diagnose.modelview import ModelView
from servelab.engines.signatures import EventKind, LogEvent
from servelab.model import KernelFloor, StepBreakdown
from servelab.telemetry.summary import (
    MIN_ENGINE_SAMPLES,
    EngineLevel,
    GpuStats,
    LevelTelemetry,
    too_few_samples,
)
from servelab.trace import TraceSummary

__all__ = [
    "MODEL_FASTER_TOLERANCE",
    "LevelFacts",
    "ModelPoint",
    "RunFacts",
    "engine_counts",
    "level_facts",
]

MODEL_FASTER_TOLERANCE = 0.8
"""A run faster than this share of the model's TPOT means the model does not describe it
(another GPU or model, speculative decoding, a simulator's time scale): the model is an
upper bound on speed, and measurement noise plus the model's approximations are worth
10-15%, not 20%."""


@dataclass(frozen=True)
class ModelPoint:
    """The model at one level's batch and request lengths; the floors are TPOTs too: the
    model's TPOT with its decode step replaced by the kernel floor's."""

    tpot_ms: float
    step: StepBreakdown
    datasheet_tpot_ms: float | None
    floor: KernelFloor
    graph_floor_tpot_ms: float
    eager_floor_tpot_ms: float


@dataclass(frozen=True)
class LevelFacts:
    """One level of the sweep with what the rules derive from it."""

    summary: LevelSummary
    load: float
    closed: bool
    input_tokens: float
    output_tokens: float
    batch: float
    batch_source: str
    engine: EngineLevel | None
    gpu: GpuStats | None
    kv_capacity_tokens: float | None = None
    preemptions: float | None = None
    model: ModelPoint | None = None
    engine_missing: str | None = None
    """Why the engine's counts of a scraped level are left out: too few samples."""

    @property
    def level(self) -> int:
        return self.summary.level

    @property
    def source(self) -> str:
        return f"summary.json level {self.summary.level}"

    @property
    def label(self) -> str:
        if self.closed:
            return f"concurrency {self.summary.max_concurrency}"
        return f"{self.summary.request_rate:g} req/s"

    @property
    def tokens_per_request(self) -> float:
        return self.input_tokens + self.output_tokens

    @property
    def tpot_ms(self) -> float | None:
        return self.summary.mean_tpot_ms

    @property
    def ratio(self) -> float | None:
        """Measured TPOT / the model's at this batch."""
        if self.model is None or self.tpot_ms is None or not self.model.tpot_ms:
            return None
        return self.tpot_ms / self.model.tpot_ms


@dataclass(frozen=True)
class RunFacts:
    """Everything the rules read, and the state of each source of evidence."""

    summary: BenchSummary
    levels: list[LevelFacts]
    knee: Knee
    engine: EngineConfig
    events: list[LogEvent] | None
    probe: ProbeDoc | None
    model: ModelView | None
    missing: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    model_detail: str = ""
    traces: list[TraceSummary] = field(default_factory=list)
    """Trace summaries of a profiled level (servelab bench --torch-profile)."""
    quality: QualityResult | None = None
    """The quality probe's result (quality.json), where the run was made with --quality."""

    @property
    def closed(self) -> list[LevelFacts]:
        """Closed-loop levels with completed requests, by concurrency."""
        return sorted(
            (lv for lv in self.levels if lv.closed and lv.summary.completed != 0),
            key=lambda lv: lv.load,
        )

    @property
    def measured(self) -> list[LevelFacts]:
        """Levels with completed requests, by load."""
        return sorted(
            (lv for lv in self.levels if lv.summary.completed != 0), key=lambda lv: lv.load
        )

    def events_of(self, *kinds: EventKind) -> list[LogEvent]:
        return [e for e in self.events or [] if e.kind in kinds]

    def knee_level(self) -> LevelFacts | None:
        if not self.knee.found:
            return None
        return next(
            (lv for lv in self.closed if lv.summary.max_concurrency == self.knee.concurrency),
            None,
        )

    def after_knee(self) -> list[LevelFacts]:
        """Closed-loop levels beyond the knee."""
        if not self.knee.found or self.knee.concurrency is None:
            return []
        return [lv for lv in self.closed if lv.load > self.knee.concurrency]


def level_facts(
    summary: LevelSummary,
    *,
    workload: dict[str, object],
    running_cap: int | None,
    raw: dict[str, float | None],
    model: ModelView | None,
) -> LevelFacts:
    """One level's facts; `raw` holds what only metrics.jsonl has (capacity, preemptions)."""
    max_concurrency = summary.max_concurrency
    closed = max_concurrency is not None
    load = float(max_concurrency) if max_concurrency is not None else summary.concurrency or 0.0
    done = summary.completed
    input_tokens = summary.total_input_tokens / done if done else _number(workload, "input_len")
    output_tokens = summary.total_output_tokens / done if done else _number(workload, "output_len")
    telemetry = summary.telemetry
    engine, engine_missing = engine_counts(telemetry)
    gpu = telemetry.gpu.overall if telemetry and telemetry.gpu.available else None
    batch, batch_source = _batch(summary, load, engine, running_cap)
    point = _model_point(model, batch, input_tokens, output_tokens) if model and done else None
    return LevelFacts(
        summary=summary,
        load=load,
        closed=closed,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        batch=batch,
        batch_source=batch_source,
        engine=engine,
        gpu=gpu,
        kv_capacity_tokens=raw.get("kv_capacity_tokens"),
        preemptions=raw.get("preemptions"),
        model=point,
        engine_missing=engine_missing,
    )


def engine_counts(telemetry: LevelTelemetry | None) -> tuple[EngineLevel | None, str | None]:
    """The level's engine counts if enough samples back them; else None and, for a level
    that was scraped too few times, why."""
    if telemetry is None:
        return None, None
    engine = telemetry.engine
    if not engine.available:
        short = engine.reason is not None and "too few" in engine.reason
        return None, engine.reason if short else None
    counts = {"metrics": engine.samples, "log": engine.log_samples}
    names = {"metrics": "/metrics", "log": "the engine log's stats lines"}
    for source in sorted(set(engine.sources.values()) or {"metrics"}):
        if counts[source] < MIN_ENGINE_SAMPLES:
            return None, too_few_samples(counts[source], names[source])
    return engine, None


def _number(workload: dict[str, object], key: str) -> float:
    value = workload.get(key)
    return float(value) if isinstance(value, int | float) else 0.0


def _batch(
    summary: LevelSummary, load: float, engine: EngineLevel | None, cap: int | None
) -> tuple[float, str]:
    if engine is not None and engine.running_mean is not None:
        return max(engine.running_mean, 1.0), "engine metrics: running requests (mean)"
    ttft, e2e = summary.mean_ttft_ms, summary.mean_e2e_latency_ms
    if ttft is not None and e2e:
        batch = load * max(0.0, 1.0 - ttft / e2e)
        how = "concurrency x (1 - TTFT / E2E)"
    else:
        batch, how = load, "the level's concurrency"
    if cap is not None and batch > cap:
        return float(cap), f"{how}, at most the running cap {cap}"
    return max(batch, 1.0), how


def _model_point(
    model: ModelView, batch: float, input_tokens: float, output_tokens: float
) -> ModelPoint:
    context = input_tokens + output_tokens / 2
    datasheet = (
        model.tpot_ms(batch, input_tokens, output_tokens, datasheet=True)
        if model.datasheet is not None
        else None
    )
    tpot = model.tpot_ms(batch, input_tokens, output_tokens)
    step = model.decode(batch, context)
    floor = model.kernel_floor(batch, context)
    scale = MS_PER_S / model.time_scale
    return ModelPoint(
        tpot_ms=tpot,
        step=step,
        datasheet_tpot_ms=datasheet,
        floor=floor,
        graph_floor_tpot_ms=tpot + (floor.graph_floor_s - step.step_s) * scale,
        eager_floor_tpot_ms=tpot + (floor.eager_floor_s - step.step_s) * scale,
    )
