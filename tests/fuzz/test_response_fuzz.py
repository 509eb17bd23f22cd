"""The response state machine, fuzzed: any events give a record, never an exception."""

from __future__ import annotations

import json

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.bench.endpoint import Api, RequestItem
from servelab.bench.load import LevelSpec, LoadMode
from servelab.bench.metrics import WorkerStats, compute_level
from servelab.bench.records import RequestRecord
from servelab.bench.response import ResponseState
from servelab.bench.sse import SSEDecoder

ITEM = RequestItem(prompt="p", max_tokens=16)
LEVEL = LevelSpec(
    index=0, mode=LoadMode.CONCURRENCY, value=1, num_requests=1, duration_s=None, warmup=0
)
WORKERS = [WorkerStats(worker=0, loop_lag_p99_ns=0, loop_lag_max_ns=0, cpu_s=0.0, wall_s=1.0)]


def _dumps(value: object) -> bytes:
    """JSON as a server might write it: integers of any size, Infinity where floats overflow."""
    return json.dumps(value).encode()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)
# Any value where a field is expected, but often the right kind of value.
texts = st.none() | st.text(max_size=6) | json_values
counts = st.none() | st.integers(min_value=-2, max_value=2**64) | json_values
finish_reasons = st.none() | st.sampled_from(["stop", "length", "abort", ""]) | json_values
messages = st.fixed_dictionaries(
    {},
    optional={
        "content": texts,
        "reasoning_content": texts,
        "reasoning": texts,
        "role": st.just("assistant"),
    },
)
choices = st.fixed_dictionaries(
    {},
    optional={
        "delta": messages | json_values,
        "message": messages | json_values,
        "text": texts,
        "finish_reason": finish_reasons,
        "index": counts,
    },
)
usages = (
    st.fixed_dictionaries({}, optional={"completion_tokens": counts, "prompt_tokens": counts})
    | json_values
)
events = st.fixed_dictionaries(
    {},
    optional={
        "choices": st.lists(choices | json_values, max_size=2) | json_values,
        "usage": usages,
        "error": json_values,
        "object": st.sampled_from(["chat.completion.chunk", "error"]),
        "message": texts,
        "code": counts,
    },
)
payloads = (
    events.map(_dumps)
    | json_values.map(_dumps)
    | st.sampled_from([b"[DONE]", b"", b" ", b"{", b"null"])
    | st.binary(max_size=20)
)


def check(record: RequestRecord) -> None:
    """A record that holds together, that the metrics and requests.jsonl can take."""
    assert record.ok == (record.error_kind is None)
    assert record.ok or record.error
    if record.chunk_tokens is not None:
        assert len(record.chunk_tokens) == len(record.chunk_offsets_ns)
        assert min(record.chunk_tokens) >= 1 and sum(record.chunk_tokens) == record.output_tokens
    assert record.chunk_offsets_ns == sorted(record.chunk_offsets_ns)
    line = orjson.dumps(record.to_json())
    assert RequestRecord.from_json(orjson.loads(line)) == record
    summary = compute_level([record], level=LEVEL, workers=WORKERS)
    assert summary.completed + summary.failed == 1


def finish(state: ResponseState, *, stream: bool) -> RequestRecord:
    return state.to_record(
        item=ITEM,
        stream=stream,
        count_tokens=None,
        index=0,
        level=0,
        warmup=False,
        worker=0,
        t_send_ns=0,
        t_scheduled_ns=0,
        connect_ns=0,
        t_end_ns=10**9,
    )


@settings(max_examples=500, deadline=None)
@given(sequence=st.lists(payloads, max_size=8), api=st.sampled_from(Api))
def test_any_event_sequence_gives_a_record_or_a_classified_failure(sequence, api):
    state = ResponseState()
    for i, payload in enumerate(sequence):
        state.take_event(payload, api, (i + 1) * 1_000_000)
    check(finish(state, stream=True))


@settings(max_examples=300, deadline=None)
@given(payload=payloads, api=st.sampled_from(Api))
def test_any_body_gives_a_record_or_a_classified_failure(payload, api):
    state = ResponseState()
    state.take_body(payload, api)
    check(finish(state, stream=False))


@settings(max_examples=300, deadline=None)
@given(stream=st.lists(payloads, max_size=6), cut=st.integers(min_value=1, max_value=7))
def test_any_byte_stream_through_the_decoder_gives_a_record(stream, cut):
    """The whole path a streamed response takes: bytes, SSE events, the state machine."""
    raw = b"".join(b"data: " + p + b"\n\n" for p in stream)
    decoder, state = SSEDecoder(), ResponseState()
    for i in range(0, len(raw), cut):
        for payload in decoder.feed(raw[i : i + cut]):
            state.take_event(payload, Api.CHAT, (i + 1) * 1_000)
    for payload in decoder.close():
        state.take_event(payload, Api.CHAT, len(raw) * 1_000)
    check(finish(state, stream=True))
