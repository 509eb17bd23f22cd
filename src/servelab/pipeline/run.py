"""`servelab run`: probe → launch (or attach) → sweep → diagnose → report → stop.

It launches the engine of a spec (vLLM, SGLang, transformers, the simulator, ...), or
attaches to a URL; with neither it starts the embedded engine (a generated model served by
the real `transformers serve` on the CPU), so the whole loop runs on any machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from servelab.bench.attach import attached_log, save_attached_events
from servelab.bench.capacity import DEFAULT_ATTAINMENT, DEFAULT_MAX_STEPS
from servelab.bench.cluster import ClusterSpec
from servelab.bench.cost import resolve_price
from servelab.bench.cost_results import HourlyPrice
from servelab.bench.events import BenchEvent, Notice
from servelab.bench.load import LoadMode
from servelab.bench.profile import ProfilePlan
from servelab.bench.quality.plan import QualityPlan
from servelab.bench.results import BenchSummary
from servelab.bench.session import BenchConfig, run_bench
from servelab.bench.sweep import DEFAULT_MAX_CONCURRENCY, SweepPlan
from servelab.bench.trial import (
    PROFILE_DIR,
    engine_info,
    engine_profiler,
    for_engine,
    not_serving,
    note_death,
    save_engine_events,
    sized_for_load,
)
from servelab.bench.workload import WorkloadSpec
from servelab.core.errors import (
    ConfigError,
    EndpointRejected,
    EngineDied,
    Interrupted,
    ServelabError,
)
from servelab.core.net import ensure_listening
from servelab.diagnose import DiagnoseOptions, Diagnosis, Knee, diagnose_run, find_knee
from servelab.engines.base import EngineSpec
from servelab.engines.embedded.cache import refuse_memory_share
from servelab.engines.follow import AttachedLog
from servelab.engines.signatures import EngineExit
from servelab.engines.spec import computes_on_cpu
from servelab.engines.watched import WatchedEngine, launch_watched
from servelab.pipeline.limits import kv_room
from servelab.pipeline.load import check_load, with_capacity
from servelab.probe.collect import run_probe
from servelab.probe.report import ProbeReport
from servelab.report import ReportFiles, Target, write_report
from servelab.store import RunDir, default_run_name

__all__ = [
    "DEFAULT_RUN_INPUT_LEN",
    "DEFAULT_RUN_OUTPUT_LEN",
    "RunConfig",
    "RunResult",
    "run_pipeline",
]

DEFAULT_RUN_INPUT_LEN = 128
DEFAULT_RUN_OUTPUT_LEN = 64


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """`servelab run`'s settings: `url` to attach, `engine` to launch a spec; neither means
    the embedded engine at `preset`."""

    url: str | None = None
    engine_log: Path | None = None
    """With `url`: the engine's log file, followed while the sweep runs (engines.follow)."""
    engine_log_format: str | None = None
    """Whose log `engine_log` is; None: guessed (engines.follow)."""
    engine: EngineSpec | None = None
    model: str | None = None
    preset: str = "tiny"
    mode: LoadMode = LoadMode.CONCURRENCY
    concurrency: list[int] | None = None
    """Fixed levels; None: the adaptive sweep (bench.sweep) up to `max_concurrency`."""
    request_rate: list[float] | None = None
    """Open loop (`mode`): fixed rates in requests/s; None: the capacity search's."""
    max_concurrency: int | None = None
    """The adaptive sweep's cap; None: the model's KV capacity where known, else 1024."""
    slo_ms: dict[str, float] | None = None
    capacity: bool = False
    """Search the highest load that meets `slo_ms` (bench.capacity) instead of sweeping."""
    attainment: float = DEFAULT_ATTAINMENT
    """The capacity search's share of requests that must meet every SLO."""
    max_request_rate: float | None = None
    """The open-loop capacity search's largest rate; None: bench.capacity's default."""
    max_steps: int = DEFAULT_MAX_STEPS
    """The capacity search's levels at most, re-measures included."""
    dataset: str = "random"
    dataset_path: Path | None = None
    targets: list[Target] = field(default_factory=list)
    """The goal's targets, judged in the report."""
    title: str | None = None
    input_len: int = DEFAULT_RUN_INPUT_LEN
    output_len: int = DEFAULT_RUN_OUTPUT_LEN
    num_requests: int | None = None
    duration_s: float | None = None
    warmup: int = 1
    seed: int = 0
    name: str | None = None
    out: Path | None = None
    runs_root: Path | None = None
    command: list[str] = field(default_factory=list)
    applies: str | None = None
    """RUN_DIR:KIND: the finding whose action this run tries (diagnose.check)."""
    gpus: list[int] = field(default_factory=list)
    """NVML indices of the engine's GPUs to sample while the sweep runs."""
    metrics: bool = True
    """Scrape the engine's /metrics (n/a where it has none)."""
    torch_profile: float | None = None
    """Profile this concurrency's level with the launched engine's torch profiler."""
    cluster: ClusterSpec | None = None
    """Run the client's workers on a Ray cluster's nodes (bench.cluster)."""
    price: HourlyPrice | None = None
    """What the deployment costs an hour; its GPU count from the spec, `gpus` or the probe."""
    quality: QualityPlan | None = None
    """Probe the output's quality beside the sweep (bench.quality); None: not probed."""


@dataclass(frozen=True, slots=True)
class RunResult:
    summary: BenchSummary
    knee: Knee
    run_dir: Path
    report: ReportFiles
    diagnosis: Diagnosis | None
    """None when the run could not be diagnosed (its reason is in the summary's notes)."""


def run_pipeline(
    config: RunConfig,
    *,
    on_event: Callable[[BenchEvent], None] = lambda _e: None,
) -> RunResult:
    """Run the whole job; the engine, when launched here, is stopped whatever happens."""
    if config.url is not None and config.engine is not None:
        raise ConfigError("give a URL to attach to or an engine spec to launch, not both")
    fixed = bool(config.concurrency if config.mode is LoadMode.CONCURRENCY else config.request_rate)
    check_load(mode=config.mode, fixed=fixed, capacity=config.capacity, slo_ms=config.slo_ms)
    spec = config.engine or EngineSpec(engine="embedded", model=config.preset)
    name = config.name or _run_name(config, spec)
    if config.torch_profile is not None and config.url is not None:
        raise ConfigError("--torch-profile needs an engine servelab launches, not --url")
    support = engine_profiler(spec) if config.torch_profile is not None else None
    attached = attached_log(config.engine_log, config.engine_log_format, url=config.url)
    if config.url is not None:
        ensure_listening(config.url)
    elif spec.engine == "embedded" and computes_on_cpu(spec):
        refuse_memory_share(spec)  # before the run folder and the probe, as `bench --engine`
    run_dir = RunDir.create(name=name, out=config.out, root=config.runs_root)
    if support is not None:
        spec = support.enable(spec, run_dir.path / PROFILE_DIR)
    watched: WatchedEngine | None = None
    try:
        on_event(Notice("probing the machine"))
        probe = run_probe(cpu_rates=config.url is None and computes_on_cpu(spec))
        run_dir.write_probe(probe)
        bench = _bench_config(config, name, _sweep_plan(config, spec, probe))
        if config.price is not None:
            launched = spec if config.url is None else None
            price = resolve_price(config.price, spec=launched, gpus=config.gpus, probe=probe)
            bench = replace(bench, price=price)
        if config.url is None:
            spec, bench = sized_for_load(spec, bench)
            watched = launch_watched(
                spec,
                log_path=run_dir.engine_log_path,
                on_status=lambda message: on_event(Notice(message)),
            )
        if config.capacity:
            bench = with_capacity(
                bench,
                attainment=config.attainment,
                max_request_rate=config.max_request_rate,
                max_steps=config.max_steps,
            )
        engine = watched.engine if watched else None
        if engine is not None:
            bench = for_engine(bench, engine, metrics=config.metrics)
        if support is not None and engine is not None and config.torch_profile is not None:
            plan = ProfilePlan(
                level=config.torch_profile,
                folder=run_dir.path / PROFILE_DIR,
                support=support,
                url=engine.url,
            )
            bench = replace(bench, torch_profile=plan)
        if attached is not None:
            attached.start()
        try:
            info = engine_info(engine) if engine else None
            outcome = run_bench(
                bench,
                on_event=on_event,
                run_dir=run_dir,
                engine_info=info,
                log_stats=watched.log_stats if watched else attached,
                engine_exit=watched.engine.process.poll if watched else None,
            )
        except EndpointRejected as rejected:
            if watched is not None and (named := not_serving(watched, rejected)) is not None:
                raise named from rejected
            raise
        except (Interrupted, EngineDied) as stopped:
            died = None
            if watched is not None and isinstance(stopped, EngineDied):
                died = note_death(watched, stopped)
            _stop(watched, on_event)
            _save_attached(attached, run_dir, on_event)
            _write_report(run_dir, run_dir.load_summary(BenchSummary), watched, config, died)
            raise
        _stop(watched, on_event)
        _save_attached(attached, run_dir, on_event)
        on_event(Notice("diagnosing and writing the report"))
        knee, report, diagnosis = _write_report(run_dir, outcome.summary, watched, config)
        assert report is not None
        return RunResult(outcome.summary, knee, run_dir.path, report, diagnosis)
    finally:
        _stop(watched, on_event)
        if attached is not None:
            attached.stop()
        run_dir.close()


def _run_name(config: RunConfig, spec: EngineSpec) -> str:
    if config.url is not None:
        return default_run_name(config.url)
    if config.engine is None:
        return f"embedded-{config.preset}"
    return spec.served_name or spec.engine


def _stop(watched: WatchedEngine | None, on_event: Callable[[BenchEvent], None]) -> None:
    """Stop a launched engine and whatever its group left; a second call finds nothing."""
    if watched is None:
        return
    if watched.engine.process.poll() is None:
        on_event(Notice("stopping the engine"))
    watched.stop()


def _save_attached(
    attached: AttachedLog | None, run_dir: RunDir, on_event: Callable[[BenchEvent], None]
) -> None:
    """Stop following an attached engine's log and write its engine_events.json."""
    if attached is not None:
        attached.stop()
        save_attached_events(run_dir, attached, on_event=on_event)


def _sweep_plan(config: RunConfig, spec: EngineSpec, probe: ProbeReport) -> SweepPlan | None:
    """Fixed levels as given, else adaptive up to the user's cap or the model's KV room (the
    capacity search's ceiling too); None in open loop."""
    if config.mode is not LoadMode.CONCURRENCY:
        return None
    if config.concurrency:
        return SweepPlan(fixed=tuple(config.concurrency))
    if config.max_concurrency is not None:
        return SweepPlan(max_concurrency=config.max_concurrency, max_source="--max-concurrency")
    room = None
    if config.url is None:
        room = kv_room(spec, probe, input_len=config.input_len, output_len=config.output_len)
    if room is None or room[0] >= DEFAULT_MAX_CONCURRENCY:
        return SweepPlan()
    return SweepPlan(max_concurrency=room[0], max_source=room[1])


def _bench_config(config: RunConfig, name: str, plan: SweepPlan | None) -> BenchConfig:
    """The sweep's settings; aimed at `config.url`, or (by `for_engine`) at the launched engine."""
    workload = WorkloadSpec(
        dataset=config.dataset,
        path=config.dataset_path,
        input_len=config.input_len,
        output_len=config.output_len,
        seed=config.seed,
    )
    url = config.url or ""
    return BenchConfig(
        url=url,
        model=config.model,
        metrics_url=url if config.metrics and url else None,
        mode=config.mode,
        levels=list(config.request_rate or [1.0]),
        sweep=plan,
        slo_ms=config.slo_ms,
        num_requests=config.num_requests,
        duration_s=config.duration_s,
        warmup=config.warmup,
        workload=workload,
        name=name,
        command=config.command,
        applies=config.applies,
        gpus=config.gpus,
        cluster=config.cluster,
        quality=config.quality,
    )


def _write_report(
    run_dir: RunDir,
    summary: BenchSummary | None,
    watched: WatchedEngine | None,
    config: RunConfig,
    died: EngineExit | None = None,
) -> tuple[Knee, ReportFiles | None, Diagnosis | None]:
    """Diagnose the run and write its report; a run with no summary gets neither."""
    knee = find_knee(summary.levels if summary else [])
    if watched:
        save_engine_events(run_dir, watched, died)
    if summary is None:
        return knee, None, None
    engine = watched.engine if watched else None
    if engine is not None and summary.engine is not None:
        released = {
            "gpu_memory_released": engine.gpu_memory_released,
            "gpu_memory_detail": engine.gpu_memory_detail,
        }
        run_dir.write_summary(summary.model_copy(update={"engine": summary.engine | released}))
    diagnosis = _diagnose(run_dir)
    files = write_report([run_dir.path], targets=config.targets, title=config.title)
    return knee, files, diagnosis


def _diagnose(run_dir: RunDir) -> Diagnosis | None:
    """diagnosis.json for the run; a run that cannot be diagnosed still gets its report."""
    try:
        return diagnose_run(run_dir.path, DiagnoseOptions(), write=True)
    except ServelabError:
        return None
