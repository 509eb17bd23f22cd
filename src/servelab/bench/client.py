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

import aiohttp
import orjson

from servelab.bench.endpoint import Api, EndpointConfig, RequestItem, build_body
from servelab.bench.records import ErrorKind, RequestRecord
from servelab.bench.response import ResponseState
from servelab.bench.sse import SSEDecoder
from servelab.core.clock import now_ns

__all__ = ["make_trace_config", "request_id", "send_request"]

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
    state = ResponseState()
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
                    state.take_body(await response.read(), endpoint.api)
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


async def _read_stream(
    response: aiohttp.ClientResponse, api: Api, t_send_ns: int, state: ResponseState
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
