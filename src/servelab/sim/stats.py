"""Live counters of one simulator process, served at GET /sim/stats.

With several workers each keeps its own; /sim/stats answers for the one that got the
connection.

Send lag (a chunk's send time minus its due time) is kept in a fixed histogram rather
than a list, so a long benchmark costs no memory and a chunk costs one increment. In
batching mode step lag (a step's end handled minus its planned end) is kept the same way.
The prompt tokens looked up in the prefix cache and hit there are counted when a request
starts (vLLM records them at admission).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from pydantic import BaseModel, Field

from servelab.core.clock import NS_PER_MS, NS_PER_S, now_ns

__all__ = ["EngineLoad", "LagHistogram", "SimCounters", "SimStats"]

FINE_BIN_NS = 10_000
"""Lags under FINE_LIMIT_NS are binned to 10 µs."""
FINE_LIMIT_NS = 20_000_000
COARSE_BIN_NS = NS_PER_MS
"""Larger lags (an overloaded server) to 1 ms, up to 2 s; beyond that they share a bin."""
FINE_BINS = FINE_LIMIT_NS // FINE_BIN_NS
COARSE_BINS = 2_000


class SimStats(BaseModel):
    """A snapshot of what the simulator has done since it started."""

    worker: int = Field(description="Which worker process answered (0 with one worker).")
    uptime_s: float
    requests_total: int = Field(description="Generation requests received.")
    requests_active: int = Field(description="Generation requests not yet answered in full.")
    requests_by_outcome: dict[str, int]
    faults_injected: dict[str, int]
    chunks_sent: int = Field(description="Text chunks written.")
    tokens_sent: int = Field(description="Output tokens in those chunks.")
    send_lag_p50_ms: float = Field(description="Median of send time minus due time.")
    send_lag_p99_ms: float
    send_lag_max_ms: float
    requests_running: int = Field(description="Requests generating (started, not yet done).")
    requests_waiting: int = Field(description="Requests queued for a running slot.")
    kv_used_tokens: int = Field(description="Tokens held in the KV cache (prompt + output).")
    steps: int = Field(description="Batching: engine steps completed.")
    step_lag_p50_ms: float = Field(
        description="Batching: median of a step's end handled minus its planned end."
    )
    step_lag_p99_ms: float
    step_lag_max_ms: float
    prefix_cache_queried_tokens: int = Field(
        description="Prompt tokens of started requests looked up in the prefix cache."
    )
    prefix_cache_hit_tokens: int = Field(
        description="Of those, the tokens the cache supplied (in whole blocks)."
    )
    prefix_cache_tokens: int = Field(description="Tokens in cached blocks now, pinned or free.")
    prefix_cache_evicted_tokens: int = Field(description="Tokens in blocks evicted so far.")


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """What the engine holds right now; the prefix cache's blocks, and those it evicted,
    in tokens."""

    running: int
    waiting: int
    kv_used_tokens: int = 0
    kv_capacity_tokens: int | None = None
    cached_tokens: int = 0
    evicted_tokens: int = 0


class LagHistogram:
    """Counts of send lags in fine then coarse bins; negative lags count as zero.

    Few enough bins (4,000) that a quantile is a fraction of a millisecond to compute,
    so serving /sim/stats does not itself delay chunks.
    """

    def __init__(self) -> None:
        self.bins = [0] * (FINE_BINS + COARSE_BINS)
        self.count = 0
        self.max_ns = 0

    def add(self, lag_ns: int) -> None:
        """Count one lag."""
        if lag_ns < FINE_LIMIT_NS:
            self.bins[max(lag_ns, 0) // FINE_BIN_NS] += 1
        else:
            coarse = (lag_ns - FINE_LIMIT_NS) // COARSE_BIN_NS
            self.bins[FINE_BINS + min(coarse, COARSE_BINS - 1)] += 1
        self.count += 1
        if lag_ns > self.max_ns:
            self.max_ns = lag_ns

    def quantile_ns(self, q: float) -> int:
        """Upper edge of the bin holding quantile q, capped at the maximum (0 if empty)."""
        if self.count == 0:
            return 0
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for index, count in enumerate(self.bins):
            seen += count
            if seen >= rank:
                return min(_upper_edge_ns(index), self.max_ns)
        return self.max_ns


def _upper_edge_ns(index: int) -> int:
    if index < FINE_BINS:
        return (index + 1) * FINE_BIN_NS
    return FINE_LIMIT_NS + (index - FINE_BINS + 1) * COARSE_BIN_NS


class SimCounters:
    """Mutable counters updated by the server as it works."""

    def __init__(self, *, worker: int = 0) -> None:
        self.worker = worker
        self.started_ns = now_ns()
        self.requests_total = 0
        self.requests_active = 0
        self.outcomes: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.chunks_sent = 0
        self.tokens_sent = 0
        self.prompt_tokens = 0
        """Prompt tokens of requests whose first token has been sent."""
        self.lag = LagHistogram()
        self.steps = 0
        self.step_lag = LagHistogram()
        self.prefix_queried_tokens = 0
        """Prompt tokens looked up in the prefix cache (none while it is off)."""
        self.prefix_hit_tokens = 0
        self.prefill_computed_tokens = 0
        """Prompt tokens prefilled, the cache's hits not included."""
        self.decode_tokens = 0
        """Output tokens from decoding (a request's first comes from its prefill)."""
        self.prefill_hit_rate = 0.0
        """Hit share of the prompt tokens of the latest prefill: hits / (hits + computed)."""

    def count_prefill(self, *, queried: int, hit: int, computed: int) -> None:
        """Count a prefill: prompt tokens looked up and hit in the cache by the requests
        it starts, and the prompt tokens it computes (some may be those of earlier starts)."""
        self.prefix_queried_tokens += queried
        self.prefix_hit_tokens += hit
        self.prefill_computed_tokens += computed
        if hit + computed:
            self.prefill_hit_rate = hit / (hit + computed)

    def snapshot(self, load: EngineLoad) -> SimStats:
        """The counters now, with lags in milliseconds."""
        return SimStats(
            worker=self.worker,
            uptime_s=(now_ns() - self.started_ns) / NS_PER_S,
            requests_total=self.requests_total,
            requests_active=self.requests_active,
            requests_by_outcome=dict(self.outcomes),
            faults_injected=dict(self.faults),
            chunks_sent=self.chunks_sent,
            tokens_sent=self.tokens_sent,
            send_lag_p50_ms=self.lag.quantile_ns(0.50) / NS_PER_MS,
            send_lag_p99_ms=self.lag.quantile_ns(0.99) / NS_PER_MS,
            send_lag_max_ms=self.lag.max_ns / NS_PER_MS,
            requests_running=load.running,
            requests_waiting=load.waiting,
            kv_used_tokens=load.kv_used_tokens,
            steps=self.steps,
            step_lag_p50_ms=self.step_lag.quantile_ns(0.50) / NS_PER_MS,
            step_lag_p99_ms=self.step_lag.quantile_ns(0.99) / NS_PER_MS,
            step_lag_max_ms=self.step_lag.max_ns / NS_PER_MS,
            prefix_cache_queried_tokens=self.prefix_queried_tokens,
            prefix_cache_hit_tokens=self.prefix_hit_tokens,
            prefix_cache_tokens=load.cached_tokens,
            prefix_cache_evicted_tokens=load.evicted_tokens,
        )
