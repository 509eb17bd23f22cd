"""A level's latency and throughput by the metrics contract, from per-request times.

Measured and replayed levels go through this one function, so a difference between them
is never a difference of definition: TTFT is first token minus send, TPOT the rest of the
request over its remaining tokens, throughput the tokens over first send to last token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servelab.core.units import MS_PER_S

__all__ = ["METRICS", "LevelMetrics", "level_metrics"]

METRICS = (
    "median_ttft_ms",
    "p90_ttft_ms",
    "median_tpot_ms",
    "p90_tpot_ms",
    "median_e2e_latency_ms",
    "output_throughput",
    "total_throughput",
)
"""What twin.json compares per level, in the summary's own names."""


@dataclass(frozen=True, slots=True)
class LevelMetrics:
    """The compared metrics of one level; None where no request gives one."""

    values: dict[str, float | None]


def level_metrics(
    send_s: Sequence[float],
    first_s: Sequence[float],
    last_s: Sequence[float],
    output_tokens: Sequence[int],
    prompt_tokens: Sequence[int],
    *,
    streamed: bool = True,
) -> LevelMetrics:
    """The metrics of the requests that got their tokens; answers that came whole
    (`streamed=False`) have no TTFT or TPOT."""
    send, first, last = (np.asarray(v, dtype=float) for v in (send_s, first_s, last_s))
    output = np.asarray(output_tokens, dtype=float)
    prompt = np.asarray(prompt_tokens, dtype=float)
    if send.size == 0:
        return LevelMetrics(dict.fromkeys(METRICS))
    ttft = (first - send) * MS_PER_S if streamed else np.empty(0)
    decoding = output > 1
    tpot = (
        (last[decoding] - first[decoding]) / (output[decoding] - 1) * MS_PER_S
        if streamed
        else np.empty(0)
    )
    e2e = (last - send) * MS_PER_S
    duration = float(last.max() - send.min())
    per_s = 1.0 / duration if duration > 0 else 0.0
    return LevelMetrics(
        {
            "median_ttft_ms": float(np.median(ttft)) if ttft.size else None,
            "p90_ttft_ms": float(np.percentile(ttft, 90)) if ttft.size else None,
            "median_tpot_ms": float(np.median(tpot)) if tpot.size else None,
            "p90_tpot_ms": float(np.percentile(tpot, 90)) if tpot.size else None,
            "median_e2e_latency_ms": float(np.median(e2e)),
            "output_throughput": float(output.sum()) * per_s,
            "total_throughput": float(output.sum() + prompt.sum()) * per_s,
        }
    )
