"""When each chunk of a request is due: the one decision an engine model makes.

The scheduler asks a `TimingSource` for the due time of a stream's next chunk after
sending the previous one, so a model-driven source (continuous batching, a running-request
cap) can answer from the state of the whole batch. `FixedTiming` is the ground truth used
by the load generator's fidelity tests: due times are absolute, so they never drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from servelab.core.clock import NS_PER_MS

__all__ = ["FixedTiming", "TimedRequest", "TimingSource"]


@dataclass(frozen=True, slots=True)
class TimedRequest:
    """What a timing source may base its answer on."""

    t_recv_ns: int
    prompt_tokens: int
    completion_tokens: int
    n_chunks: int


class TimingSource(Protocol):
    """Says when chunk `chunk_index` (0-based) of a request is due, in perf_counter ns."""

    def due_ns(self, request: TimedRequest, chunk_index: int) -> int:
        """The due time of one chunk; called in chunk order, once per chunk."""
        ...


@dataclass(frozen=True, slots=True)
class FixedTiming:
    """Chunk k is due at t_recv + ttft + k * itl, whatever else is in flight."""

    ttft_ns: int
    itl_ns: int

    @classmethod
    def from_ms(cls, *, ttft_ms: float, itl_ms: float) -> FixedTiming:
        return cls(ttft_ns=round(ttft_ms * NS_PER_MS), itl_ns=round(itl_ms * NS_PER_MS))

    def due_ns(self, request: TimedRequest, chunk_index: int) -> int:
        return request.t_recv_ns + self.ttft_ns + chunk_index * self.itl_ns
