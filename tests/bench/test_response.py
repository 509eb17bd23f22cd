"""The response state machine on hand-written event sequences: what each one records."""

from __future__ import annotations

import orjson
import pytest

from servelab.bench.endpoint import Api, RequestItem
from servelab.bench.load import LevelSpec, LoadMode
from servelab.bench.metrics import WorkerStats, compute_level
from servelab.bench.records import ErrorKind, OutputTokenSource, RequestRecord
from servelab.bench.response import ResponseState, split_tokens_over_chunks

MS = 1_000_000
ITEM = RequestItem(prompt="hi", max_tokens=16, input_tokens=1)
LEVEL = LevelSpec(
    index=0, mode=LoadMode.CONCURRENCY, value=1, num_requests=1, duration_s=None, warmup=0
)
WORKERS = [WorkerStats(worker=0, loop_lag_p99_ns=0, loop_lag_max_ns=0, cpu_s=0.0, wall_s=1.0)]


def delta(content: str | None = None, **fields: object) -> bytes:
    """One streamed chat chunk carrying `content` (and any other delta fields)."""
    message = {"content": content, **fields}
    return orjson.dumps({"choices": [{"index": 0, "delta": message, "finish_reason": None}]})


def finish(reason: str = "stop", usage: dict | None = None) -> bytes:
    event: dict = {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}
    if usage is not None:
        event["usage"] = usage
    return orjson.dumps(event)


def streamed(
    events: list[bytes], *, gap_ms: float = 20.0, api: Api = Api.CHAT, count_tokens=None
) -> RequestRecord:
    """Apply `events` as a stream, one every `gap_ms`, and build the record."""
    state = ResponseState()
    for i, payload in enumerate(events):
        state.take_event(payload, api, int((i + 1) * gap_ms * MS))
    return _record(state, stream=True, count_tokens=count_tokens)


def body(payload: bytes, *, count_tokens=None) -> RequestRecord:
    state = ResponseState()
    state.take_body(payload, Api.CHAT)
    return _record(state, stream=False, count_tokens=count_tokens)


def _record(state: ResponseState, *, stream: bool, count_tokens) -> RequestRecord:
    return state.to_record(
        item=ITEM,
        stream=stream,
        count_tokens=count_tokens,
        index=0,
        level=0,
        warmup=False,
        worker=0,
        t_send_ns=0,
        t_scheduled_ns=0,
        connect_ns=0,
        t_end_ns=10_000 * MS,
    )


def test_one_invisible_token_more_than_chunks_leaves_itl_alone():
    """512 one-token chunks 20 ms apart, usage counting the EOS as well: ITL stays 20 ms."""
    events = [delta("word") for _ in range(512)]
    events.append(finish(usage={"prompt_tokens": 1, "completion_tokens": 513}))
    record = streamed(events)
    assert record.output_tokens == 513
    assert record.chunk_tokens is None
    assert record.chunk_tokens_estimated
    s = compute_level([record], level=LEVEL, workers=WORKERS)
    assert s.p90_itl_ms == pytest.approx(20) and s.p99_itl_ms == pytest.approx(20)
    assert s.std_itl_ms == pytest.approx(0, abs=1e-9)
    assert s.chunk_tokens_estimated


def test_every_chunk_carries_at_least_one_token_and_only_the_surplus_is_shared():
    # 15 surplus tokens over 20 characters: 3.75, 0.75, 4.5, 0.75, 5.25 -> largest remainders
    assert split_tokens_over_chunks(20, [5, 1, 6, 1, 7]) == [5, 2, 5, 2, 6]
    # 5 surplus over 22 characters: 2.27, 0.23, 2.27, 0.23; a "," keeps its own token
    assert split_tokens_over_chunks(9, [10, 1, 10, 1]) == [4, 1, 3, 1]


def test_surplus_within_five_percent_of_chunks_is_attributed_to_no_gap():
    assert split_tokens_over_chunks(105, [3] * 100) is None
    assert split_tokens_over_chunks(106, [3] * 100) is not None
    assert split_tokens_over_chunks(90, [3] * 100) is None  # fewer tokens than chunks


def test_exact_usage_is_not_an_estimate():
    events = [delta("a"), delta("b"), finish(usage={"completion_tokens": 2})]
    record = streamed(events)
    assert record.chunk_tokens is None and not record.chunk_tokens_estimated
    assert not compute_level([record], level=LEVEL, workers=WORKERS).chunk_tokens_estimated


@pytest.mark.parametrize(
    "error",
    [
        {"object": "error", "message": "out of memory", "code": 500},
        {"error": {"message": "out of memory", "code": 500}},
    ],
)
def test_a_streamed_error_object_is_a_server_error(error):
    record = streamed([delta("a"), orjson.dumps(error), b"[DONE]"])
    assert not record.ok and record.error_kind is ErrorKind.SERVER_ERROR
    assert "out of memory" in (record.error or "")


def test_finish_reason_abort_is_a_failure():
    record = streamed([delta("a"), finish("abort"), b"[DONE]"])
    assert not record.ok and record.error_kind is ErrorKind.ABORTED


@pytest.mark.parametrize(
    "event",
    [
        b'{"choices": [{"delta": "x"}]}',
        b'{"choices": "x"}',
        b'{"choices": [1]}',
        b'{"choices": [{"delta": {"content": 5}}]}',
        b'{"choices": [{"delta": {}, "finish_reason": 3}]}',
        b'{"choices": [], "usage": {"completion_tokens": "many"}}',
        b'{"choices": [], "usage": {"completion_tokens": true}}',
        b'{"choices": [], "usage": {"prompt_tokens": -1}}',
        b'{"choices": [], "usage": []}',
        b"[1, 2]",
    ],
)
def test_valid_json_of_the_wrong_shape_is_malformed(event):
    record = streamed([delta("a"), event, finish()])
    assert not record.ok and record.error_kind is ErrorKind.MALFORMED


def test_reasoning_sent_under_both_names_is_taken_once():
    events = [delta(None, reasoning_content="think", reasoning="think"), delta("answer"), finish()]

    def count(text: str) -> int:
        return len(text)

    record = streamed(events, count_tokens=count)
    assert record.output_tokens == len("thinkanswer")
    assert record.output_token_source is OutputTokenSource.TOKENIZER


def test_reasoning_under_either_name_is_generated_text():
    for name in ("reasoning_content", "reasoning"):
        record = streamed([delta(None, **{name: "hm"}), delta("a"), finish()])
        assert record.ok and len(record.chunk_offsets_ns) == 2


def test_empty_keep_alive_event_is_ignored():
    record = streamed([delta("a"), b"", delta("b"), finish()])
    assert record.ok and len(record.chunk_offsets_ns) == 2


def test_non_streamed_body_without_usage_has_at_least_one_estimated_token():
    raw = orjson.dumps({"choices": [{"message": {"content": "hello"}, "finish_reason": "stop"}]})
    record = body(raw)
    assert record.ok
    assert record.output_tokens == 1
    assert record.output_token_source is OutputTokenSource.CHUNKS
    assert compute_level([record], level=LEVEL, workers=WORKERS).output_tokens_estimated
