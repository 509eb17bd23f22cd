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
    t_start_ns: int | None = None
    """When it began generating after waiting for a running slot; None: at t_recv_ns."""

    @property
    def start_ns(self) -> int:
        """When it began generating."""
        return self.t_recv_ns if self.t_start_ns is None else self.t_start_ns


class TimingSource(Protocol):
    """Says when chunk `chunk_index` (0-based) of a request is due, in perf_counter ns."""

    def due_ns(self, request: TimedRequest, chunk_index: int) -> int:
        """The due time of one chunk; called in chunk order, once per chunk."""
        ...


@dataclass(frozen=True, slots=True)
class FixedTiming:
    """Chunk k is due at start + ttft + k * itl, whatever else is in flight.

    The start is the receive time, or the time a running slot freed up for a request
    that had to wait for one.
    """

    ttft_ns: int
    itl_ns: int

    @classmethod
    def from_ms(cls, *, ttft_ms: float, itl_ms: float) -> FixedTiming:
        return cls(ttft_ns=round(ttft_ms * NS_PER_MS), itl_ns=round(itl_ms * NS_PER_MS))

    def due_ns(self, request: TimedRequest, chunk_index: int) -> int:
        start = request.t_start_ns  # not start_ns: this runs once per chunk sent
        begin = request.t_recv_ns if start is None else start
        return begin + self.ttft_ns + chunk_index * self.itl_ns
