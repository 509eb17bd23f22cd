"""The response state machine: a response's events in, its request record out.

Streamed SSE payloads (or one non-streamed body) are applied in order; whatever they
hold, the outcome is a `RequestRecord`, completed or failed with a kind. Nothing here
raises on what a server sent: an event that is not JSON, or JSON of the wrong shape, is
a `malformed` failure, and the first failure is the one recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from servelab.bench.endpoint import Api, RequestItem
from servelab.bench.records import ErrorKind, OutputTokenSource, RequestRecord

__all__ = ["INVISIBLE_SURPLUS_SHARE", "ResponseState", "split_tokens_over_chunks"]

INVISIBLE_SURPLUS_SHARE = 0.05
"""Tokens beyond one per chunk, up to this share of the chunk count, are attributed to no
gap: they are tokens the stream never showed (an EOS, a swallowed `<think>`)."""

_SHOWN_BYTES = 80


class _Malformed(Exception):
    """Valid JSON that is not of the shape the API defines."""


class ResponseState:
    """What has been learned about a response so far."""

    __slots__ = (
        "chunk_chars",
        "chunk_offsets_ns",
        "done",
        "error",
        "error_kind",
        "finish_reason",
        "http_status",
        "texts",
        "usage_completion",
        "usage_prompt",
    )

    def __init__(self) -> None:
        self.chunk_offsets_ns: list[int] = []
        self.chunk_chars: list[int] = []
        self.texts: list[str] = []
        self.finish_reason: str | None = None
        self.usage_completion: int | None = None
        self.usage_prompt: int | None = None
        self.done = False
        self.error_kind: ErrorKind | None = None
        self.error: str | None = None
        self.http_status: int | None = None

    def fail(self, kind: ErrorKind, message: str, *, status: int | None = None) -> None:
        """Record a failure; the first one stands."""
        if self.error_kind is None:
            self.error_kind, self.error, self.http_status = kind, message, status

    def take_event(self, payload: bytes, api: Api, offset_ns: int) -> None:
        """Apply one streamed SSE event that arrived `offset_ns` after t_send."""
        data = payload.strip()
        if not data:
            return  # an event with empty data: a keep-alive, not a completion chunk
        if data == b"[DONE]":
            self.done = True
            return
        self._apply(data, api, offset_ns)

    def take_body(self, payload: bytes, api: Api) -> None:
        """Apply a whole non-streamed response body."""
        self._apply(payload, api, None)
        self.done = True

    def to_record(
        self,
        *,
        item: RequestItem,
        stream: bool,
        count_tokens: Callable[[str], int] | None,
        **stamps: Any,
    ) -> RequestRecord:
        """The record of the response so far; a stream cut short is a failure."""
        if self.error_kind is None:
            if stream and not self.done and self.finish_reason is None:
                self.fail(ErrorKind.INCOMPLETE, "stream ended without a finish reason or [DONE]")
            elif not self.texts:
                self.fail(ErrorKind.EMPTY, "the response carried no generated text")
        output_tokens, source = self._output_tokens(count_tokens)
        chunks = len(self.chunk_offsets_ns)
        return RequestRecord(
            ok=self.error_kind is None,
            max_tokens=item.max_tokens,
            input_tokens_target=item.input_tokens,
            shared_tokens=item.shared_tokens,
            chunk_offsets_ns=self.chunk_offsets_ns,
            chunk_tokens=split_tokens_over_chunks(output_tokens, self.chunk_chars),
            chunk_tokens_estimated=chunks > 0 and output_tokens != chunks,
            output_tokens=output_tokens,
            output_token_source=source,
            prompt_tokens=self.usage_prompt,
            finish_reason=self.finish_reason,
            error_kind=self.error_kind,
            error=self.error,
            http_status=self.http_status,
            **stamps,
        )

    def _apply(self, data: bytes, api: Api, offset_ns: int | None) -> None:
        if self.error_kind is not None:
            return
        try:
            event: Any = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.fail(ErrorKind.MALFORMED, f"unparseable event: {data[:_SHOWN_BYTES]!r}")
            return
        try:
            self._apply_event(event, api, offset_ns)
        except _Malformed as exc:
            self.fail(ErrorKind.MALFORMED, f"{exc}: {data[:_SHOWN_BYTES]!r}")

    def _apply_event(self, event: Any, api: Api, offset_ns: int | None) -> None:
        if not isinstance(event, dict):
            raise _Malformed("event is not an object")
        if event.get("object") == "error" or (
            event.get("error") is not None and not event.get("choices")
        ):
            self.fail(ErrorKind.SERVER_ERROR, _error_message(event))
            return
        usage = event.get("usage")
        if usage is not None:
            if not isinstance(usage, dict):
                raise _Malformed("usage is not an object")
            self.usage_completion = _count(usage, "completion_tokens", self.usage_completion)
            self.usage_prompt = _count(usage, "prompt_tokens", self.usage_prompt)
        choices = event.get("choices")
        if choices is None:
            return
        if not isinstance(choices, list):
            raise _Malformed("choices is not a list")
        for choice in choices:
            if not isinstance(choice, dict):
                raise _Malformed("a choice is not an object")
            text = _choice_text(choice, api, streamed=offset_ns is not None)
            finish = _optional_str(choice, "finish_reason")
            if text:
                self.texts.append(text)
                if offset_ns is not None:
                    self.chunk_offsets_ns.append(offset_ns)
                    self.chunk_chars.append(len(text))
            if finish:
                self.finish_reason = finish
            if finish == "abort":
                self.fail(ErrorKind.ABORTED, "the server aborted the request (finish_reason abort)")

    def _output_tokens(
        self, count_tokens: Callable[[str], int] | None
    ) -> tuple[int, OutputTokenSource]:
        """usage, else a tokenizer, else one per text chunk (a whole body is one chunk)."""
        if self.usage_completion is not None:
            return self.usage_completion, OutputTokenSource.USAGE
        if count_tokens is not None and self.texts:
            return count_tokens("".join(self.texts)), OutputTokenSource.TOKENIZER
        return len(self.texts), OutputTokenSource.CHUNKS


def _error_message(event: dict[str, Any]) -> str:
    """The message of `{"error": {...}}`, `{"error": "..."}` or flat `{"object": "error"}`."""
    error = event.get("error")
    if isinstance(error, dict):
        message, code = error.get("message"), error.get("code")
    elif error is not None:
        message, code = error, event.get("code")
    else:
        message, code = event.get("message"), event.get("code")
    prefix = "server error" if code is None else f"server error {code}"
    return f"{prefix}: {str(message)[:200]}"


def _count(usage: dict[str, Any], key: str, current: int | None) -> int | None:
    value = usage.get(key)
    if value is None:
        return current
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Malformed(f"usage.{key} is not a token count")
    return value


def _optional_str(holder: dict[str, Any], key: str) -> str | None:
    value = holder.get(key)
    if value is not None and not isinstance(value, str):
        raise _Malformed(f"{key} is not a string")
    return value


def _choice_text(choice: dict[str, Any], api: Api, *, streamed: bool) -> str:
    """Generated text of one choice: reasoning (under either name, taken once) and content."""
    if api is Api.COMPLETIONS:
        return _optional_str(choice, "text") or ""
    key = "delta" if streamed else "message"
    message = choice.get(key)
    if message is None:
        return ""
    if not isinstance(message, dict):
        raise _Malformed(f"{key} is not an object")
    reasoning = _optional_str(message, "reasoning_content") or _optional_str(message, "reasoning")
    return (reasoning or "") + (_optional_str(message, "content") or "")


def split_tokens_over_chunks(output_tokens: int, chunk_chars: list[int]) -> list[int] | None:
    """Tokens per text chunk when the count differs from the chunks; None for one each.

    The stream does not say how many tokens each chunk carried. Every text chunk
    carries at least one; only the surplus is shared, in proportion to text length
    (largest remainders, so the sum is exact). A surplus within INVISIBLE_SURPLUS_SHARE
    of the chunk count, or a count below it, is attributed to no gap: a few unseen
    tokens must not double some gaps and skew every ITL percentile.
    """
    chunks = len(chunk_chars)
    surplus = output_tokens - chunks
    if not chunks or surplus <= INVISIBLE_SURPLUS_SHARE * chunks:
        return None
    weights = chunk_chars if any(chunk_chars) else [1] * chunks
    total = sum(weights)
    shares = [surplus * w // total for w in weights]
    by_remainder = sorted(range(chunks), key=lambda i: surplus * weights[i] % total, reverse=True)
    for i in by_remainder[: surplus - sum(shares)]:
        shares[i] += 1
    return [1 + share for share in shares]
