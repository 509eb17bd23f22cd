"""send_request against a canned server: what real bytes on a real connection record."""

from __future__ import annotations

import asyncio

import orjson

from servelab.bench.client import send_request
from servelab.bench.endpoint import EndpointConfig, RequestItem
from servelab.bench.records import ErrorKind, RequestRecord
from servelab.bench.transport import ConnectionPool, Target

ITEM = RequestItem(prompt="hi", max_tokens=8)


def sse(event: dict | str, *, end: bytes = b"\n\n") -> bytes:
    data = event.encode() if isinstance(event, str) else orjson.dumps(event)
    return b"data: " + data + end


def chunk(text: str) -> dict:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


STOP = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}


def send(url: str) -> RequestRecord:
    async def main() -> RequestRecord:
        endpoint = EndpointConfig(base_url=url, model="m")
        pool = ConnectionPool()
        try:
            return await send_request(
                pool,
                Target.parse(endpoint.url),
                endpoint,
                ITEM,
                index=0,
                level=0,
                warmup=False,
                worker=0,
                t_scheduled_ns=0,
            )
        finally:
            await pool.close()

    return asyncio.run(main())


def test_flat_error_object_then_done_is_a_server_error(canned_server):
    error = {"object": "error", "message": "KV cache exhausted", "type": "x", "code": 503}
    canned_server.replies = [[sse(chunk("a")), sse(error), sse("[DONE]")]]
    record = send(canned_server.url)
    assert record.error_kind is ErrorKind.SERVER_ERROR
    assert record.error == "server error 503: KV cache exhausted"


def test_abort_finish_reason_is_a_failure(canned_server):
    abort = {"choices": [{"index": 0, "delta": {}, "finish_reason": "abort"}]}
    canned_server.replies = [[sse(chunk("a")), sse(abort), sse("[DONE]")]]
    record = send(canned_server.url)
    assert not record.ok and record.error_kind is ErrorKind.ABORTED


def test_wrong_shape_event_comes_back_as_a_malformed_record(canned_server):
    canned_server.replies = [[sse(chunk("a")), sse({"choices": [{"delta": "x"}]}), sse(STOP)]]
    record = send(canned_server.url)
    assert record.error_kind is ErrorKind.MALFORMED
    assert "delta is not an object" in (record.error or "")


def test_bom_lone_cr_line_ends_and_empty_keep_alive(canned_server):
    canned_server.replies = [
        [
            b"\xef\xbb\xbf" + sse(chunk("a"), end=b"\r\r"),
            b"data:\n\n",  # keep-alive: an event with empty data
            sse(chunk("b"), end=b"\r"),
            b"\r" + sse(STOP, end=b"\r\n\r\n"),
            sse("[DONE]"),
        ]
    ]
    record = send(canned_server.url)
    assert record.ok, record.error
    assert len(record.chunk_offsets_ns) == 2 and record.finish_reason == "stop"
