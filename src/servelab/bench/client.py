"""The streaming request function: sends one request and records what happened.

It never raises for a failed request: refused connections, HTTP errors, timeouts,
stalls, dropped or malformed streams all come back as a `RequestRecord` with `ok=False`
and the reason, so one bad request never ends a run. The transport's exceptions are
translated here and nowhere else. A streamed body is decoded in the transport's
callback, as its bytes arrive, so each chunk's offset is its arrival.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson

from servelab.bench.endpoint import Api, EndpointConfig, RequestItem, build_body
from servelab.bench.records import ErrorKind, RequestRecord
from servelab.bench.response import ResponseState
from servelab.bench.sse import SSEDecoder
from servelab.bench.transport import (
    BadResponse,
    ConnectFailed,
    ConnectionCut,
    ConnectionPool,
    Stalled,
    Target,
    request_head,
)
from servelab.core.clock import now_ns

__all__ = ["request_id", "send_request"]

_ERROR_BODY_CHARS = 300


def request_id(level: int, index: int, *, warmup: bool) -> str:
    """The X-Request-Id sent with a request, so server logs and truth logs can be joined."""
    return f"servelab-{level}-{'w' if warmup else 'm'}{index}"


async def send_request(
    pool: ConnectionPool,
    target: Target,
    endpoint: EndpointConfig,
    item: RequestItem,
    *,
    index: int,
    level: int,
    warmup: bool,
    worker: int,
    t_scheduled_ns: int,
    count_tokens: Callable[[str], int] | None = None,
    reply: list[str] | None = None,
) -> RequestRecord:
    """Send `item` to `target` (the endpoint's URL, parsed) and return its record.

    `count_tokens` counts output when usage is absent; `reply`, where given, receives the
    generated text (a conversation sends it back in its next turn).
    """
    body = orjson.dumps(build_body(endpoint, item))
    headers = {
        "Content-Type": "application/json",
        "X-Request-Id": request_id(level, index, warmup=warmup),
        **endpoint.headers,
    }
    head = request_head(target, headers, len(body))
    t_start_ns = now_ns()
    t_send_ns, connect_ns = 0, 0
    state = ResponseState()
    try:
        async with asyncio.timeout(endpoint.timeout_s):
            exchange = await pool.post(target, head, body, stall_s=endpoint.stall_timeout_s)
            t_send_ns, connect_ns = exchange.t_send_ns, exchange.connect_ns
            if exchange.status >= 300:
                text = (await exchange.read()).decode("utf-8", "replace")
                state.fail(
                    ErrorKind.HTTP,
                    f"HTTP {exchange.status}: {text[:_ERROR_BODY_CHARS]}"
                    + _redirect_note(exchange.status, exchange.headers),
                    status=exchange.status,
                )
            elif endpoint.stream:
                decoder = SSEDecoder()
                await exchange.stream(_stream_sink(decoder, state, endpoint.api, t_send_ns))
                for payload in decoder.close():
                    state.take_event(payload, endpoint.api, now_ns() - t_send_ns)
            else:
                state.take_body(await exchange.read(), endpoint.api)
    except ConnectFailed as exc:
        state.fail(ErrorKind.UNREACHABLE, str(exc))
    except Stalled as exc:
        state.fail(ErrorKind.STALL, str(exc))
    except TimeoutError:
        state.fail(ErrorKind.TIMEOUT, f"request took longer than {endpoint.timeout_s:g} s")
    except ConnectionCut as exc:
        state.fail(ErrorKind.DROPPED, str(exc))
    except BadResponse as exc:
        state.fail(ErrorKind.MALFORMED, str(exc))
    except asyncio.CancelledError:
        state.fail(ErrorKind.CANCELLED, "run interrupted")
    t_end_ns = now_ns()
    if reply is not None:
        reply.extend(state.texts)
    return state.to_record(
        index=index,
        level=level,
        warmup=warmup,
        worker=worker,
        t_send_ns=t_send_ns or t_start_ns,
        t_scheduled_ns=t_scheduled_ns,
        connect_ns=connect_ns,
        t_end_ns=t_end_ns,
        item=item,
        stream=endpoint.stream,
        count_tokens=count_tokens,
    )


def _stream_sink(
    decoder: SSEDecoder, state: ResponseState, api: Api, t_send_ns: int
) -> Callable[[bytes, int], bool]:
    """Decode each piece of body where it arrives; stop at the first failure."""

    def sink(data: bytes, t_ns: int) -> bool:
        offset_ns = t_ns - t_send_ns
        for payload in decoder.feed(data):
            state.take_event(payload, api, offset_ns)
            if state.error_kind is not None:
                return True
        return False

    return sink


def _redirect_note(status: int, headers: dict[str, str]) -> str:
    if status >= 400 or "location" not in headers:
        return ""
    return f" (a redirect to {headers['location']}, not followed: give that URL instead)"
