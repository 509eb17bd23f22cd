"""The per-request record: everything one request observed, on the monotonic clock.

A request never raises: whatever happens to it ends up here, `ok=False` with an
`error_kind` when it failed. Times are raw `perf_counter_ns` stamps; units are converted
once, in `servelab.bench.metrics`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["ErrorKind", "OutputTokenSource", "RequestRecord"]


class ErrorKind(StrEnum):
    """Why a request failed; the summary counts each kind."""

    UNREACHABLE = "unreachable"
    """No connection could be made."""
    HTTP = "http"
    """The server answered with a 4xx/5xx status, or a 3xx redirect (not followed)."""
    TIMEOUT = "timeout"
    """The whole request took longer than --timeout."""
    STALL = "stall"
    """No byte arrived for --stall-timeout."""
    DROPPED = "dropped"
    """The connection was cut before the response was complete."""
    MALFORMED = "malformed"
    """An SSE event or JSON body could not be parsed, or is JSON of the wrong shape."""
    SERVER_ERROR = "server_error"
    """The stream carried an error object instead of a completion."""
    ABORTED = "aborted"
    """The server ended the response with finish_reason "abort"."""
    INCOMPLETE = "incomplete"
    """The stream ended cleanly but without a finish reason or [DONE]."""
    EMPTY = "empty"
    """The response completed without any generated text."""
    CANCELLED = "cancelled"
    """Still in flight when the run was interrupted; not counted as a failure."""
    ENGINE_DIED = "engine_died"
    """The engine servelab launched had exited: the request failed with it, or was cut."""
    CLIENT_LOST = "client_lost"
    """In flight on a client node (a Ray cluster's) that was lost: its outcome is unknown."""


class OutputTokenSource(StrEnum):
    """Where a request's output token count came from, best first."""

    USAGE = "usage"
    TOKENIZER = "tokenizer"
    CHUNKS = "chunks"


@dataclass(slots=True)
class RequestRecord:
    """One request, as the client saw it."""

    index: int
    """Position in the level's request list (warm-up requests count separately)."""
    level: int
    warmup: bool
    worker: int
    t_send_ns: int
    """When the request's bytes went to the connection."""
    t_scheduled_ns: int
    """When the request was due: its open-loop arrival time, or when its closed-loop slot freed."""
    t_end_ns: int
    """When the response was complete (or the failure was noticed)."""
    ok: bool
    max_tokens: int
    connect_ns: int = 0
    """Time spent opening a new connection for this request; 0 when one was reused."""
    input_tokens_target: int | None = None
    """Prompt tokens the workload asked for (counted locally or calibrated)."""
    session: int | None = None
    """A conversation's session number; None outside conversations."""
    turn: int | None = None
    """The turn of that session, from 0."""
    shared_tokens: int = 0
    """Leading prompt tokens repeating an earlier request's prompt (the workload's own count)."""
    chunk_offsets_ns: list[int] = field(default_factory=list)
    """Arrival of each chunk carrying generated text, relative to t_send_ns."""
    chunk_tokens: list[int] | None = None
    """Tokens carried by each text chunk; None when every chunk counts as one."""
    chunk_tokens_estimated: bool = False
    """True when output_tokens differs from the text chunks, so chunk_tokens is a share."""
    output_tokens: int = 0
    output_token_source: OutputTokenSource = OutputTokenSource.CHUNKS
    prompt_tokens: int | None = None
    """The server's usage.prompt_tokens, when it sent usage."""
    finish_reason: str | None = None
    error_kind: ErrorKind | None = None
    error: str | None = None
    http_status: int | None = None

    @property
    def ttft_ns(self) -> int | None:
        """First chunk carrying generated text minus t_send; None without one."""
        return self.chunk_offsets_ns[0] if self.chunk_offsets_ns else None

    @property
    def e2e_ns(self) -> int:
        """Last text chunk minus t_send; a non-streamed response ends when its body does."""
        return (
            self.chunk_offsets_ns[-1] if self.chunk_offsets_ns else self.t_end_ns - self.t_send_ns
        )

    def to_json(self) -> dict[str, Any]:
        """A plain dict for requests.jsonl (enums as their values)."""
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestRecord:
        """Inverse of to_json; tolerates records written by a newer servelab."""
        known = {name: data[name] for name in cls.__slots__ if name in data}
        if known.get("error_kind") is not None:
            known["error_kind"] = ErrorKind(known["error_kind"])
        known["output_token_source"] = OutputTokenSource(
            known.get("output_token_source", OutputTokenSource.CHUNKS)
        )
        return cls(**known)
