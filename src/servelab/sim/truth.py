"""The truth log: what the simulator did to each request, on the client's clock.

Stamps are `time.perf_counter_ns()` (CLOCK_MONOTONIC), so a load generator in another
process of the same machine can line its own stamps up against them. One JSON line per
request (a `TruthRecord`), written when the request ends; lines are buffered and
flushed at least every `FLUSH_INTERVAL_S` and on close, so a reader sees every finished
request once the server has stopped.
"""

from __future__ import annotations

import asyncio
from enum import StrEnum
from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict, Field

from servelab.sim.faults import Fault

__all__ = ["FLUSH_INTERVAL_S", "Outcome", "TruthLog", "TruthRecord", "read_truth"]

FLUSH_INTERVAL_S = 0.5


class Outcome(StrEnum):
    """How a request ended, from the server's side."""

    COMPLETE = "complete"
    REJECTED = "rejected"
    """Answered 4xx: a rejected field or an invalid body."""
    FAILED = "failed"
    """Answered 500: the fail fault, or a non-streamed answer holding a NaN logprob
    (the nan-logprobs corruption), which vLLM cannot encode."""
    DROPPED = "dropped"
    """Connection aborted mid-stream by the drop fault."""
    DISCONNECTED = "client_disconnected"
    STOPPED = "server_stopped"


class TruthRecord(BaseModel):
    """One request as the server saw and answered it."""

    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(description="The client's X-Request-Id, else one generated.")
    endpoint: str = Field(description="Request path, e.g. /v1/chat/completions.")
    stream: bool
    status: int = Field(description="HTTP status sent (0 when none was).")
    fault: Fault
    outcome: Outcome
    t_recv_ns: int = Field(description="Handler entered, before the body was read.")
    t_done_ns: int = Field(description="Last byte written, connection aborted, or given up.")
    prompt_tokens: int
    cached_tokens: int = Field(
        default=0, description="Prompt tokens the prefix cache supplied when it started."
    )
    completion_tokens: int = Field(description="Output tokens actually sent.")
    tokens_per_chunk: int
    chunk_sent_ns: list[int] = Field(
        default_factory=list, description="Send time of every text chunk written."
    )
    chunk_lag_ns: list[int] = Field(
        default_factory=list, description="Per text chunk: send time minus due time."
    )


class TruthLog:
    """Appends records to a JSONL file from the event loop, without blocking per record."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("wb")
        self._pending: list[bytes] = []
        self._timer: asyncio.TimerHandle | None = None

    def add(self, **fields: object) -> None:
        """Queue one record, given as TruthRecord's fields; it reaches the file soon.

        Takes the fields rather than a TruthRecord because building and dumping the model
        costs several times what orjson needs for a thousand stamps, once per request.
        """
        if self._file.closed:
            return
        self._pending.append(orjson.dumps(fields, option=orjson.OPT_APPEND_NEWLINE))
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(FLUSH_INTERVAL_S, self._flush)

    def close(self) -> None:
        """Flush and close; records added later are dropped."""
        if self._timer is not None:
            self._timer.cancel()
        self._flush()
        self._file.close()

    def _flush(self) -> None:
        self._timer = None
        if self._pending:
            self._file.write(b"".join(self._pending))
            self._pending.clear()
            self._file.flush()


def read_truth(path: Path) -> list[TruthRecord]:
    """Every record of a truth log, in the order requests ended (worker by worker)."""
    with path.open("rb") as lines:
        return [TruthRecord.model_validate_json(line) for line in lines if line.strip()]
