"""The trial: launch an engine from a spec, sweep it, stop it.

It sits in `bench` so that `servelab bench --engine SPEC`, `servelab run` and a tuning
study's trials share it: the engine's log goes into the
run directory and is read live against the known signatures (engine_events.json) and for
its stats lines, its /metrics is scraped beside the load, and it is stopped whatever
happens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from servelab.bench.events import BenchEvent, Notice
from servelab.bench.load import LoadMode
from servelab.bench.session import BenchConfig, BenchOutcome, run_bench
from servelab.bench.sweep import DEFAULT_MAX_SOURCE
from servelab.bench.workload import DEFAULT_FIXED_OUTPUT_LEN, DEFAULT_OUTPUT_LEN, WorkloadSpec
from servelab.core.errors import ConfigError, EndpointRejected, EngineDied, EngineNotServing
from servelab.core.processes import describe_exit
from servelab.engines.base import EngineSpec
from servelab.engines.enginelog import log_tail
from servelab.engines.launcher import RunningEngine
from servelab.engines.profiler import ProfilerSupport
from servelab.engines.signatures import SIGNATURES, EngineExit, EventSeverity, LogScan, scan_text
from servelab.engines.spec import spec_yaml
from servelab.engines.watched import WatchedEngine, describe_event, launch_watched
from servelab.store import RunDir

__all__ = [
    "PROFILE_DIR",
    "bench_engine",
    "engine_info",
    "engine_profiler",
    "for_engine",
    "not_serving",
    "note_death",
    "save_engine_events",
    "sized_for_load",
]

DEATH_LOG_LINES = 20


def bench_engine(
    spec: EngineSpec,
    config: BenchConfig,
    *,
    metrics: bool = True,
    on_event: Callable[[BenchEvent], None] = lambda _e: None,
) -> BenchOutcome:
    """Launch `spec`, run `config`'s sweep against it, stop it; `config.url` is replaced."""
    name = config.name or spec.served_name or spec.engine
    support = engine_profiler(spec) if config.torch_profile is not None else None
    spec, config = sized_for_load(spec, config)
    run_dir = RunDir.create(name=name, out=config.out, root=config.runs_root)
    watched: WatchedEngine | None = None
    died: EngineExit | None = None
    try:
        if support is not None and config.torch_profile is not None:
            folder = run_dir.path / PROFILE_DIR
            spec = support.enable(spec, folder)
            config = replace(
                config, torch_profile=replace(config.torch_profile, folder=folder, support=support)
            )
        watched = launch_watched(
            spec,
            log_path=run_dir.engine_log_path,
            on_status=lambda message: on_event(Notice(message)),
        )
        bench = for_engine(replace(config, name=name), watched.engine, metrics=metrics)
        if bench.torch_profile is not None:
            bench = replace(
                bench, torch_profile=replace(bench.torch_profile, url=watched.engine.url)
            )
        return run_bench(
            bench,
            on_event=on_event,
            run_dir=run_dir,
            engine_info=engine_info(watched.engine),
            log_stats=watched.log_stats,
            engine_exit=watched.engine.process.poll,
        )
    except EndpointRejected as exc:
        if watched is not None and (named := not_serving(watched, exc)) is not None:
            raise named from exc
        raise
    except EngineDied as exc:
        if watched is not None:
            died = note_death(watched, exc)
        raise
    finally:
        if watched is not None:
            if watched.engine.process.poll() is None:
                on_event(Notice("stopping the engine"))
            watched.stop()
            save_engine_events(run_dir, watched, died)
        run_dir.close()


_FIXED_PROMPT_TOKENS = 64
"""Room for the fixed prompt (a sentence) and the chat template around it."""


def sized_for_load(spec: EngineSpec, config: BenchConfig) -> tuple[EngineSpec, BenchConfig]:
    """`spec` with its cache sized for the load `config` sends, where the adapter sizes one
    (the embedded engine on the CPU), and an adaptive sweep capped where that cache is full."""
    from servelab.engines.registry import get_adapter

    size = getattr(get_adapter(spec.engine), "size_for_load", None)
    lengths = _request_lengths(config.workload)
    if size is None or lengths is None:
        return spec, config
    sizing = size(
        spec,
        concurrency=_peak_concurrency(config),
        input_len=lengths[0],
        output_len=lengths[1],
    )
    if sizing is None:
        return spec, config
    sweep = config.sweep
    if sweep is not None and sweep.adaptive and sizing.max_concurrency != sweep.max_concurrency:
        sweep = replace(sweep, max_concurrency=sizing.max_concurrency, max_source=sizing.source)
    return sizing.spec, replace(config, sweep=sweep)


def _peak_concurrency(config: BenchConfig) -> int | None:
    """The most requests the load holds at once; None: open loop, or the default sweep cap."""
    if config.mode is not LoadMode.CONCURRENCY:
        return None
    if config.capacity is not None:
        return int(config.capacity.max_load)
    sweep = config.sweep
    if sweep is None:
        return max(1, int(max(config.levels)))
    if sweep.fixed:
        return max(sweep.fixed)
    return None if sweep.max_source == DEFAULT_MAX_SOURCE else sweep.max_concurrency


def _request_lengths(workload: WorkloadSpec) -> tuple[int, int] | None:
    """The longest prompt and output of a workload, where it says (not for a file's)."""
    if workload.dataset == "random":
        prompt = workload.input_len + workload.shared_prefix_len
        return prompt, workload.output_len or DEFAULT_OUTPUT_LEN
    if workload.dataset == "fixed":
        return _FIXED_PROMPT_TOKENS, workload.output_len or DEFAULT_FIXED_OUTPUT_LEN
    return None


def not_serving(watched: WatchedEngine, rejected: EndpointRejected) -> EngineNotServing | None:
    """The engine's own reason for refusing the first request, from its answer or its log
    (its worker died sizing the cache, say); None when neither names one."""
    engine = watched.engine.adapter.name
    logged = watched.matcher.events if watched.matcher is not None else []
    errors = [
        event
        for event in [*(scan_text(engine, rejected.body) if engine in SIGNATURES else []), *logged]
        if event.severity is EventSeverity.ERROR
    ]
    if not errors:
        return None
    cause = min(errors, key=lambda event: _GENERIC_KINDS.count(event.kind.value))
    return EngineNotServing(
        f"{engine} started but refused its first request (HTTP {rejected.status}): "
        f"{describe_event(cause)}",
        log_path=str(watched.engine.log_path),
    )


_GENERIC_KINDS = ("engine_error",)
"""Kinds that say only that the engine failed: a specific cause ranks before them."""


PROFILE_DIR = "profile"
"""Where a profiled level's trace files go, inside the run folder."""


def engine_profiler(spec: EngineSpec) -> ProfilerSupport:
    """The engine's torch profiler; a ConfigError for an engine without one."""
    from servelab.engines.registry import get_adapter

    support: ProfilerSupport | None = getattr(get_adapter(spec.engine), "profiler", None)
    if support is None:
        raise ConfigError(
            f"{spec.engine} has no torch profiler servelab can start over HTTP "
            "(transformers serve has no profiler endpoint)",
            hint="--torch-profile works with vllm and sglang",
        )
    return support


def note_death(watched: WatchedEngine, died: EngineDied) -> EngineExit:
    """How the engine died, with its last log lines, for engine_events.json and the report."""
    watched.engine.stop()  # reaps what is left of its group and flushes its log
    return EngineExit(
        code=died.exit_code,
        description=describe_exit(died.exit_code),
        during=died.during,
        log_tail=log_tail(watched.engine.log_path, DEATH_LOG_LINES),
    )


def for_engine(config: BenchConfig, engine: RunningEngine, *, metrics: bool) -> BenchConfig:
    """`config` aimed at an engine servelab launched, with what its adapter knows about it."""
    model = engine.spec.model
    return replace(
        config,
        url=engine.url,
        model=engine.spec.served_name,
        tokenizer=model if model and Path(model).is_dir() else None,
        pinning_fields=engine.adapter.pinning_fields,
        has_tokenize=engine.adapter.has_tokenize,
        engine=engine.adapter.name,
        # An engine known to have no /metrics (transformers serve) is not scraped.
        metrics_url=engine.url if metrics and _has_metrics(engine) else None,
    )


def _has_metrics(engine: RunningEngine) -> bool:
    return getattr(engine.adapter, "metrics_path", "/metrics") is not None


def engine_info(engine: RunningEngine) -> dict[str, Any]:
    """What summary.json records about the engine: its launch, and the CPU share its
    adapter set once it answered, where it set one."""
    return {
        "engine": engine.adapter.name,
        "model": engine.spec.model,
        "url": engine.url,
        "pid": engine.pid,
        "command": engine.command,
        "spec": spec_yaml(engine.spec),
        "log": engine.log_path.name,
        "gpu_memory_released": engine.gpu_memory_released,
    } | ({"cpu_share": engine.settled} if engine.settled else {})


def save_engine_events(
    run_dir: RunDir, watched: WatchedEngine, died: EngineExit | None = None
) -> LogScan | None:
    """engine_events.json: the signatures its log matched so far, and how it died if it
    did during the run; the scan, for the report."""
    scan = watched.scan()
    if died is not None:
        empty = LogScan(engine=watched.engine.adapter.name, lines=0, events=[], counts={})
        scan = (scan or empty).model_copy(update={"exit": died})
    if scan is not None:
        run_dir.write_engine_events(scan)
    return scan
