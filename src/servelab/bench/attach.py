"""A sweep of an engine servelab did not launch, with its log followed (--url, --engine-log).

The followed log (`engines.follow.AttachedLog`) gives the run what a launched engine's log
gives it: engine_events.json (written when the sweep ends, or is interrupted) and the stats
samples that fill the levels' engine fields /metrics lacks. Where no line of the log told
which engine wrote it, what the endpoint said of itself at the preflight decides: SGLang's
/server_info answered, or the metric names its /metrics used.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from servelab.bench.events import BenchEvent, Notice
from servelab.bench.results import BenchSummary
from servelab.bench.session import BenchConfig, BenchOutcome, run_bench
from servelab.core.errors import ConfigError, Interrupted
from servelab.engines.follow import AttachedLog
from servelab.engines.signatures import LogScan
from servelab.store import RunDir

__all__ = ["attached_log", "bench_attached", "save_attached_events"]


def attached_log(path: Path | None, engine: str | None, *, url: str | None) -> AttachedLog | None:
    """The log at `path` opened at its end, checked before any load is sent; None without
    one. A ConfigError for a log of no endpoint, or one that cannot be followed."""
    if path is None:
        if engine is not None:
            raise ConfigError("--engine-log-format names the engine of --engine-log: give both")
        return None
    if url is None:
        raise ConfigError(
            "--engine-log follows the log of an engine given by --url",
            hint="the log of an engine servelab launches is read already",
        )
    return AttachedLog(path, engine=engine)


def bench_attached(
    config: BenchConfig,
    log: AttachedLog,
    *,
    on_event: Callable[[BenchEvent], None] = lambda _e: None,
) -> BenchOutcome:
    """`run_bench` of `config` while `log` is followed; its events saved with the run."""
    log.start()
    on_event(Notice(f"following {log.path} from line {log.lines_before + 1}"))
    run_dir: Path | None = None
    try:
        outcome = run_bench(config, on_event=on_event, log_stats=log)
        run_dir = outcome.run_dir
        return outcome
    except Interrupted as exc:
        run_dir = Path(exc.run_dir) if exc.run_dir else None
        raise
    finally:
        log.stop()
        if run_dir is not None:
            save_attached_events(RunDir(run_dir), log, on_event=on_event)


def save_attached_events(
    run_dir: RunDir,
    log: AttachedLog,
    *,
    on_event: Callable[[BenchEvent], None] = lambda _e: None,
) -> LogScan | None:
    """engine_events.json of the followed log, its engine settled by the run's summary where
    its lines did not name it; a notice says what was read. Call after `log.stop()`."""
    summary = run_dir.load_summary(BenchSummary)
    if summary is not None:
        log.settle(*_named_by_endpoint(summary))
    scan = log.scan()
    if scan is not None:
        run_dir.write_engine_events(scan)
    on_event(Notice(log.describe()))
    return scan


def _named_by_endpoint(summary: BenchSummary) -> tuple[str | None, str]:
    """The engine the endpoint showed itself to be at the preflight and in the sweep."""
    info = summary.run.server_info
    if info is not None and info.server_args:
        return "sglang", "its /server_info"
    for level in summary.levels:
        if level.telemetry is not None and level.telemetry.engine.engine is not None:
            return level.telemetry.engine.engine, "its /metrics names"
    return None, ""
