"""GuideLLM `benchmarks.json`, three schema generations, one level per benchmark.

- v0.3: `{benchmarks}`; each benchmark has `args.strategy` and its own `request_totals`.
- v0.5-0.6: `{metadata{version: 1}, args, benchmarks}`; each has `config.strategy`.
- v0.7+: `{metadata{version: 2}, config, benchmarks}`, the same per benchmark.

Statistics are `{"successful": D, "errored": D, "incomplete": D, "total": D}` with D's
mean, median, std_dev and percentiles; servelab takes the successful requests'.
`request_latency` is in seconds, `*_ms` in ms. GuideLLM's TPOT (time_per_output_token)
is not other tools' TPOT; its inter_token_latency is, and is imported as TPOT.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from servelab.bench.peers.common import Doc, NotImportable, Parsed, build_level
from servelab.bench.results import LevelSummary
from servelab.core.units import MS_PER_S

__all__ = ["parse_guidellm"]

_SCHEMAS = {None: "v0.3 schema", 1: "v0.5-0.6 schema", 2: "v0.7+ schema"}
_STATS = {"mean": ("mean",), "median": ("median",), "std": ("std_dev",)} | {
    p: ("percentiles", p) for p in ("p90", "p95", "p99")
}
_NO_RECORDS = (
    "GuideLLM's per-request records give each request's first and last token times, not "
    "each chunk's, so chunk times cannot be rebuilt"
)


def parse_guidellm(docs: list[Doc]) -> Parsed:
    """Every benchmark a level, in file order."""
    doc = docs[0]
    schema = doc.get("metadata", "version")
    known = schema is None or (type(schema) is int and schema in _SCHEMAS)
    if not known or (schema is None and doc.has("metadata")):
        raise NotImportable(
            f"its metadata.version {schema!r} is a GuideLLM schema servelab does not know "
            "(it reads 1, 2 and v0.3's, without metadata)"
        )
    benchmarks = [
        Doc(b, f"benchmarks[{i}]") if isinstance(b, dict) else _not_object(i)
        for i, b in enumerate(doc.items("benchmarks") or [])
    ]
    if not benchmarks:
        raise NotImportable("its benchmarks list is empty")
    levels = [_level(i, b, schema) for i, b in enumerate(benchmarks)]
    version = doc.text("metadata", "guidellm_version")
    platform = doc.text("metadata", "platform")
    notes = [_definitions(schema)]
    when = _utc(benchmarks[0].number("start_time"))
    if when:
        notes.append(f"measured from {when} (GuideLLM's first benchmark start)")
    return Parsed(
        tool="guidellm",
        label="GuideLLM benchmarks.json",
        version=version,
        generation=_SCHEMAS[schema],
        levels=levels,
        target={**_target(doc, benchmarks[0], schema), "engine": "openai"},
        workload=_workload(doc, benchmarks[0], schema),
        host={"platform": platform} if platform else {},
        notes=notes,
        no_records=_NO_RECORDS,
    )


def _not_object(i: int) -> Doc:
    raise NotImportable(f"benchmarks[{i}] is not an object")


def _level(index: int, b: Doc, schema: int | None) -> LevelSummary:
    metrics = b.doc("metrics")
    if metrics is None:
        raise NotImportable(f"{b.label} has no metrics")
    totals = b.doc("request_totals") if schema is None else metrics.doc("request_totals")
    if totals is None:
        raise NotImportable(f"{b.label} has no request_totals")
    latency_s = {stat: _stat(metrics, "request_latency", stat) for stat in _STATS}
    values: dict[str, Any] = {
        **_load(b, schema),
        "num_requests": totals.count("total"),
        "warmup_requests": _warmup(b, schema),
        "completed": totals.need_count("successful"),
        "failed": totals.count("errored"),
        "cancelled": totals.count("incomplete") or 0,
        "duration": b.need_number("duration"),
        "total_input_tokens": metrics.need_count("prompt_token_count", "successful", "total_sum"),
        "total_output_tokens": metrics.need_count("output_token_count", "successful", "total_sum"),
        "request_throughput": _stat(metrics, "requests_per_second", "mean"),
        "input_throughput": _stat(metrics, "prompt_tokens_per_second", "mean"),
        "output_throughput": metrics.need_number("output_tokens_per_second", "successful", "mean"),
        "total_throughput": _stat(metrics, "tokens_per_second", "mean"),
        "concurrency": _stat(metrics, "request_concurrency", "mean"),
        "max_concurrent_requests": _peak(metrics),
        **{f"{s}_ttft_ms": _stat(metrics, "time_to_first_token_ms", s) for s in _STATS},
        **{f"{s}_tpot_ms": _stat(metrics, "inter_token_latency_ms", s) for s in _STATS},
        **{f"{s}_e2e_latency_ms": v * MS_PER_S for s, v in latency_s.items() if v is not None},
    }
    return build_level(index, values, where=b)


def _stat(metrics: Doc, name: str, stat: str) -> float | None:
    return metrics.number(name, "successful", *_STATS.get(stat, (stat,)))


def _peak(metrics: Doc) -> int | None:
    """The most requests in flight: of every request where it says, else of successful ones."""
    peak = metrics.number("request_concurrency", "total", "max")
    if peak is None:
        peak = metrics.number("request_concurrency", "successful", "max")
    return None if peak is None else round(peak)


def _load(b: Doc, schema: int | None) -> dict[str, Any]:
    strategy = b.doc("args", "strategy") if schema is None else b.doc("config", "strategy")
    if strategy is None:
        raise NotImportable(f"{b.label} has no strategy")
    kind = strategy.text("type_")
    if kind == "synchronous":
        return {"load_mode": "concurrency", "max_concurrency": 1}
    if kind == "concurrent":
        return {"load_mode": "concurrency", "max_concurrency": strategy.need_count("streams")}
    if kind == "throughput":
        return {
            "load_mode": "concurrency",
            "max_concurrency": strategy.count("max_concurrency"),
            "notes": ["GuideLLM's throughput strategy: as many requests in flight as it could"],
        }
    if kind in ("constant", "poisson"):
        return {
            "load_mode": "request_rate",
            "request_rate": strategy.need_number("rate"),
            "burstiness": 1.0 if kind == "poisson" else None,
            "notes": [f"GuideLLM's {kind} arrivals"],
        }
    raise NotImportable(f"{b.label}'s strategy {kind!r} is not a load servelab can place")


def _warmup(b: Doc, schema: int | None) -> int | None:
    """0 where the benchmark had no warm-up; its count where it says; else None."""
    if schema is None:
        number, duration = b.count("args", "warmup_number"), b.get("args", "warmup_duration")
        if number is not None:
            return number
        return 0 if duration is None and b.has("args") else None
    return 0 if b.number("warmup_duration") == 0 else None


def _definitions(schema: int | None) -> str:
    tpot = (
        "(last - first token) / (output tokens - 1), one value per request"
        if schema is None
        else "(last - first token) / (output tokens - 1), weighted by tokens"
    )
    theirs = (
        "divides by every output token"
        if schema is None
        else "runs from the request's start, so it includes TTFT"
    )
    return (
        f"GuideLLM's inter_token_latency_ms is imported as TPOT ({tpot}); its "
        f"time_per_output_token_ms {theirs} and is not imported; it records no gaps between "
        "chunks, so there is no ITL; its request_latency (request start to end, in s) is "
        "the E2E latency, in ms; its throughputs are the means of its rates over time"
    )


def _target(doc: Doc, first: Doc, schema: int | None) -> dict[str, str | bool | None]:
    if schema == 2:
        backend = doc.doc("config", "spec", "backend")
        return {
            "url": backend.text("target") if backend else None,
            "model": backend.text("model") if backend else None,
            "api": backend.text("request_format") if backend else None,
            "backend": backend.text("kind") if backend else None,
        }
    if schema == 1:
        kwargs = doc.doc("args", "backend_kwargs")
        return {
            "url": (kwargs.text("target") if kwargs else None) or doc.text("args", "target"),
            "model": (kwargs.text("model") if kwargs else None) or doc.text("args", "model"),
            "backend": doc.text("args", "backend"),
        }
    return {
        "url": first.text("worker", "backend_target"),
        "model": first.text("worker", "backend_model"),
        "backend": first.text("worker", "backend_type"),
    }


def _workload(doc: Doc, first: Doc, schema: int | None) -> dict[str, str | int | float | None]:
    if schema == 2:
        data = doc.items("config", "spec", "data") or []
        spec = Doc(data[0], "data") if data and isinstance(data[0], dict) else None
        if spec is None:
            return {}
        return {
            "dataset": spec.text("kind"),
            "input_len": spec.count("prompt_tokens"),
            "output_len": spec.count("output_tokens"),
        }
    if schema == 1:
        data = doc.items("args", "data") or []
        text = data[0] if data and isinstance(data[0], str) else None
    else:
        text = first.text("request_loader", "data")
    if text is None:
        return {}
    pairs = dict(p.split("=", 1) for p in text.split(",") if "=" in p)
    return {
        "dataset": text,
        "input_len": _int(pairs.get("prompt_tokens")),
        "output_len": _int(pairs.get("output_tokens")),
    }


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def _utc(epoch_s: float | None) -> str | None:
    if epoch_s is None:
        return None
    try:
        return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return None
