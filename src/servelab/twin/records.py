"""A run's requests as the twin reads them: each one's times on one clock, its sizes and
the level and workload it belonged to. A streamed request has its chunks' times; one
answered whole has only its end.

Times are seconds from the run's first send, so a fit and a replay never handle the raw
`perf_counter_ns` stamps. Failed and cancelled requests are kept out: they say nothing
of a step's length, and the replay would not know how long to run them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from servelab.core.units import NS_PER_S

__all__ = ["LevelLoad", "RequestTimeline", "timelines"]


@dataclass(frozen=True, slots=True)
class LevelLoad:
    """How a level sent its requests: N in flight (closed loop) or at planned times."""

    index: int
    mode: str
    """"concurrency" or "request_rate" (open loop and trace replay: sent when planned)."""
    value: float
    duration_s: float | None = None
    """A level that sent for a set time (`--duration`): no request starts later than this
    after its first send. None: the level sent the requests it recorded, however long."""


@dataclass(frozen=True, slots=True)
class RequestTimeline:
    """One completed request: when it was sent and due, when each chunk arrived (none for an
    answer sent whole) and when it ended."""

    level: int
    index: int
    warmup: bool
    scheduled_s: float
    send_s: float
    chunk_s: np.ndarray
    """Arrival of each chunk carrying generated text; empty when not streamed."""
    end_s: float
    """The last chunk, or the whole answer's arrival."""
    chunk_tokens: np.ndarray
    """Tokens each chunk carried (1 each where the stream did not say)."""
    output_tokens: int
    """The server's count (usage), else the chunks' sum."""
    prompt_tokens: int
    shared_tokens: int
    session: int | None
    turn: int | None

    @property
    def streamed(self) -> bool:
        return self.chunk_s.size > 0

    @property
    def first_s(self) -> float:
        """The first chunk; the end for an answer sent whole."""
        return float(self.chunk_s[0]) if self.streamed else self.end_s

    @property
    def last_s(self) -> float:
        return self.end_s

    @property
    def ttft_s(self) -> float:
        return self.first_s - self.send_s


def timelines(rows: Iterable[Mapping[str, Any]]) -> list[RequestTimeline]:
    """The completed, streamed requests among requests.jsonl's rows, on a clock from the
    first send."""
    kept = [row for row in rows if _usable(row)]
    if not kept:
        return []
    origin = min(int(row["t_send_ns"]) for row in kept)
    out = []
    for row in kept:
        send = int(row["t_send_ns"])
        offsets = np.asarray(row["chunk_offsets_ns"], dtype=np.int64)
        counts = row.get("chunk_tokens")
        tokens = (
            np.ones(offsets.size, dtype=np.int64)
            if counts is None
            else np.maximum(np.asarray(counts, dtype=np.int64), 0)
        )
        prompt = row.get("prompt_tokens") or row.get("input_tokens_target") or 1
        out.append(
            RequestTimeline(
                level=int(row["level"]),
                index=int(row["index"]),
                warmup=bool(row.get("warmup")),
                scheduled_s=(int(row.get("t_scheduled_ns") or send) - origin) / NS_PER_S,
                send_s=(send - origin) / NS_PER_S,
                chunk_s=(send - origin + offsets) / NS_PER_S,
                end_s=(
                    (send - origin + int(offsets[-1])) / NS_PER_S
                    if offsets.size
                    else (int(row["t_end_ns"]) - origin) / NS_PER_S
                ),
                chunk_tokens=tokens,
                output_tokens=int(row.get("output_tokens") or tokens.sum()),
                prompt_tokens=int(prompt),
                shared_tokens=int(row.get("shared_tokens") or 0),
                session=row.get("session"),
                turn=row.get("turn"),
            )
        )
    out.sort(key=lambda r: r.send_s)
    return out


def _usable(row: Mapping[str, Any]) -> bool:
    return bool(row.get("ok")) and "t_send_ns" in row and "t_end_ns" in row
