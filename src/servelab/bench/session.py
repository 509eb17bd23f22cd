"""A whole benchmark: preflight, workloads, one level after the other, results on disk.

`run_bench` writes as it goes: requests.jsonl grows with every batch of finished
requests, summary.json is replaced after every level, and the catalogue row is
updated at the start and the end. Ctrl-C keeps all of it and raises `Interrupted`.

With `quality` (bench.quality), the probe's passes run around the sweep: one before it,
one beside its heaviest level, one after it (quality.session says where and how).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from servelab import __version__
from servelab.bench.capacity import CapacityPlan, CapacitySearch
from servelab.bench.cluster import ClusterSpec, open_cluster
from servelab.bench.conversation import Conversation
from servelab.bench.cost import level_cost
from servelab.bench.cost_results import Price
from servelab.bench.endpoint import (
    DEFAULT_STALL_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    Api,
    EndpointConfig,
)
from servelab.bench.events import BenchEvent, LevelFinished, LevelStarted, Notice
from servelab.bench.load import LevelSpec, LoadMode
from servelab.bench.metrics import compute_level
from servelab.bench.noise import MIN_BLOCKS
from servelab.bench.prefix import block_tokens_from, prefix_cache_level
from servelab.bench.preflight import Preflight, run_preflight
from servelab.bench.profile import ProfilePlan, ProfileWindow
from servelab.bench.profile_summary import PROFILE_FILE, TRACE_SUMMARY_FILE, summarize_profile
from servelab.bench.quality.client import QualityTarget
from servelab.bench.quality.plan import QualityPlan, load_reference
from servelab.bench.quality.results import LoadedBeside, QualityResult
from servelab.bench.quality.session import QualitySession, quality_engine
from servelab.bench.records import ErrorKind, RequestRecord
from servelab.bench.results import BenchSummary, LevelSummary, RunInfo, RunStatus
from servelab.bench.runner import run_level
from servelab.bench.sweep import SweepPlan, SweepStop, next_level
from servelab.bench.tokens import ServerTokenizer, TokenCounter
from servelab.bench.turns import turn_stats
from servelab.bench.workload import SentPrompts, WorkloadSpec, build_requests, build_sessions
from servelab.core.errors import EngineDied, Interrupted
from servelab.core.processes import describe_exit
from servelab.core.provenance import git_sha, host_facts, versions
from servelab.core.redact import is_secret_name, redact_argv, register_secret
from servelab.engines.base import PINNING_FIELDS
from servelab.store import CatalogRow, RunDir, default_run_name, record_run
from servelab.telemetry import TelemetrySession, summarize_level
from servelab.telemetry.gpu import GpuTrace
from servelab.telemetry.process_cpu import EngineCpuMeter
from servelab.telemetry.scrape import EngineTrace

if TYPE_CHECKING:
    from servelab.bench.cluster.fleet import ClientFleet

__all__ = [
    "DEFAULT_WARMUP",
    "BenchConfig",
    "BenchOutcome",
    "LogSamples",
    "default_num_requests",
    "run_bench",
]

DEFAULT_WARMUP = 1
_MIN_REQUESTS = 16
_REQUESTS_PER_STREAM = MIN_BLOCKS
"""A closed-loop level of N streams sends MIN_BLOCKS x N requests by default: the fewest
whose noise band (blocks of N requests, bench.noise) can be drawn."""
_OPEN_LOOP_SECONDS = 30
_MIN_POOL = 256
_MAX_POOL = 8192
_REPLAY_MAX_S = 600.0
"""The longest a level's load is replayed beside the loaded pass (it ends with the pass)."""


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    """Everything `servelab bench` needs; defaults are the CLI's."""

    url: str
    api: Api = Api.CHAT
    model: str | None = None
    stream: bool = True
    headers: dict[str, str] = field(default_factory=dict)
    mode: LoadMode = LoadMode.CONCURRENCY
    levels: list[float] = field(default_factory=lambda: [1.0])
    num_requests: int | None = None
    duration_s: float | None = None
    warmup: int = DEFAULT_WARMUP
    burstiness: float = 1.0
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    tokenizer: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S
    slo_ms: dict[str, float] | None = None
    workers: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    pinning_fields: frozenset[str] | None = None
    """Fields the engine is known to accept; None probes the endpoint."""
    has_tokenize: bool | None = None
    engine: str = "openai"
    name: str | None = None
    out: Path | None = None
    runs_root: Path | None = None
    command: list[str] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    """NVML indices of the engine's GPUs, sampled while the levels run."""
    metrics_url: str | None = None
    """Where the engine's Prometheus /metrics is scraped (at its root); None: not scraped."""
    sweep: SweepPlan | None = None
    """Closed loop: choose the levels as they finish (bench.sweep), in place of `levels`."""
    torch_profile: ProfilePlan | None = None
    """Profile this level with the engine's torch profiler (bench.profile)."""
    applies: str | None = None
    """RUN_DIR:KIND: the finding whose action this run tries (diagnose.check)."""
    capacity: CapacityPlan | None = None
    """Search the highest load that meets its SLO (bench.capacity), in place of `levels`."""
    stop_early: Callable[[Sequence[LevelSummary]], SweepStop | None] | None = None
    """Asked after every level: a SweepStop ends the sweep there (a tuning trial that is
    already far behind the best one)."""
    cluster: ClusterSpec | None = None
    """Run the client's workers on a Ray cluster's nodes (bench.cluster), not this machine."""
    price: Price | None = None
    """What the deployment costs an hour: each level's tokens are priced at it (bench.cost)."""
    quality: QualityPlan | None = None
    """Probe the output's quality beside the sweep (bench.quality): None, not probed."""


class LogSamples(Protocol):
    """The stats lines of the engine's log as samples: a launched engine's `LogStats`, or
    the `engines.follow.AttachedLog` of one given by URL."""

    def trace(self) -> EngineTrace: ...


@dataclass(frozen=True, slots=True)
class BenchOutcome:
    summary: BenchSummary
    run_dir: Path


def default_num_requests(level: LevelSpec) -> int:
    """Five requests per stream (closed loop: the noise band's five blocks) or 30 s of
    arrivals (open loop), at least 16."""
    if level.mode is LoadMode.CONCURRENCY:
        return max(_MIN_REQUESTS, _REQUESTS_PER_STREAM * int(level.value))
    return max(_MIN_REQUESTS, math.ceil(_OPEN_LOOP_SECONDS * level.value))


def run_bench(
    config: BenchConfig,
    *,
    on_event: Callable[[BenchEvent], None] = lambda _event: None,
    run_dir: RunDir | None = None,
    engine_info: dict[str, Any] | None = None,
    log_stats: LogSamples | None = None,
    engine_exit: Callable[[], int | None] | None = None,
) -> BenchOutcome:
    """Run every level of `config`; results go to `run_dir` (created when not given).

    The folder is created after the preflight, so an unreachable endpoint leaves none.
    Client workers are started with multiprocessing's "spawn", so a script that calls
    this must guard its entry point with `if __name__ == "__main__":`. `log_stats`, the
    stats lines of the engine's log (launched, or followed), fill the level's engine
    fields /metrics lacks.
    """
    return _Session(config, on_event, engine_info, log_stats, engine_exit).run(run_dir)


class _Session:
    def __init__(
        self,
        config: BenchConfig,
        on_event: Callable[[BenchEvent], None],
        engine_info: dict[str, Any] | None,
        log_stats: LogSamples | None,
        engine_exit: Callable[[], int | None] | None = None,
    ) -> None:
        self.config = config
        self.on_event = on_event
        self.engine_info = engine_info
        self.log_stats = log_stats
        self.engine_exit = engine_exit
        """The launched engine's exit code once it has exited, else None (None: not ours)."""
        self.levels: list[LevelSummary] = []
        self.stop: SweepStop | None = None
        self.capacity = CapacitySearch(config.capacity) if config.capacity is not None else None
        self.telemetry: TelemetrySession | None = None
        self.sent = SentPrompts()
        self.fleet: ClientFleet | None = None
        self.quality: QualitySession | None = None

    def run(self, run_dir: RunDir | None) -> BenchOutcome:
        config = self.config
        _register_header_secrets(config.headers)
        reference = load_reference(config.quality) if config.quality is not None else None
        preflight = run_preflight(
            self._endpoint(),
            try_fields=PINNING_FIELDS if config.pinning_fields is None else config.pinning_fields,
            probe_tokenize=config.tokenizer is None and config.has_tokenize is not False,
            calibrate=config.tokenizer is None,
        )
        for note in preflight.notes:
            self.on_event(Notice(note))
        with self._cluster(preflight) as self.fleet:
            counter = self._counter(preflight)
            self.info = self._run_info(preflight, counter)
            self.run_dir = run_dir or RunDir.create(
                name=self.info.name, out=config.out, root=config.runs_root
            )
            self.on_event(Notice(f"results go to {self.run_dir.path}"))
            try:
                self.quality = self._quality_session(preflight, reference)
                if not (config.gpus or config.metrics_url):
                    return self._run_levels(preflight, counter)
                with TelemetrySession(
                    self.run_dir.path, gpus=config.gpus, metrics_url=config.metrics_url
                ) as self.telemetry:
                    return self._run_levels(preflight, counter)
            finally:
                if self.quality is not None:
                    self.quality.close()
                self.run_dir.close()

    def _quality_session(
        self, preflight: Preflight, reference: QualityResult | None
    ) -> QualitySession | None:
        """The quality probe's client, aimed where the load goes, in the engine's dialect."""
        plan = self.config.quality
        if plan is None:
            return None
        e = preflight.endpoint
        target = QualityTarget(
            base_url=e.base_url,
            model=e.model,
            engine=quality_engine(self.config.engine),
            api=e.api,
            headers=e.headers,
        )
        return QualitySession(
            plan,
            target=target,
            run_dir=self.run_dir,
            reference=reference,
            on_note=lambda message: self.on_event(Notice(message)),
            max_context=_max_context(preflight, e.model),
        )

    def _cluster(self, preflight: Preflight) -> AbstractContextManager[ClientFleet | None]:
        """The cluster's workers for the whole run (Ray loads only here), else nothing."""
        if self.config.cluster is None:
            return nullcontext()
        return open_cluster(self.config.cluster, preflight.endpoint)

    def _run_levels(self, preflight: Preflight, counter: TokenCounter | None) -> BenchOutcome:
        self._save("running")
        try:
            if self.quality is not None:
                self.quality.before()
            while (spec := self._next_spec()) is not None:
                level = self._run_level(spec, preflight, counter)
                self.levels.append(level)
                if not level.interrupted:
                    self._save("running")  # a crash between levels keeps the finished ones
                self.on_event(LevelFinished(level))
                if level.interrupted:
                    self._save("interrupted")
                    raise Interrupted("interrupted", run_dir=str(self.run_dir.path))
                if (code := self._engine_exit_code()) is not None:
                    raise self._engine_died(spec, code)
                if self.fleet is not None and (stop := self.fleet.sweep_stop(level)):
                    self.stop = stop
                    break
            if self.quality is not None:
                self._quality_after(preflight, counter)
        except KeyboardInterrupt:
            self._save("interrupted")
            raise Interrupted("interrupted", run_dir=str(self.run_dir.path)) from None
        except (Interrupted, EngineDied):
            raise
        except BaseException:
            self._save("failed")
            raise
        if self.stop is not None and self.stop.reason != "levels":
            self.on_event(Notice(f"sweep ends: {self.stop.explanation}"))
        return BenchOutcome(self._save("complete"), self.run_dir.path)

    def _endpoint(self) -> EndpointConfig:
        c = self.config
        return EndpointConfig(
            base_url=c.url,
            model=c.model or "",
            api=c.api,
            stream=c.stream,
            headers=c.headers,
            extra_body=c.extra_body,
            timeout_s=c.timeout_s,
            stall_timeout_s=c.stall_timeout_s,
            tokenizer_path=c.tokenizer,
        )

    def _counter(self, preflight: Preflight) -> TokenCounter | None:
        if self.config.tokenizer is not None:
            from servelab.bench.tokens import load_local_tokenizer

            return load_local_tokenizer(self.config.tokenizer)
        if preflight.has_tokenize:
            e = preflight.endpoint
            return ServerTokenizer(e.base_url, model=e.model, headers=e.headers)
        return None

    def _next_spec(self) -> LevelSpec | None:
        """The next level: the plan's choice after what ran, else the next of `levels`."""
        c = self.config
        index = len(self.levels)
        if c.stop_early is not None and self.levels:
            stop = c.stop_early(self.levels)
            if stop is not None:
                self.stop = stop
                return None
        if self.capacity is not None:
            choice = self._capacity_next()
        elif c.sweep is not None:
            choice = next_level(c.sweep, self.levels)
        elif index < len(c.levels):
            choice = c.levels[index]
        else:
            return None
        if isinstance(choice, SweepStop):
            self.stop = choice
            return None
        value = float(choice)
        return LevelSpec(
            index=index,
            mode=c.mode,
            value=value,
            num_requests=None if c.duration_s is not None else c.num_requests,
            duration_s=c.duration_s,
            warmup=c.warmup,
            burstiness=c.burstiness,
            arrivals_ns=c.workload.replay.arrivals_ns if c.workload.replay else None,
        )

    def _capacity_next(self) -> float | SweepStop:
        """The capacity search's next load, announced with why it was chosen."""
        assert self.capacity is not None
        choice = self.capacity.next_load()
        if isinstance(choice, SweepStop):
            return choice
        load, why = choice
        self.on_event(Notice(why))
        return load

    def _pool_size(self, spec: LevelSpec) -> int:
        if spec.arrivals_ns is not None:
            return len(spec.arrivals_ns)
        if spec.duration_s is None:
            return spec.num_requests or default_num_requests(spec)
        if spec.mode is LoadMode.CONCURRENCY:
            return min(max(_MIN_POOL, _REQUESTS_PER_STREAM * int(spec.value)), _MAX_POOL)
        return min(max(_MIN_REQUESTS, math.ceil(spec.value * spec.duration_s) + 1), _MAX_POOL)

    def _run_level(
        self, spec: LevelSpec, preflight: Preflight, counter: TokenCounter | None
    ) -> LevelSummary:
        c = self.config
        items = build_requests(
            c.workload,
            self._pool_size(spec),
            counter=counter,
            calibration=preflight.calibration,
            salt=spec.index,
        )
        warmup_items = (
            build_requests(
                c.workload,
                spec.warmup,
                counter=counter,
                calibration=preflight.calibration,
                salt=10_000 + spec.index,
            )
            if spec.warmup
            else []
        )
        warmup_items = self.sent.mark(warmup_items)  # sent before the measured ones
        items = self.sent.mark(items)
        sessions = self._sessions(spec, preflight, counter)

        def save_records(batch: list[RequestRecord]) -> None:
            if self._engine_exit_code() is not None:
                _blame_the_engine(batch)
            self.run_dir.append_requests(r.to_json() for r in batch)

        window = self._profile_window(spec)
        on_event = self.on_event
        if window is not None:
            on_event = _starting(window, self.on_event)
        loaded = self.quality is not None and spec.index == self._heaviest_index()
        if loaded:
            on_event = self._with_loaded_pass(spec, on_event, "level")
        meter = self._engine_cpu_meter()
        if meter is not None:
            meter.start()
        outcome = run_level(
            spec,
            endpoint=preflight.endpoint,
            items=items,
            warmup_items=warmup_items,
            workers=c.workers,
            seed=c.workload.seed,
            on_records=save_records,
            on_event=on_event,
            stop_when=self._engine_gone if self.engine_exit else None,
            sessions=sessions,
            cluster=self.fleet,
        )
        if self._engine_exit_code() is not None:
            _blame_the_engine(outcome.records)
        notes = _level_notes(outcome.records)
        probed = None
        if loaded and self.quality is not None and self.quality.loaded_started:
            probed = len(self.quality.probes)
            notes.append(
                f"the quality probe's loaded pass ({probed} probes) ran beside this level, "
                "its requests in none of the level's metrics"
            )
            if not outcome.interrupted:
                self.quality.finish_loaded()
        summary = compute_level(
            outcome.records,
            level=spec,
            workers=outcome.workers,
            slo_ms=c.slo_ms,
            interrupted=outcome.interrupted,
            notes=notes,
        ).model_copy(update={"quality_probes": probed})
        if self.capacity is not None and not outcome.interrupted:
            judged = self.capacity.measured(summary, outcome.records)
            self.on_event(Notice(self.capacity.level_text(judged)))
        if window is not None:
            summary = self._profiled(summary, window)
        if meter is not None:
            summary = summary.model_copy(update={"engine_cpu": meter.stop()})
        summary = self._with_telemetry(summary, outcome.records)
        summary = summary.model_copy(update={"turns": turn_stats(outcome.records)})
        pool = None if sessions is not None else len(items)
        summary = self._with_prefix_cache(summary, outcome.records, preflight, pool=pool)
        return summary.model_copy(update={"cost": level_cost(summary, c.price)})

    def _heaviest_index(self) -> int | None:
        """The level the loaded pass runs beside: a fixed list's largest (its first); None
        for an adaptive sweep or a capacity search, whose last level is known only after it."""
        c = self.config
        if c.capacity is not None:
            return None
        fixed = list(c.sweep.fixed) if c.sweep is not None else c.levels
        if not fixed:
            return None
        return max(range(len(fixed)), key=fixed.__getitem__)

    def _with_loaded_pass(
        self, spec: LevelSpec, on_event: Callable[[BenchEvent], None], beside: LoadedBeside
    ) -> Callable[[BenchEvent], None]:
        """`on_event` that also starts the loaded pass when the level's measured load starts."""
        quality = self.quality
        assert quality is not None

        def forward(event: BenchEvent) -> None:
            if isinstance(event, LevelStarted) and not event.warmup:
                quality.start_loaded(spec.index, beside)
            on_event(event)

        return forward

    def _quality_after(self, preflight: Preflight, counter: TokenCounter | None) -> None:
        """The loaded pass where no level carried it, then the after pass."""
        assert self.quality is not None
        if self.quality.can_load and self.levels:
            self._replay_beside_loaded_pass(preflight, counter)
        self.quality.after()
        self._save("running")

    def _replay_beside_loaded_pass(
        self, preflight: Preflight, counter: TokenCounter | None
    ) -> None:
        """An adaptive sweep's or capacity search's last level is known once it has run, so
        the loaded pass runs after the sweep, beside that level's load sent again for as
        long as the pass takes: measured nowhere, so no level is disturbed. A fixed sweep
        stopped before its heaviest level gets the same, at its heaviest level run."""
        assert self.quality is not None
        c = self.config
        last = (
            self.levels[-1]
            if self.capacity is not None
            else max(reversed(self.levels), key=_load_of)
        )
        spec = LevelSpec(
            index=last.level,
            mode=c.mode,
            value=_load_of(last),
            num_requests=None,
            duration_s=_REPLAY_MAX_S,
            warmup=0,
            burstiness=c.burstiness,
        )
        items = build_requests(
            c.workload,
            self._pool_size(spec),
            counter=counter,
            calibration=preflight.calibration,
            salt=20_000 + spec.index,
        )
        quality = self.quality
        self.on_event(
            Notice(
                f"quality: level {spec.index}'s load sent again, unmeasured, for the loaded pass"
            )
        )

        def done() -> str | None:
            return "the loaded pass is done" if quality.loaded_done() else self._engine_gone()

        outcome = run_level(
            spec,
            endpoint=preflight.endpoint,
            items=items,
            warmup_items=[],
            workers=c.workers,
            seed=c.workload.seed,
            on_records=lambda _batch: None,
            on_event=self._with_loaded_pass(spec, lambda _event: None, "replay"),
            stop_when=done,
            sessions=self._sessions(spec, preflight, counter),
            cluster=self.fleet,
        )
        if outcome.interrupted:
            raise KeyboardInterrupt
        quality.finish_loaded()

    def _sessions(
        self, spec: LevelSpec, preflight: Preflight, counter: TokenCounter | None
    ) -> list[Conversation] | None:
        """A conversation workload's sessions for the level: as many as hold the level's
        pool of requests at the mean turns per session; None for other workloads."""
        conversation = self.config.workload.conversation
        if conversation is None:
            return None
        turns = (conversation.turns.low + conversation.turns.high) / 2
        return build_sessions(
            self.config.workload,
            max(1, math.ceil(self._pool_size(spec) / turns)),
            counter=counter,
            calibration=preflight.calibration,
            salt=spec.index,
        )

    def _engine_cpu_meter(self) -> EngineCpuMeter | None:
        """A launched engine leads its own POSIX session: its pid is the session's id."""
        pid = (self.engine_info or {}).get("pid")
        return EngineCpuMeter(pid) if isinstance(pid, int) and pid > 0 else None

    def _profile_window(self, spec: LevelSpec) -> ProfileWindow | None:
        plan = self.config.torch_profile
        if plan is None or not math.isclose(spec.value, plan.level):
            return None
        return ProfileWindow(plan, lambda message: self.on_event(Notice(message)))

    def _profiled(self, summary: LevelSummary, window: ProfileWindow) -> LevelSummary:
        """profile.json and trace_summary.json beside the level; a note either way."""
        outcome = window.finish(self.run_dir.path)
        self.run_dir.write_json(PROFILE_FILE, outcome.model_dump(mode="json"))
        note = f"torch profile: {outcome.status} ({outcome.detail})"
        if outcome.status == "complete":
            self.on_event(Notice("torch profile: summarising the traces"))
            summaries = summarize_profile(self.run_dir.path, outcome)
            self.run_dir.write_json(TRACE_SUMMARY_FILE, summaries)
        return summary.model_copy(update={"notes": [*summary.notes, note]})

    def _with_telemetry(self, summary: LevelSummary, records: list[RequestRecord]) -> LevelSummary:
        """The level's telemetry over its measured span: first send to last completion."""
        measured = [r for r in records if not r.warmup]
        if (self.telemetry is None and self.log_stats is None) or not measured:
            return summary
        t_start = min(r.t_send_ns for r in measured)
        t_end = max(r.t_end_ns for r in measured)
        window = summarize_level(
            self.telemetry.gpu_trace() if self.telemetry else GpuTrace(),
            self.telemetry.engine_trace() if self.telemetry else EngineTrace(),
            t_start,
            t_end,
            summary.total_output_tokens,
            log=self.log_stats.trace() if self.log_stats else None,
        )
        return summary.model_copy(update={"telemetry": window})

    def _with_prefix_cache(
        self,
        summary: LevelSummary,
        records: list[RequestRecord],
        preflight: Preflight,
        *,
        pool: int | None,
    ) -> LevelSummary:
        """The level's ideal prefix-cache hit rate, beside the engine's where it counts; the
        block size as vLLM's /metrics or SGLang's server info (`page_size`) report it."""
        engine = summary.telemetry.engine if summary.telemetry is not None else None
        info = self.engine_info or {}
        name = info.get("engine") or (engine.engine if engine is not None else None)
        page = preflight.server_info.server_args.get("page_size") if preflight.server_info else None
        reported = engine.block_tokens if engine is not None else None
        block, source = block_tokens_from(
            name, info.get("command"), reported or (page if isinstance(page, int) else None)
        )
        level = prefix_cache_level(records, engine, block, source, pool=pool)
        return summary.model_copy(update={"prefix_cache": level})

    def _run_info(self, preflight: Preflight, counter: TokenCounter | None) -> RunInfo:
        c = self.config
        e = preflight.endpoint
        method = counter.method if counter else ("calibrated" if preflight.calibration else "none")
        workload: dict[str, Any] = {**c.workload.describe(), "input_len_method": method}
        if preflight.calibration is not None:
            workload["tokens_per_word"] = round(preflight.calibration.tokens_per_word, 4)
        return RunInfo(
            name=c.name or default_run_name(c.url),
            command=redact_argv(c.command),
            started_utc=datetime.now(UTC).isoformat(timespec="seconds"),
            servelab_version=__version__,
            versions=versions(),
            git_sha=git_sha(),
            host=host_facts(),
            target={
                "url": e.base_url,
                "api": e.api.value,
                "model": e.model,
                "engine": c.engine,
                "stream": e.stream,
                "pinning_fields": sorted(e.pinning_fields),
                "tokenizer": c.tokenizer,
            },
            workload=workload,
            load={
                "mode": c.mode.value,
                "levels": list(c.levels) if c.sweep is None and c.capacity is None else None,
                "sweep": c.sweep.describe() if c.sweep is not None else None,
                "capacity": c.capacity.describe() if c.capacity is not None else None,
                "num_requests": c.num_requests,
                "duration_s": c.duration_s,
                "warmup": c.warmup,
                "burstiness": c.burstiness if _drawn_arrivals(c) else None,
                "timeout_s": c.timeout_s,
                "stall_timeout_s": c.stall_timeout_s,
                "workers": c.workers,
                "cluster": c.cluster.address if c.cluster is not None else None,
            },
            notes=list(preflight.notes),
            applies=c.applies,
            server_info=preflight.server_info,
        )

    def _engine_exit_code(self) -> int | None:
        return self.engine_exit() if self.engine_exit is not None else None

    def _engine_gone(self) -> str | None:
        code = self._engine_exit_code()
        return None if code is None else f"the engine exited with {describe_exit(code)}"

    def _engine_died(self, spec: LevelSpec, code: int) -> EngineDied:
        """Save the finished levels as a failed run, and the error that says why."""
        during = f"level {spec.index}"
        message = f"the engine died during {during} ({describe_exit(code)})"
        self._save("failed", failure=message)
        return EngineDied(message, exit_code=code, during=during, run_dir=str(self.run_dir.path))

    def _save(self, status: RunStatus, *, failure: str | None = None) -> BenchSummary:
        summary = BenchSummary(
            status=status,
            run=self.info,
            levels=self.levels,
            engine=self.engine_info,
            failure=failure,
            sweep_stop=self.stop,
            capacity=self.capacity.result() if self.capacity is not None else None,
            price=self.config.price,
            quality=self.quality.block() if self.quality is not None else None,
        )
        self.run_dir.write_summary(summary)
        best = max(self.levels, key=lambda s: s.output_throughput, default=None)
        record_run(
            self.run_dir.runs_root,
            CatalogRow(
                path=str(self.run_dir.path.resolve()),
                name=self.info.name,
                kind="bench",
                started_utc=self.info.started_utc,
                target=str(self.info.target["url"]),
                status=status,
                levels=len(self.levels),
                best_output_throughput=best.output_throughput if best else None,
                best_total_throughput=best.total_throughput if best else None,
            ),
        )
        return summary


_DEATH_SYMPTOMS = frozenset(
    {
        ErrorKind.UNREACHABLE,
        ErrorKind.DROPPED,
        ErrorKind.STALL,
        ErrorKind.TIMEOUT,
        ErrorKind.INCOMPLETE,
        ErrorKind.MALFORMED,
        ErrorKind.CANCELLED,
    }
)
"""What a request sees when its server process vanishes: refused, cut, or left hanging."""


def _max_context(preflight: Preflight, model: str | None) -> int | None:
    """The served model's max_model_len from its card, where the engine publishes one."""
    info = preflight.server_info
    if info is None:
        return None
    lengths = [n for n in info.max_model_len.values() if n]
    served = info.max_model_len.get(model) if model else None
    return served or (min(lengths) if lengths else None)


def _starting(
    window: ProfileWindow, on_event: Callable[[BenchEvent], None]
) -> Callable[[BenchEvent], None]:
    """`on_event` that also starts the profile when the measured requests begin."""

    def forward(event: BenchEvent) -> None:
        if isinstance(event, LevelStarted) and not event.warmup:
            window.begin()
        on_event(event)

    return forward


def _blame_the_engine(records: list[RequestRecord]) -> None:
    """Once the engine has exited, refused, cut and stopped requests are its death."""
    for record in records:
        if not record.ok and record.error_kind in _DEATH_SYMPTOMS:
            record.error_kind = ErrorKind.ENGINE_DIED


def _register_header_secrets(headers: dict[str, str]) -> None:
    """An API key sent in a header is scrubbed from every file the run writes."""
    for name, value in headers.items():
        if is_secret_name(name):
            register_secret(value)
            scheme, _, credential = value.partition(" ")
            if credential and scheme.lower() in ("bearer", "basic", "token"):
                register_secret(credential.strip())


def _drawn_arrivals(config: BenchConfig) -> bool:
    """Open loop with gamma-distributed arrivals, not a trace's own."""
    return config.mode is LoadMode.REQUEST_RATE and config.workload.replay is None


def _load_of(level: LevelSummary) -> float:
    """A level's concurrency (closed loop) or request rate (open loop)."""
    if level.max_concurrency is not None:
        return float(level.max_concurrency)
    return level.request_rate or 0.0


def _level_notes(records: list[RequestRecord]) -> list[str]:
    measured = [r for r in records if r.ok and not r.warmup]
    short = sum(1 for r in measured if r.output_tokens < r.max_tokens)
    notes = []
    if short:
        notes.append(
            f"{short} of {len(measured)} requests produced fewer tokens than max_tokens "
            "(the engine stopped at end-of-sequence)"
        )
    return notes
