"""A conversation level's metrics by turn: what the prefix cache changes from turn to turn.

Turn k of a session resends turns 0..k-1 and their replies, so its prompt grows with k;
an engine that reuses the history from its prefix cache prefills only the new turn, and
its TTFT stays near turn 0's. One without (or one whose cache evicted the history)
prefills everything again, and TTFT grows with the turn. Each turn index gets its own
statistics over the level's measured, completed requests.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from statistics import fmean

import numpy as np
from pydantic import BaseModel, Field

from servelab.bench.records import RequestRecord
from servelab.core.units import NS_PER_MS

__all__ = ["TurnStats", "turn_stats"]


class TurnStats(BaseModel):
    """The requests of one turn index of a conversation level."""

    turn: int = Field(description="Turn index in its session, from 0.")
    completed: int
    mean_input_tokens: float | None = Field(
        description="Mean prompt tokens (the history grows with the turn)."
    )
    mean_ttft_ms: float | None
    median_ttft_ms: float | None
    p99_ttft_ms: float | None
    mean_e2e_latency_ms: float | None


def turn_stats(records: Sequence[RequestRecord]) -> list[TurnStats] | None:
    """Statistics per turn index; None for a level that is not conversations."""
    by_turn: dict[int, list[RequestRecord]] = defaultdict(list)
    for record in records:
        if record.turn is not None and not record.warmup and record.ok:
            by_turn[record.turn].append(record)
    if not by_turn:
        return None
    return [_stats(turn, by_turn[turn]) for turn in sorted(by_turn)]


def _stats(turn: int, records: list[RequestRecord]) -> TurnStats:
    ttfts = [t / NS_PER_MS for r in records if (t := r.ttft_ns) is not None]
    inputs = [
        tokens for r in records if (tokens := r.prompt_tokens or r.input_tokens_target) is not None
    ]
    e2e = [r.e2e_ns / NS_PER_MS for r in records]
    return TurnStats(
        turn=turn,
        completed=len(records),
        mean_input_tokens=fmean(inputs) if inputs else None,
        mean_ttft_ms=fmean(ttfts) if ttfts else None,
        median_ttft_ms=float(np.median(ttfts)) if ttfts else None,
        p99_ttft_ms=float(np.percentile(ttfts, 99)) if ttfts else None,
        mean_e2e_latency_ms=fmean(e2e) if e2e else None,
    )
