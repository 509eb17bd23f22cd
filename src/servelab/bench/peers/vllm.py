"""vLLM `bench serve --save-result`: one flat JSON object per level (a file, or one line
each with `--append-result`).

The statistics are `{mean,median,std}_{metric}_ms` and `p{P}_{metric}_ms` for the
percentiles asked for (`--metric-percentiles`), the metrics ttft, tpot, itl and e2el.
`latencies` (per request, s) is written even without `--save-detailed`; with it come
`ttfts`, `itls`, `start_times`, `input_lens`, `output_lens` and `errors`.
"""

from __future__ import annotations

import math
from typing import Any

from servelab.bench.peers.chunks import RequestArrays, rebuild_records
from servelab.bench.peers.common import (
    STATS,
    Doc,
    NotImportable,
    Parsed,
    build_level,
    parse_levels,
    stats_ms,
)
from servelab.bench.records import RequestRecord
from servelab.bench.results import LevelSummary
from servelab.core.units import MS_PER_S, NS_PER_S

__all__ = ["parse_vllm"]

_METRIC_KEYS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e_latency": "e2el"}
_DEFINITIONS = (
    "vLLM's TTFT is its first SSE event with choices, a role-only chunk included (its "
    "ITL: the gaps between such events, empty ones included; its E2E latency ends at the "
    "last of them); its max_concurrent_requests and max_output_tokens_per_s count 1-second "
    "buckets; its total_input_tokens is the server's usage.prompt_tokens where it sent one, "
    "else the dataset's count, and the file does not say which (input_token_source null); "
    "it has no input throughput"
)


def parse_vllm(docs: list[Doc]) -> Parsed:
    """Every document a level, in file order."""
    parsed = parse_levels(
        docs,
        _level,
        rebuilt="requests.jsonl: level {index}'s {count} requests rebuilt from its ttfts, "
        "itls and start_times (chunk offsets: TTFT, then TTFT plus each cumulative gap; "
        "t_send_ns: its start time on vLLM's clock; t_end_ns: the start plus its latency)",
    )
    notes = [_DEFINITIONS, *parsed.notes]
    dates = [d for doc in docs if (d := doc.text("date"))]
    if dates:
        notes.append(f"measured {', '.join(dates)} (vLLM's local time, no zone)")
    first = docs[0]
    backend = first.text("backend")
    return Parsed(
        tool="vllm",
        label="vLLM bench serve",
        version=None,
        generation="--save-result JSON",
        levels=parsed.levels,
        records=parsed.records,
        target={
            "url": None,
            "model": first.text("model_id"),
            "engine": "vllm" if backend == "vllm" else "openai",
            "backend": backend,
            "api": first.text("endpoint_type"),
            "tokenizer": first.text("tokenizer_id"),
            "label": first.text("label"),
        },
        notes=notes,
        no_records="; ".join(parsed.why_not)
        or "the file has no per-request details (--save-detailed)",
    )


def _level(index: int, doc: Doc) -> tuple[LevelSummary, list[RequestRecord], str | None]:
    completed = doc.need_count("completed")
    failed = doc.count("failed")
    duration = doc.need_number("duration")
    values: dict[str, Any] = {
        **_load(doc),
        "num_requests": doc.count("num_prompts"),
        "completed": completed,
        "failed": failed,
        "duration": duration,
        "total_input_tokens": doc.need_count("total_input_tokens"),
        "total_output_tokens": doc.need_count("total_output_tokens"),
        "request_throughput": doc.number("request_throughput"),
        "output_throughput": doc.need_number("output_throughput"),
        "total_throughput": doc.number("total_token_throughput"),
        "max_concurrent_requests": doc.count("max_concurrent_requests"),
        "max_output_tokens_per_s": doc.number("max_output_tokens_per_s"),
        "request_goodput": doc.number("request_goodput"),
        **{
            f"{stat}_{metric}_ms": doc.number(f"{stat}_{key}_ms")
            for metric, key in _METRIC_KEYS.items()
            for stat in STATS
        },
    }
    if values["load_mode"] == "concurrency" and values["max_concurrency"] is None:
        values["max_concurrency"] = values["num_requests"]  # all at once: that many
    latencies = _ok_latencies(doc, completed, failed)
    if latencies is not None:
        if all(values[f"{stat}_e2e_latency_ms"] is None for stat in STATS):
            values.update(stats_ms("e2e_latency", [t * MS_PER_S for t in latencies]))
            values["notes"].append("E2E statistics computed from its per-request latencies")
        if duration > 0:
            values["concurrency"] = math.fsum(latencies) / duration
            values["notes"].append("concurrency: the sum of its per-request latencies / duration")
    records: list[RequestRecord] = []
    reason: str | None = None
    if doc.has("ttfts") and doc.has("itls"):
        rebuilt = rebuild_records(
            index,
            RequestArrays(
                ttfts_s=doc.items("ttfts") or [],
                itls_s=doc.items("itls") or [],
                output_lens=doc.items("output_lens") or [],
                input_lens=doc.items("input_lens"),
                errors=doc.items("errors"),
                start_times_s=doc.items("start_times"),
                latencies_s=doc.items("latencies"),
            ),
            completed=completed,
        )
        records, reason = rebuilt.records, rebuilt.reason
    if records and values["max_concurrency"] == 1:
        rates = [
            r.output_tokens / (r.chunk_offsets_ns[-1] / NS_PER_S)
            for r in records
            if r.ok and r.chunk_offsets_ns[-1] > 0
        ]
        values["single_stream_tok_s"] = sum(rates) / len(rates) if rates else None
    return build_level(index, values, where=doc), records, reason


def _ok_latencies(doc: Doc, completed: int, failed: int | None) -> list[float] | None:
    """The latencies of completed requests: all of them when none failed, else those the
    errors array marks as completed; None when they cannot be told apart."""
    latencies = doc.items("latencies")
    if latencies is None:
        return None
    if not all(_seconds(v) for v in latencies):
        raise NotImportable(f"{doc.label}: latencies holds a value that is not a time")
    errors = doc.items("errors")
    if errors is not None and len(errors) == len(latencies):
        chosen = [float(t) for t, e in zip(latencies, errors, strict=True) if not e]
    elif failed == 0:
        chosen = [float(t) for t in latencies]
    else:
        return None
    return chosen if len(chosen) == completed else None


def _seconds(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and value >= 0
    )


def _load(doc: Doc) -> dict[str, Any]:
    """Open loop at a finite request rate ("inf", as vLLM writes it, is none); else closed
    loop at max_concurrency."""
    rate = doc.get("request_rate")
    if isinstance(rate, str):
        try:
            rate = float(rate)
        except ValueError:
            raise NotImportable(f"{doc.label}: request_rate {rate!r} is not a number") from None
    if isinstance(rate, bool) or not isinstance(rate, int | float | None):
        raise NotImportable(f"{doc.label}: request_rate is not a number")
    cap = doc.count("max_concurrency")
    notes: list[str] = []
    if rate is not None and math.isfinite(rate):
        if cap:
            notes.append(f"arrivals at {rate:g}/s, at most {cap} in flight (max_concurrency)")
        return {
            "load_mode": "request_rate",
            "request_rate": float(rate),
            "burstiness": doc.number("burstiness"),
            "max_concurrency": None,
            "notes": notes,
        }
    if not cap:
        notes.append("every request sent at once (request rate inf, no max_concurrency)")
    return {
        "load_mode": "concurrency",
        "max_concurrency": cap,
        "request_rate": None,
        "notes": notes,
    }
