"""NVIDIA AIPerf: `profile_export_aiperf.json` (one level) and the sweep summary
`profile_export_aiperf_sweep.json` (one level per combination).

Every metric is an object with its unit (`{"unit": "ms", "avg": ..., "p50": ...}`), so
units are read, not assumed. AIPerf's names differ from SGLang's: its
`inter_token_latency` is (latency - TTFT) / (output tokens - 1) per request, other
tools' TPOT, and its `inter_chunk_latency` is the gap between chunks, other tools' ITL.
In the sweep summary each value is the mean over the trials of its combination and `std`
is the spread between trials, not between requests, so no std is imported from it.
"""

from __future__ import annotations

from typing import Any

from servelab.bench.peers.common import Doc, NotImportable, Parsed, build_level, to_ms, to_s
from servelab.bench.results import LevelSummary

__all__ = ["parse_aiperf", "parse_aiperf_sweep"]

_LATENCIES = {
    "ttft": "time_to_first_token",
    "tpot": "inter_token_latency",
    "itl": "inter_chunk_latency",
    "e2e_latency": "request_latency",
}
_STAT_KEYS = {
    "mean": "avg",
    "median": "p50",
    "std": "std",
    "p90": "p90",
    "p95": "p95",
    "p99": "p99",
}
_DEFINITIONS = (
    "AIPerf's inter_token_latency is imported as TPOT ((latency - TTFT) / (output tokens - "
    "1) per request) and its inter_chunk_latency as ITL (gaps between chunks, per chunk); "
    "concurrency and max_concurrent_requests are its effective_concurrency (time-weighted "
    "mean and peak of requests in flight); token counts are its tokenizer's unless it used "
    "the server's (input_token_source)"
)
_NO_RECORDS = (
    "AIPerf writes its per-request records to profile_export.jsonl, which this file does not hold"
)


def parse_aiperf(docs: list[Doc]) -> Parsed:
    """`profile_export_aiperf.json`: one level, its load from the profiling phase."""
    doc = docs[0]
    phases = [p for p in doc.items("input_config", "phases") or [] if isinstance(p, dict)]
    profiling = next((Doc(p, "input_config.phases[profiling]") for p in phases if _kind(p)), None)
    if profiling is None:
        raise NotImportable(f"{doc.label} has no profiling phase in input_config.phases")
    cancelled = doc.get("was_cancelled") is True
    server_counts = doc.get("input_config", "endpoint", "use_server_token_count") is True
    values: dict[str, Any] = {
        **_values(doc, _load(profiling), std=True),
        "num_requests": None if cancelled else profiling.count("requests"),
        "warmup_requests": _warmup(phases),
        "interrupted": cancelled,
        "failed": _failed(doc),
        "input_token_source": "usage" if server_counts else "workload",
    }
    level = build_level(0, values, where=doc)
    models = doc.items("input_config", "models", "items") or []
    urls = doc.items("input_config", "endpoint", "urls") or []
    notes = [_DEFINITIONS]
    start, command = doc.text("start_time"), doc.text("run_info", "cli_command")
    if start:
        notes.append(f"measured from {start} (AIPerf's local time, no zone)")
    if command:
        notes.append(f"measured by: {command}")
    version = doc.text("aiperf_version")
    return Parsed(
        tool="aiperf",
        label="AIPerf profile_export_aiperf.json",
        version=version,
        generation=f"schema {doc.text('schema_version') or 'unknown'}",
        levels=[level],
        target={
            "url": urls[0] if urls and isinstance(urls[0], str) else None,
            "model": _model(models),
            "engine": "openai",
            "api": doc.text("input_config", "endpoint", "type"),
            "stream": doc.get("input_config", "endpoint", "streaming") is True,
            "tokenizer": doc.text("input_config", "tokenizer", "name"),
        },
        workload=_workload(doc),
        notes=notes,
        no_records=_NO_RECORDS,
    )


def parse_aiperf_sweep(docs: list[Doc]) -> Parsed:
    """The sweep summary: a level per combination of a load parameter, in file order."""
    doc = docs[0]
    levels: list[LevelSummary] = []
    for i, item in enumerate(doc.items("per_combination_metrics") or []):
        combo = Doc(item, f"per_combination_metrics[{i}]") if isinstance(item, dict) else None
        if combo is None:
            raise NotImportable(f"per_combination_metrics[{i}] is not an object")
        metrics = combo.doc("metrics")
        if metrics is None:
            raise NotImportable(f"{combo.label} has no metrics")
        values = {
            **_values(metrics, _sweep_load(combo), std=False),
            "failed": _failed(metrics),
        }
        levels.append(build_level(i, values, where=combo))
    if not levels:
        raise NotImportable("its per_combination_metrics is empty")
    trials = doc.count("metadata", "num_trials_per_value") or 1
    notes = [
        _DEFINITIONS,
        f"each value is AIPerf's mean over the {trials} trial(s) of its level; std is left "
        "out (the sweep's is between trials); the sweep file names no endpoint or model",
    ]
    failed_runs = doc.items("failed_runs") or []
    if failed_runs:
        notes.append(f"{len(failed_runs)} of its profile runs failed and are not here")
    return Parsed(
        tool="aiperf",
        label="AIPerf sweep summary",
        version=None,
        generation="sweep aggregate",
        levels=levels,
        target={"url": None, "model": None, "engine": "openai"},
        notes=notes,
        no_records=_NO_RECORDS,
    )


def _values(doc: Doc, load: dict[str, Any], *, std: bool) -> dict[str, Any]:
    """The level's numbers from the metric objects of a profile export or a combination."""
    peak = doc.number("effective_concurrency", "max")
    single = load.get("max_concurrency") == 1
    return {
        **load,
        "completed": _first(_count(doc, "completed_request_count"), _count(doc, "request_count")),
        "duration": _seconds(doc, "benchmark_duration"),
        "total_input_tokens": _count(doc, "total_isl"),
        "total_output_tokens": _first(_count(doc, "total_output_tokens"), _count(doc, "total_osl")),
        "request_throughput": _value(doc, "request_throughput"),
        "input_throughput": _value(doc, "input_token_throughput"),
        "output_throughput": _value(doc, "output_token_throughput"),
        "total_throughput": _value(doc, "total_token_throughput"),
        "concurrency": _value(doc, "effective_concurrency"),
        "max_concurrent_requests": None if peak is None else round(peak),
        **{
            f"{stat}_{metric}_ms": _ms(doc, name, key)
            for metric, name in _LATENCIES.items()
            for stat, key in _STAT_KEYS.items()
            if std or stat != "std"
        },
        "single_stream_tok_s": _value(doc, "e2e_output_token_throughput") if single else None,
    }


def _first(*values: int | None) -> int | None:
    return next((v for v in values if v is not None), None)


def _value(doc: Doc, name: str, key: str = "avg") -> float | None:
    return doc.number(name, key)


def _count(doc: Doc, name: str) -> int | None:
    return doc.count(name, "avg")


def _seconds(doc: Doc, name: str) -> float | None:
    return to_s(doc.number(name, "avg"), doc.text(name, "unit"), f"{doc.label}: {name}")


def _ms(doc: Doc, name: str, key: str) -> float | None:
    return to_ms(doc.number(name, key), doc.text(name, "unit"), f"{doc.label}: {name}")


def _failed(doc: Doc) -> int | None:
    """Errored requests: its count where it has one, else its error summary's counts, else
    0 where its error rate is 0."""
    counted = doc.count("error_request_count", "avg")
    if counted is not None:
        return counted
    summary = doc.get("error_summary")
    if isinstance(summary, list):
        counts = [e.get("count") if isinstance(e, dict) else None for e in summary]
        if all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
            return sum(c for c in counts if isinstance(c, int))
    return 0 if doc.number("request_error_rate", "avg") == 0 else None


def _kind(phase: dict[str, Any]) -> bool:
    return phase.get("kind", phase.get("name")) == "profiling"


def _warmup(phases: list[dict[str, Any]]) -> int | None:
    """Requests of its warm-up phases (0 with none); None where one does not say."""
    counts = [p.get("requests") for p in phases if p.get("kind") == "warmup"]
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
        return None
    return sum(c for c in counts if isinstance(c, int))


def _load(phase: Doc) -> dict[str, Any]:
    """Closed loop at its concurrency, or open loop at its request rate."""
    kind = phase.text("type")
    concurrency = phase.count("concurrency")
    rate = phase.number("request_rate")
    if kind == "concurrency" and concurrency:
        return {"load_mode": "concurrency", "max_concurrency": concurrency}
    if rate:
        notes = [f"at most {concurrency} in flight"] * bool(concurrency)
        return {"load_mode": "request_rate", "request_rate": rate, "notes": notes}
    raise NotImportable(f"{phase.label} is of type {kind!r}, with no concurrency or rate")


def _sweep_load(combo: Doc) -> dict[str, Any]:
    parameters = combo.doc("parameters")
    names = sorted(parameters.data) if parameters else []
    if parameters is not None and names == ["concurrency"]:
        return {"load_mode": "concurrency", "max_concurrency": parameters.need_count("concurrency")}
    if parameters is not None and names == ["request_rate"]:
        return {"load_mode": "request_rate", "request_rate": parameters.need_number("request_rate")}
    raise NotImportable(
        f"its sweep varies {', '.join(names) or 'nothing named'}, not the load alone: import "
        "each variation's profile_export_aiperf.json instead"
    )


def _model(models: list[Any]) -> str | None:
    first = models[0] if models else None
    name = first.get("name") if isinstance(first, dict) else None
    return name if isinstance(name, str) else None


def _workload(doc: Doc) -> dict[str, str | int | float | bool | None]:
    datasets = doc.items("input_config", "datasets") or []
    first = Doc(datasets[0], "dataset") if datasets and isinstance(datasets[0], dict) else None
    if first is None:
        return {}
    return {
        "dataset": first.text("type"),
        "input_len": _whole(first.number("prompts", "isl", "mean")),
        "input_len_stddev": first.number("prompts", "isl", "stddev"),
        "output_len": _whole(first.number("prompts", "osl", "mean")),
        "output_len_stddev": first.number("prompts", "osl", "stddev"),
        "seed": first.count("random_seed"),
    }


def _whole(value: float | None) -> int | float | None:
    return int(value) if value is not None and value.is_integer() else value
