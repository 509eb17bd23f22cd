"""The streaming request function: sends one request and records what happened.

It never raises for a failed request: refused connections, HTTP errors, timeouts,
stalls, dropped or malformed streams all come back as a `RequestRecord` with `ok=False`
and the reason, so one bad request never ends a run. aiohttp's exceptions are
translated here and nowhere else.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import aiohttp
import orjson

from servelab.bench.endpoint import Api, EndpointConfig, RequestItem, build_body
from servelab.bench.records import ErrorKind, OutputTokenSource, RequestRecord
from servelab.bench.sse import SSEDecoder
from servelab.core.clock import now_ns

__all__ = ["make_trace_config", "request_id", "send_request", "split_tokens_over_chunks"]

_ERROR_BODY_CHARS = 300


def request_id(level: int, index: int, *, warmup: bool) -> str:
    """The X-Request-Id sent with a request, so server logs and truth logs can be joined."""
    return f"servelab-{level}-{'w' if warmup else 'm'}{index}"


def make_trace_config() -> aiohttp.TraceConfig:
    """Stamps t_send when the request headers reach the connection."""

    async def on_headers_sent(
        _session: aiohttp.ClientSession, ctx: SimpleNamespace, _params: object
    ) -> None:
        stamp = ctx.trace_request_ctx
        if stamp is not None and stamp.t_send_ns is None:
            stamp.t_send_ns = now_ns()

    async def on_connect_start(
        _session: aiohttp.ClientSession, ctx: SimpleNamespace, _params: object
    ) -> None:
        if ctx.trace_request_ctx is not None:
            ctx.trace_request_ctx.t_connect_ns = now_ns()

    async def on_connect_end(
        _session: aiohttp.ClientSession, ctx: SimpleNamespace, _params: object
    ) -> None:
        stamp = ctx.trace_request_ctx
        if stamp is not None and stamp.t_connect_ns is not None:
            stamp.connect_ns = now_ns() - stamp.t_connect_ns

    trace = aiohttp.TraceConfig()
    trace.on_request_headers_sent.append(on_headers_sent)
    trace.on_connection_create_start.append(on_connect_start)
    trace.on_connection_create_end.append(on_connect_end)
    return trace


class _Stamp:
    """Filled in by the trace hooks while aiohttp sends the request."""

    __slots__ = ("connect_ns", "t_connect_ns", "t_send_ns")

    def __init__(self) -> None:
        self.t_send_ns: int | None = None
        self.t_connect_ns: int | None = None
        self.connect_ns = 0


async def send_request(
    session: aiohttp.ClientSession,
    endpoint: EndpointConfig,
    item: RequestItem,
    *,
    index: int,
    level: int,
    warmup: bool,
    worker: int,
    t_scheduled_ns: int,
    count_tokens: Callable[[str], int] | None = None,
) -> RequestRecord:
    """Send `item` and return its record; `count_tokens` counts output when usage is absent."""
    body = orjson.dumps(build_body(endpoint, item))
    headers = {
        "Content-Type": "application/json",
        "X-Request-Id": request_id(level, index, warmup=warmup),
        **endpoint.headers,
    }
    stamp = _Stamp()
    t_start_ns = now_ns()
    state = _ResponseState()
    try:
        async with asyncio.timeout(endpoint.timeout_s):
            async with session.post(
                endpoint.url,
                data=body,
                headers=headers,
                trace_request_ctx=stamp,
                timeout=aiohttp.ClientTimeout(total=None, sock_read=endpoint.stall_timeout_s),
            ) as response:
                t_send_ns = stamp.t_send_ns or t_start_ns
                if response.status >= 400:
                    text = (await response.read()).decode("utf-8", "replace")
                    state.fail(
                        ErrorKind.HTTP,
                        f"HTTP {response.status}: {text[:_ERROR_BODY_CHARS]}",
                        status=response.status,
                    )
                elif endpoint.stream:
                    await _read_stream(response, endpoint.api, t_send_ns, state)
                else:
                    _read_body(await response.read(), endpoint.api, state)
    except aiohttp.ClientConnectorError as exc:
        state.fail(ErrorKind.UNREACHABLE, f"cannot connect: {exc.os_error or exc}")
    except aiohttp.ServerTimeoutError:
        state.fail(ErrorKind.STALL, f"no data for {endpoint.stall_timeout_s:g} s")
    except TimeoutError:
        state.fail(ErrorKind.TIMEOUT, f"request took longer than {endpoint.timeout_s:g} s")
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
        state.fail(ErrorKind.DROPPED, f"connection cut mid-response: {type(exc).__name__}")
    except aiohttp.ClientError as exc:
        state.fail(ErrorKind.DROPPED, f"{type(exc).__name__}: {exc}")
    except asyncio.CancelledError:
        state.fail(ErrorKind.CANCELLED, "run interrupted")
    t_end_ns = now_ns()
    return state.to_record(
        index=index,
        level=level,
        warmup=warmup,
        worker=worker,
        t_send_ns=stamp.t_send_ns or t_start_ns,
        t_scheduled_ns=t_scheduled_ns,
        connect_ns=stamp.connect_ns,
        t_end_ns=t_end_ns,
        item=item,
        stream=endpoint.stream,
        count_tokens=count_tokens,
    )


class _ResponseState:
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


async def _read_stream(
    response: aiohttp.ClientResponse, api: Api, t_send_ns: int, state: _ResponseState
) -> None:
    decoder = SSEDecoder()
    async for data in response.content.iter_any():
        offset_ns = now_ns() - t_send_ns
        for payload in decoder.feed(data):
            state.take_event(payload, api, offset_ns)
            if state.error_kind is not None:
                return
    for payload in decoder.close():
        state.take_event(payload, api, now_ns() - t_send_ns)


def _read_body(raw: bytes, api: Api, state: _ResponseState) -> None:
    state.take_event(raw, api, None)
    state.done = True


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
