"""Streamed answers: timing against ttft/itl, shape, usage, reasoning and chunking."""

from __future__ import annotations

import asyncio
import time

import pytest

TOKEN = " tok"


@pytest.mark.timing
def test_chunk_timing_matches_ttft_and_itl(sim_session, read_sse, chat, on_time):
    ttft_ms, itl_ms, n = 40.0, 15.0, 12

    async def scenario():
        async with sim_session(ttft_ms=ttft_ms, itl_ms=itl_ms) as (_, http):
            errors_ms = []
            for _ in range(3):
                t_send = time.perf_counter_ns()
                async with http.post("/v1/chat/completions", json=chat(n)) as resp:
                    events = await read_sse(resp)
                text_events = [e for e in events if e.text]
                assert len(text_events) == n
                for k, event in enumerate(text_events):
                    expected_ms = ttft_ms + k * itl_ms
                    errors_ms.append((event.t_ns - t_send) / 1e6 - expected_ms)
            return errors_ms

    on_time(asyncio.run(scenario()))


def test_a_stream_within_every_margin_is_on_time(on_time):
    """The control's other half: lateness at half of each bound passes `on_time`."""
    errors_ms = [-0.25] + [2.0] * 16 + [5.0, 5.0, 125.0]  # earliest, median, p90, worst
    on_time(errors_ms)


@pytest.mark.parametrize(
    ("errors_ms", "flagged"),
    [
        # each breach is 1.5x one bound and within the others, so loosening that bound by
        # 2x (or dropping it) lets the breach through and this control fails
        pytest.param([-0.75] + [1.0] * 19, "before it was due", id="a-chunk-0.75-ms-early"),
        pytest.param([6.0] * 20, "median lateness", id="every-chunk-6-ms-late"),
        pytest.param([1.0] * 17 + [15.0] * 3, "90th percentile", id="a-tail-15-ms-late"),
        pytest.param([1.0] * 19 + [375.0], "worst lateness", id="one-chunk-375-ms-late"),
    ],
)
def test_a_stream_past_a_margin_is_not_on_time(on_time, errors_ms, flagged):
    """The negative control of `on_time`, the check of every chunk-timing test here."""
    with pytest.raises(AssertionError, match=flagged):
        on_time(errors_ms)


def test_usage_role_chunk_and_done(sim_session, read_sse, chat):
    async def scenario():
        async with (
            sim_session(ttft_ms=0, itl_ms=0) as (_, http),
            http.post("/v1/chat/completions", json=chat(7)) as resp,
        ):
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            return await read_sse(resp)

    events = asyncio.run(scenario())
    assert events[0].json["choices"][0]["delta"] == {"role": "assistant"}
    assert events[-1].data == "[DONE]"
    usage_event = events[-2].json
    assert usage_event["choices"] == []
    assert usage_event["usage"] == {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
    text_events = [e for e in events if e.text]
    assert [e.text for e in text_events] == [TOKEN] * 7
    assert text_events[-1].json["choices"][0]["finish_reason"] == "length"
    assert all(e.json["choices"][0]["finish_reason"] is None for e in text_events[:-1])
    assert len({e.json["id"] for e in events if e.json}) == 1


def test_no_usage_unless_asked_or_when_disabled(one_stream, chat):
    for send_usage, ask in ((True, False), (False, True)):
        events = one_stream(chat(3, usage=ask), ttft_ms=0, itl_ms=0, send_usage=send_usage)
        assert not any(e.json and "usage" in e.json for e in events)
        assert sum(1 for e in events if e.text) == 3


def test_without_role_chunk_the_first_text_chunk_carries_the_role(one_stream, chat):
    events = one_stream(chat(3), ttft_ms=0, itl_ms=0, role_chunk=False)
    assert events[0].text == TOKEN
    assert events[0].json["choices"][0]["delta"] == {"role": "assistant", "content": TOKEN}


def test_reasoning_tokens_come_first_as_reasoning_content(one_stream, chat):
    events = one_stream(chat(5), ttft_ms=0, itl_ms=0, reasoning_tokens=3)
    deltas = [e.json["choices"][0]["delta"] for e in events if e.text]
    assert deltas == [{"reasoning_content": TOKEN}] * 3 + [{"content": TOKEN}] * 2


@pytest.mark.timing
def test_tokens_per_chunk_groups_tokens_and_keeps_the_gap_per_chunk(
    sim_session, read_sse, chat, on_time
):
    ttft_ms, itl_ms = 20.0, 15.0

    async def scenario():
        async with sim_session(ttft_ms=ttft_ms, itl_ms=itl_ms, tokens_per_chunk=3) as (_, http):
            t_send = time.perf_counter_ns()
            async with http.post("/v1/chat/completions", json=chat(8)) as resp:
                return t_send, await read_sse(resp)

    t_send, events = asyncio.run(scenario())
    text_events = [e for e in events if e.text]
    assert [e.text for e in text_events] == [TOKEN * 3, TOKEN * 3, TOKEN * 2]
    assert events[-2].json["usage"]["completion_tokens"] == 8
    on_time([(e.t_ns - t_send) / 1e6 - (ttft_ms + k * itl_ms) for k, e in enumerate(text_events)])


def test_reasoning_boundary_inside_a_chunk_splits_the_delta(one_stream, chat):
    config = {"ttft_ms": 0, "itl_ms": 0, "tokens_per_chunk": 2, "reasoning_tokens": 3}
    events = one_stream(chat(4), **config)
    deltas = [e.json["choices"][0]["delta"] for e in events if e.text]
    assert deltas == [
        {"reasoning_content": TOKEN * 2},
        {"reasoning_content": TOKEN, "content": TOKEN},
    ]


def test_completions_api_streams_text_without_role_or_reasoning(one_stream):
    body = {
        "prompt": "a b c",
        "max_tokens": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events = one_stream(body, path="/v1/completions", ttft_ms=0, itl_ms=0, reasoning_tokens=2)
    choices = [e.json["choices"][0] for e in events if e.text]
    assert [c["text"] for c in choices] == [TOKEN] * 4
    assert events[0].json["object"] == "text_completion"
    assert events[-2].json["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 4,
        "total_tokens": 7,
    }


def test_max_completion_tokens_and_the_default(sim_session, read_sse, chat):
    async def scenario():
        async with sim_session(ttft_ms=0, itl_ms=0) as (_, http):
            body = chat(99)
            del body["max_tokens"]
            async with http.post("/v1/chat/completions", json=body) as resp:
                default = await read_sse(resp)
            body["max_completion_tokens"] = 3
            async with http.post("/v1/chat/completions", json=body) as resp:
                explicit = await read_sse(resp)
            return default, explicit

    default, explicit = asyncio.run(scenario())
    assert sum(1 for e in default if e.text) == 16
    assert sum(1 for e in explicit if e.text) == 3


@pytest.mark.timing
def test_concurrent_streams_keep_their_own_schedule(sim_session, read_sse, chat, on_time):
    """Streams started at different times each follow their own t_recv, not a shared tick."""
    ttft_ms, itl_ms, n = 10.0, 10.0, 6

    async def one(http, delay_s):
        await asyncio.sleep(delay_s)
        t_send = time.perf_counter_ns()
        async with http.post("/v1/chat/completions", json=chat(n)) as resp:
            events = await read_sse(resp)
        return [(e.t_ns - t_send) / 1e6 for e in events if e.text]

    async def scenario():
        async with sim_session(ttft_ms=ttft_ms, itl_ms=itl_ms) as (_, http):
            return await asyncio.gather(*(one(http, i * 0.003) for i in range(8)))

    errors_ms = []
    for offsets_ms in asyncio.run(scenario()):
        assert len(offsets_ms) == n
        errors_ms += [offset - (ttft_ms + k * itl_ms) for k, offset in enumerate(offsets_ms)]
    on_time(errors_ms)
