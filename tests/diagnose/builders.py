"""Hand-built run directories for the rules' unit tests.

A level is built from the few numbers a case is about (concurrency, throughput, TTFT,
TPOT, ...); every other field of the current `LevelSummary` gets a neutral value read from
the model's own field types, so the builders follow the schema as it grows. The rules are
judged on these the same way as on a measured run: `diagnose_run` reads the folder.
"""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from servelab.bench.results import BenchSummary, ClientStats, LevelSummary, RunInfo
from servelab.diagnose import DiagnoseOptions, Diagnosis, diagnose_run
from servelab.engines.signatures import LogScan, SignatureMatcher
from servelab.telemetry.summary import EngineLevel, GpuLevel, GpuStats, LevelTelemetry

INPUT_LEN = 256
OUTPUT_LEN = 128


def neutral(model: type[BaseModel]) -> dict[str, Any]:
    """A value for every required field: None where allowed, else 0, False, {} or ''."""
    values: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if not field.is_required():
            continue
        annotation = field.annotation
        args = typing.get_args(annotation)
        origin = typing.get_origin(annotation)
        if (origin is typing.Union or origin is types.UnionType) and type(None) in args:
            values[name] = None
        elif annotation is bool:
            values[name] = False
        elif annotation in (int, float):
            values[name] = 0
        elif origin is dict:
            values[name] = {}
        elif origin is list:
            values[name] = []
        else:
            values[name] = ""
    return values


def client(**given: Any) -> ClientStats:
    return ClientStats.model_validate({**neutral(ClientStats), "workers": 1, **given})


def telemetry(
    *, engine: dict[str, Any] | None = None, gpu: dict[str, Any] | None = None
) -> LevelTelemetry:
    """Telemetry with the given engine counts and/or GPU means (unavailable otherwise)."""
    engine_level = (
        EngineLevel(available=True, engine="sglang", samples=5, **engine)
        if engine is not None
        else EngineLevel(available=False, reason="no /metrics URL was given")
    )
    if gpu is not None:
        stats = GpuStats(gpu=None, samples=50, **gpu)
        gpu_level = GpuLevel(
            available=True, gpus=[stats.model_copy(update={"gpu": 0})], overall=stats
        )
    else:
        gpu_level = GpuLevel(available=False, reason="no GPUs were sampled (none given)")
    return LevelTelemetry(t_start_ns=0, t_end_ns=10**10, gpu=gpu_level, engine=engine_level)


def level(
    index: int,
    concurrency: int,
    *,
    total_tps: float,
    tpot_ms: float,
    ttft_ms: float,
    completed: int = 64,
    failed: int = 0,
    errors: dict[str, int] | None = None,
    little: float | None = None,
    input_len: int = INPUT_LEN,
    output_len: int = OUTPUT_LEN,
    **given: Any,
) -> LevelSummary:
    """A closed-loop level; E2E follows from TTFT and TPOT, throughputs from total_tps."""
    e2e = ttft_ms + (output_len - 1) * tpot_ms
    duration = max(completed, 1) * (input_len + output_len) / total_tps
    values = {
        **neutral(LevelSummary),
        "level": index,
        "load_mode": "concurrency",
        "max_concurrency": concurrency,
        "num_requests": completed + failed,
        "completed": completed,
        "failed": failed,
        "errors": errors or ({"http": failed} if failed else {}),
        "error_examples": {kind: f"HTTP 500: {kind}" for kind in (errors or {})},
        "duration": duration,
        "total_input_tokens": completed * input_len,
        "total_output_tokens": completed * output_len,
        "input_token_source": "usage",
        "request_throughput": completed / duration,
        "total_throughput": total_tps if completed else 0.0,
        "input_throughput": completed * input_len / duration,
        "output_throughput": completed * output_len / duration,
        "mean_ttft_ms": ttft_ms,
        "median_ttft_ms": ttft_ms,
        "p90_ttft_ms": ttft_ms,
        "mean_tpot_ms": tpot_ms,
        "median_tpot_ms": tpot_ms,
        "p90_tpot_ms": tpot_ms,
        "mean_itl_ms": tpot_ms,
        "median_itl_ms": tpot_ms,
        "mean_e2e_latency_ms": e2e,
        "median_e2e_latency_ms": e2e,
        "p90_e2e_latency_ms": e2e,
        "concurrency": little if little is not None else 0.95 * concurrency,
        "max_concurrent_requests": concurrency,
        "single_stream_tok_s": output_len / e2e * 1e3 if concurrency == 1 else None,
        "client": client(),
    }
    values.update(given)
    return LevelSummary.model_validate(values)


def summary(
    levels: list[LevelSummary],
    *,
    engine: dict[str, Any] | None = None,
    target_engine: str = "openai",
    input_len: int = INPUT_LEN,
    output_len: int = OUTPUT_LEN,
    cpus: int = 16,
) -> BenchSummary:
    run = RunInfo.model_validate(
        {
            **neutral(RunInfo),
            "name": "hand-built",
            "command": ["servelab", "bench"],
            "started_utc": "2026-12-01T00:00:00+00:00",
            "servelab_version": "0.1.0",
            "host": {"cpus": cpus},
            "target": {"url": "http://127.0.0.1:8000", "engine": target_engine},
            "workload": {"dataset": "random", "input_len": input_len, "output_len": output_len},
            "load": {"mode": "concurrency"},
        }
    )
    return BenchSummary(status="complete", run=run, levels=levels, engine=engine)


def scan(engine: str, lines: list[str]) -> LogScan:
    """The engine_events.json of a log made of these lines."""
    matcher = SignatureMatcher(engine)
    for line in lines:
        matcher.feed(line)
    return matcher.summary()


def write_run(
    folder: Path,
    run: BenchSummary,
    *,
    events: LogScan | None = None,
    probe: Path | None = None,
    metric_rows: list[dict[str, Any]] | None = None,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(run.model_dump_json(by_alias=True))
    if events is not None:
        (folder / "engine_events.json").write_text(events.model_dump_json())
    if probe is not None:
        (folder / "probe.json").write_text(probe.read_text())
    if metric_rows is not None:
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metric_rows))
    return folder


def diagnose(folder: Path, **options: Any) -> Diagnosis:
    return diagnose_run(folder, DiagnoseOptions(**options))


def kinds(diagnosis: Diagnosis) -> list[str]:
    return [finding.kind.value for finding in diagnosis.findings]
