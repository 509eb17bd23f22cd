"""Per-request records rebuilt from a peer's per-request arrays, only where faithful.

SGLang's `--output-details` and vLLM's `--save-detailed` write, per request, its TTFT
and the list of gaps between its later chunks ("itls"), in seconds. Where each gap is
the time between two chunks (the OpenAI-style clients of both tools), a request's chunk
offsets are exactly TTFT, then TTFT plus each cumulative gap: the arrival of every chunk
after the request's send. Nothing else is filled in: a field the arrays do not give
keeps its "unknown" value (`max_tokens` 0, `t_send_ns` 0 where no send times are
given), and the notes say so. Where the arrays cannot be made into chunk times (a gap
list that is per token, arrays of different lengths, counts that disagree with the
file's own totals), no record is written and the reason is returned instead.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servelab.bench.records import OutputTokenSource, RequestRecord
from servelab.core.units import NS_PER_S

__all__ = ["Rebuilt", "RequestArrays", "rebuild_records"]

_LATENCY_TOLERANCE_S = 1e-6
"""How far a given latency may sit from TTFT + the sum of gaps (float rounding)."""


@dataclass(frozen=True)
class RequestArrays:
    """One level's per-request arrays, as the file holds them (seconds, counts)."""

    ttfts_s: Sequence[Any]
    itls_s: Sequence[Any]
    output_lens: Sequence[Any]
    input_lens: Sequence[Any] | None
    errors: Sequence[Any] | None
    start_times_s: Sequence[Any] | None = None
    """Each request's send, on the tool's perf_counter clock (vLLM); None: not given."""
    latencies_s: Sequence[Any] | None = None
    """Each request's end-to-end latency, to its last chunk (vLLM); None: not given."""
    max_tokens: int = 0
    """The output length every request asked for, where the file says it; 0: unknown."""


@dataclass(frozen=True)
class Rebuilt:
    """Records, or why there are none."""

    records: list[RequestRecord]
    reason: str | None = None


def rebuild_records(level: int, arrays: RequestArrays, *, completed: int | None) -> Rebuilt:
    """The level's requests as RequestRecords, or no record and the reason."""
    n = len(arrays.ttfts_s)
    named = {
        "itls": arrays.itls_s,
        "output_lens": arrays.output_lens,
        "input_lens": arrays.input_lens,
        "errors": arrays.errors,
        "start_times": arrays.start_times_s,
        "latencies": arrays.latencies_s,
    }
    uneven = [name for name, values in named.items() if values is not None and len(values) != n]
    if uneven:
        return Rebuilt([], f"its per-request arrays differ in length ({', '.join(uneven)})")
    try:
        records = [_record(level, i, arrays) for i in range(n)]
    except (TypeError, ValueError) as exc:
        return Rebuilt([], f"its per-request arrays hold a value of the wrong kind ({exc})")
    ok = sum(r.ok for r in records)
    if completed is not None and ok != completed:
        return Rebuilt(
            [], f"its per-request arrays hold {ok} completed requests, its summary {completed}"
        )
    if arrays.latencies_s is not None:
        for r, latency in zip(records, arrays.latencies_s, strict=True):
            if r.ok and abs(r.chunk_offsets_ns[-1] / NS_PER_S - latency) > _LATENCY_TOLERANCE_S:
                return Rebuilt(
                    [],
                    f"request {r.index}'s latency is not its TTFT plus its chunk gaps, so "
                    "the gaps are not chunk times",
                )
    return Rebuilt(records)


def _record(level: int, i: int, a: RequestArrays) -> RequestRecord:
    ttft = _seconds(a.ttfts_s[i])
    gaps = [_seconds(g) for g in _list(a.itls_s[i])]
    error = "" if a.errors is None else a.errors[i]
    if not isinstance(error, str):
        raise TypeError(f"error {i} is not a string")
    ok = not error and ttft > 0
    offsets = [round(t * NS_PER_S) for t in itertools.accumulate(gaps, initial=ttft)] if ok else []
    send = round(_seconds(a.start_times_s[i]) * NS_PER_S) if a.start_times_s is not None else 0
    if a.latencies_s is not None:
        end = send + round(_seconds(a.latencies_s[i]) * NS_PER_S)
    else:
        end = send + (offsets[-1] if offsets else 0)
    prompt = _count(a.input_lens[i]) if a.input_lens is not None else None
    return RequestRecord(
        index=i,
        level=level,
        warmup=False,
        worker=0,
        t_send_ns=send,
        t_scheduled_ns=send,
        t_end_ns=end,
        ok=ok,
        max_tokens=a.max_tokens,
        chunk_offsets_ns=offsets,
        output_tokens=_count(a.output_lens[i]) if ok else 0,
        output_token_source=OutputTokenSource.USAGE,
        prompt_tokens=prompt if ok else None,
        error=None if ok else error or "failed (the file gives no reason)",
    )


def _seconds(value: Any) -> float:
    if not _number(value) or value < 0:
        raise ValueError(f"{value!r} is not a time in seconds")
    return float(value)


def _count(value: Any) -> int:
    if not _number(value) or value < 0 or not float(value).is_integer():
        raise ValueError(f"{value!r} is not a count")
    return int(value)


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{value!r} is not a list of gaps")
    return value
