"""Which fault, if any, hits each request: seeded so a test can predict it.

Every accepted generation request draws the same two numbers from one
`random.Random(seed + worker)` in arrival order, so the decisions depend only on the seed
and the request's position in its worker, never on earlier outcomes. Requests rejected
before generation (422, 400) draw nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

from servelab.sim.config import SimConfig

__all__ = ["FAULT_WINDOW_CHUNKS", "NO_FAULT", "Fault", "FaultPicker", "FaultPlan"]

FAULT_WINDOW_CHUNKS = 4
"""Mid-stream faults strike after 1 to this many text chunks (fewer for short outputs)."""


class Fault(StrEnum):
    """The faults the simulator injects."""

    NONE = "none"
    FAIL = "fail"
    """HTTP 500 with a JSON error body instead of an answer."""
    DROP = "drop"
    """The connection is aborted mid-stream, leaving the chunked body incomplete."""
    MALFORMED = "malformed"
    """One broken SSE event is sent before a text chunk; the stream then goes on."""
    STALL = "stall"
    """Sending stops but the connection stays open until the client leaves."""


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """The fault for one request and the text chunk it strikes before."""

    kind: Fault
    at_chunk: int


NO_FAULT = FaultPlan(Fault.NONE, 0)


class FaultPicker:
    """Draws each request's fault from the configured rates."""

    def __init__(self, config: SimConfig, *, worker: int = 0) -> None:
        self._rng = random.Random(config.seed + worker)
        self._thresholds = (
            (Fault.FAIL, config.fail_rate),
            (Fault.DROP, config.drop_rate),
            (Fault.MALFORMED, config.malformed_rate),
            (Fault.STALL, config.stall_rate),
        )

    def pick(self, *, stream: bool, n_chunks: int) -> FaultPlan:
        """The next request's fault; drop and malformed need a stream, so others get none."""
        draw, where = self._rng.random(), self._rng.random()
        kind = Fault.NONE
        cumulative = 0.0
        for fault, rate in self._thresholds:
            cumulative += rate
            if draw < cumulative:
                kind = fault
                break
        if kind is Fault.NONE or (not stream and kind in (Fault.DROP, Fault.MALFORMED)):
            return NO_FAULT
        at_chunk = min(n_chunks - 1, 1 + int(where * FAULT_WINDOW_CHUNKS))
        return FaultPlan(kind, max(at_chunk, 0))
