"""The response state machine: a response's events in, its request record out.

Streamed SSE payloads (or one non-streamed body) are applied in order; whatever they
hold, the outcome is a `RequestRecord`, completed or failed with a kind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from servelab.bench.endpoint import Api, RequestItem
from servelab.bench.records import ErrorKind, OutputTokenSource, RequestRecord

__all__ = ["ResponseState", "split_tokens_over_chunks"]


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
        if self.error_kind is None:
            self.error_kind, self.error, self.http_status = kind, message, status

    def take_event(self, payload: bytes, api: Api, offset_ns: int | None) -> None:
        """Apply one SSE event (or a whole non-streamed body when offset_ns is None)."""
        if payload.strip() == b"[DONE]":
            self.done = True
            return
        try:
            event: Any = orjson.loads(payload)
        except orjson.JSONDecodeError:
            self.fail(ErrorKind.MALFORMED, f"unparseable event: {payload[:80]!r}")
            return
        if not isinstance(event, dict):
            self.fail(ErrorKind.MALFORMED, f"event is not an object: {payload[:80]!r}")
            return
        if event.get("error") is not None and not event.get("choices"):
            self.fail(ErrorKind.SERVER_ERROR, f"server error: {str(event['error'])[:200]}")
            return
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.usage_completion = usage.get("completion_tokens", self.usage_completion)
            self.usage_prompt = usage.get("prompt_tokens", self.usage_prompt)
        for choice in event.get("choices") or ():
            text = _choice_text(choice, api, streamed=offset_ns is not None)
            if text:
                self.texts.append(text)
                if offset_ns is not None:
                    self.chunk_offsets_ns.append(offset_ns)
                    self.chunk_chars.append(len(text))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def to_record(
        self,
        *,
        item: RequestItem,
        stream: bool,
        count_tokens: Callable[[str], int] | None,
        **stamps: Any,
    ) -> RequestRecord:
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
            chunk_offsets_ns=self.chunk_offsets_ns,
            chunk_tokens=None
            if output_tokens == chunks or not chunks
            else split_tokens_over_chunks(output_tokens, self.chunk_chars),
            output_tokens=output_tokens,
            output_token_source=source,
            prompt_tokens=self.usage_prompt,
            finish_reason=self.finish_reason,
            error_kind=self.error_kind,
            error=self.error,
            http_status=self.http_status,
            **stamps,
        )

    def _output_tokens(
        self, count_tokens: Callable[[str], int] | None
    ) -> tuple[int, OutputTokenSource]:
        if self.usage_completion is not None:
            return int(self.usage_completion), OutputTokenSource.USAGE
        if count_tokens is not None and self.texts:
            return count_tokens("".join(self.texts)), OutputTokenSource.TOKENIZER
        return len(self.chunk_offsets_ns), OutputTokenSource.CHUNKS


def _choice_text(choice: dict[str, Any], api: Api, *, streamed: bool) -> str:
    """Generated text of one choice: content and reasoning both count."""
    if api is Api.COMPLETIONS:
        return choice.get("text") or ""
    message = choice.get("delta" if streamed else "message") or {}
    parts = (message.get("reasoning_content"), message.get("reasoning"), message.get("content"))
    return "".join(part for part in parts if isinstance(part, str))


def split_tokens_over_chunks(output_tokens: int, chunk_chars: list[int]) -> list[int]:
    """Share `output_tokens` over chunks in proportion to their text length.

    Used when the server's token count differs from the number of text chunks and it
    does not say how many tokens each chunk carried. Largest remainders keep the sum
    exact.
    """
    total_chars = sum(chunk_chars) or len(chunk_chars)
    weights = chunk_chars if sum(chunk_chars) else [1] * len(chunk_chars)
    exact = [output_tokens * w / total_chars for w in weights]
    shares = [int(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: exact[i] - shares[i], reverse=True)
    for i in by_remainder[: output_tokens - sum(shares)]:
        shares[i] += 1
    return shares
