"""SGLang `bench_serving --output-file`: JSON Lines, one object per run (a level each).

Two key generations exist. Since 0.2.12 the keys are servelab's own (servelab took its
names from them): `completed`, `duration`, `total_input_tokens`, `mean_ttft_ms`, ...,
with `--output-details` adding per-request arrays as flat keys. 0.2.11 and older write
`total_input`, `benchmark_duration`, `median_ttft` (ms, without the unit in the name)
and no completed count. Each line is read by its own generation.
"""

from __future__ import annotations

import math
from typing import Any

from servelab.bench.peers.chunks import RequestArrays, rebuild_records
from servelab.bench.peers.common import (
    METRICS,
    STATS,
    Doc,
    NotImportable,
    Parsed,
    build_level,
    parse_levels,
)
from servelab.bench.records import RequestRecord
from servelab.bench.results import LevelSummary
from servelab.core.units import NS_PER_S

__all__ = ["parse_sglang"]

_PER_CHUNK_BACKENDS = frozenset(
    {"sglang-oai", "sglang-oai-chat", "vllm", "vllm-chat", "lmdeploy", "lmdeploy-chat"}
)
"""Backends whose request function appends one ITL per chunk. `sglang` and
`sglang-native` (/generate) spread a chunk's gap over the tokens it carried, so their
ITL lists are per token and chunk times cannot be rebuilt from them."""

_DEFINITIONS = (
    "SGLang's ITL is the gap between chunks (servelab's is per token; they agree when "
    "each chunk carries one token), its E2E latency ends at the last SSE event ([DONE] "
    "included), and its max_concurrent_requests and max_output_tokens_per_s count "
    "1-second buckets"
)
_OLD = (
    "SGLang 0.2.11 and older: total_output_tokens and output_throughput are the requested "
    "output lengths, not counted ones (total_output_retokenized: {retokenized}); its ITL "
    "list holds each request's first gap (about a TTFT) too; the file gives medians of "
    "TTFT and ITL and the mean and median E2E latency only"
)


def parse_sglang(docs: list[Doc]) -> Parsed:
    """Every line a level, in file order."""
    old = [i for i, doc in enumerate(docs) if _is_old(doc)]
    parsed = parse_levels(
        docs,
        _level,
        rebuilt="requests.jsonl: level {index}'s {count} requests rebuilt from its ttfts and "
        "itls (chunk offsets: TTFT, then TTFT plus each cumulative gap); the file has no send "
        "times, so each record's t_send_ns is 0 and its t_end_ns its last chunk",
        other=lambda index, doc: _old_level(index, doc) if index in old else None,
    )
    notes = [_DEFINITIONS, *parsed.notes]
    if old:
        retokenized = ", ".join(str(docs[i].get("total_output_retokenized")) for i in old)
        notes.append(_OLD.format(retokenized=retokenized))
    first = docs[0]
    backend = first.text("backend")
    server = first.doc("server_info")
    return Parsed(
        tool="sglang",
        label="SGLang bench_serving",
        version=server.text("version") if server else None,
        generation="0.2.11-and-older keys" if len(old) == len(docs) else "0.2.12+ keys",
        levels=parsed.levels,
        records=parsed.records,
        target={
            "url": None,
            "model": server.text("model_path") if server else None,
            "engine": _engine(backend),
            "backend": backend,
        },
        workload=_workload(first),
        notes=notes,
        no_records="; ".join(parsed.why_not)
        or "the file has no per-request details (--output-details)",
    )


def _level(index: int, doc: Doc) -> tuple[LevelSummary, list[RequestRecord], str | None]:
    """A line of the current generation: its keys are servelab's."""
    completed = doc.need_count("completed")
    values: dict[str, Any] = {
        **_load(doc),
        "completed": completed,
        "duration": doc.need_number("duration"),
        "total_input_tokens": doc.need_count("total_input_tokens"),
        "total_output_tokens": doc.need_count("total_output_tokens"),
        "input_token_source": "workload",
        "request_throughput": doc.number("request_throughput"),
        "input_throughput": doc.number("input_throughput"),
        "output_throughput": doc.need_number("output_throughput"),
        "total_throughput": doc.number("total_throughput"),
        "concurrency": doc.number("concurrency"),
        "max_concurrent_requests": doc.count("max_concurrent_requests"),
        "max_output_tokens_per_s": doc.number("max_output_tokens_per_s"),
        **{
            f"{stat}_{metric}_ms": doc.number(f"{stat}_{metric}_ms")
            for metric in METRICS
            for stat in STATS
        },
    }
    records: list[RequestRecord] = []
    reason: str | None = None
    errors = doc.items("errors")
    if errors is not None and doc.has("ttfts"):
        if len(errors) < completed:
            raise NotImportable(f"{doc.label} has {len(errors)} errors for {completed} completed")
        values["num_requests"] = len(errors)
        values["failed"] = len(errors) - completed
        records, reason = _records(index, doc, completed)
        if records and values["max_concurrency"] == 1:
            values["single_stream_tok_s"] = _single_stream(records)
    if values["load_mode"] == "concurrency" and values["max_concurrency"] is None:
        values["max_concurrency"] = values.get("num_requests")  # all at once: that many
    return build_level(index, values, where=doc), records, reason


def _records(index: int, doc: Doc, completed: int) -> tuple[list[RequestRecord], str | None]:
    backend = doc.text("backend")
    if backend not in _PER_CHUNK_BACKENDS:
        return [], (
            f"its {backend} backend spreads each chunk's gap over the chunk's tokens, so the "
            "itls are per token and chunk times cannot be rebuilt from them"
        )
    dataset = doc.text("dataset_name") or ""
    exact = dataset.startswith("random") and doc.number("random_range_ratio") == 1.0
    rebuilt = rebuild_records(
        index,
        RequestArrays(
            ttfts_s=doc.items("ttfts") or [],
            itls_s=doc.items("itls") or [],
            output_lens=doc.items("output_lens") or [],
            input_lens=doc.items("input_lens"),
            errors=doc.items("errors"),
            max_tokens=(doc.count("random_output_len") or 0) if exact else 0,
        ),
        completed=completed,
    )
    return rebuilt.records, rebuilt.reason


def _old_level(index: int, doc: Doc) -> LevelSummary:
    """A line of 0.2.11 and older: other names, ms without a unit suffix, no counts."""
    values: dict[str, Any] = {
        **_load(doc),
        "duration": doc.need_number("benchmark_duration"),
        "total_input_tokens": doc.need_count("total_input"),
        "total_output_tokens": doc.need_count("total_output"),
        "input_token_source": "workload",
        "output_throughput": doc.need_number("output_token_throughput"),
        **{
            f"{stat}_{metric}_ms": doc.number(f"{stat}_{metric}")
            for metric in METRICS
            for stat in STATS
        },
    }
    return build_level(index, values, where=doc)


def _is_old(doc: Doc) -> bool:
    return doc.has("benchmark_duration") and not doc.has("duration")


def _load(doc: Doc) -> dict[str, Any]:
    """Open loop at a finite request rate; else closed loop at max_concurrency."""
    rate = doc.get("request_rate")
    if isinstance(rate, bool) or not isinstance(rate, int | float | None):
        raise NotImportable(f"{doc.label}: request_rate is not a number")
    cap = doc.count("max_concurrency")
    if rate is not None and math.isfinite(rate):
        notes = [f"arrivals at {rate:g}/s, at most {cap} in flight (max_concurrency)"] * bool(cap)
        return {
            "load_mode": "request_rate",
            "request_rate": float(rate),
            "max_concurrency": None,
            "notes": notes,
        }
    notes = [] if cap else ["every request sent at once (request rate inf, no max_concurrency)"]
    return {
        "load_mode": "concurrency",
        "max_concurrency": cap,
        "request_rate": None,
        "notes": notes,
    }


def _single_stream(records: list[RequestRecord]) -> float | None:
    rates = [
        r.output_tokens / (r.chunk_offsets_ns[-1] / NS_PER_S)
        for r in records
        if r.ok and r.chunk_offsets_ns and r.chunk_offsets_ns[-1] > 0
    ]
    return sum(rates) / len(rates) if rates else None


def _engine(backend: str | None) -> str:
    """The engine the backend is named for (sglang, vllm); any other is an endpoint."""
    for engine in ("sglang", "vllm"):
        if backend and backend.startswith(engine):
            return engine
    return "openai"


def _workload(doc: Doc) -> dict[str, str | int | float | bool | None]:
    dataset = doc.text("dataset_name")
    random = bool(dataset and dataset.startswith("random"))
    return {
        "dataset": dataset,
        "input_len": doc.count("random_input_len") if random else None,
        "output_len": doc.count("random_output_len" if random else "sharegpt_output_len"),
        "range_ratio": doc.number("random_range_ratio") if random else None,
    }
