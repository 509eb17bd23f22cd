"""The pure parts: due times, frames, request parsing, the lag histogram, the config."""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass

import aiohttp
import pytest
from pydantic import ValidationError

from servelab.sim import FixedTiming, SimConfig, TimedRequest, start
from servelab.sim.parsing import GenerationRequest, RequestError, parse_generation, parse_json
from servelab.sim.responses import http_chunk, n_chunks, stream_body
from servelab.sim.stats import LagHistogram


def test_fixed_timing_due_times_are_absolute():
    timing = FixedTiming.from_ms(ttft_ms=50, itl_ms=20)
    request = TimedRequest(t_recv_ns=1_000, prompt_tokens=3, completion_tokens=300, n_chunks=300)
    assert timing.due_ns(request, 0) == 1_000 + 50_000_000
    assert timing.due_ns(request, 255) == 1_000 + 50_000_000 + 255 * 20_000_000


@pytest.mark.timing
def test_long_streams_do_not_drift(sim_session, read_sse, chat, on_time):
    """Per-chunk overhead must not add up: the 100th chunk is as punctual as the first."""
    ttft_ms, itl_ms, n = 5.0, 4.0, 100

    async def scenario():
        async with sim_session(ttft_ms=ttft_ms, itl_ms=itl_ms) as (_, http):
            t_send = time.perf_counter_ns()
            async with http.post("/v1/chat/completions", json=chat(n)) as resp:
                events = await read_sse(resp)
            return t_send, [e for e in events if e.text]

    t_send, text_events = asyncio.run(scenario())
    assert len(text_events) == n
    errors_ms = [
        (e.t_ns - t_send) / 1e6 - (ttft_ms + k * itl_ms) for k, e in enumerate(text_events)
    ]
    on_time(errors_ms)
    assert_no_drift(errors_ms)


def assert_no_drift(errors_ms: list[float]) -> None:
    """The last 20 chunks are as punctual as the first 20, to 2 ms."""
    # 0.1 ms lost per chunk would show as 8 ms between the first and the last 20 chunks
    assert statistics.median(errors_ms[-20:]) - statistics.median(errors_ms[:20]) < 2.0


def test_a_stream_losing_40_us_a_chunk_drifts_though_it_is_on_time(on_time):
    """The negative control of the drift check: 0.04 ms lost per chunk is 3.2 ms over the 80
    chunks between the two windows' medians, past the 2 ms bound and within twice it. Every
    chunk is still within `on_time`'s bounds, so only the drift check sees it."""
    drifting = [0.04 * k for k in range(100)]
    on_time(drifting)
    with pytest.raises(AssertionError):
        assert_no_drift(drifting)
    assert_no_drift([0.01 * k for k in range(100)])  # 0.8 ms over the stream: no drift


@dataclass(frozen=True)
class _Accelerating:
    """A made-up timing source: each gap half the previous one."""

    def due_ns(self, request: TimedRequest, chunk_index: int) -> int:
        gaps = sum(16_000_000 >> i for i in range(chunk_index))
        return request.t_recv_ns + gaps


@pytest.mark.timing
def test_the_scheduler_follows_any_timing_source(read_sse, chat, on_time):
    async def scenario():
        sim = await start(SimConfig(port=0), timing=_Accelerating())
        try:
            async with aiohttp.ClientSession() as http:
                t_send = time.perf_counter_ns()
                async with http.post(f"{sim.url}/v1/chat/completions", json=chat(4)) as resp:
                    events = await read_sse(resp)
        finally:
            await sim.stop()
        return [(e.t_ns - t_send) / 1e6 for e in events if e.text]

    offsets_ms = asyncio.run(scenario())
    on_time([got - due for got, due in zip(offsets_ms, [0, 16, 24, 28], strict=True)])


def test_frames_are_valid_http_chunks_around_sse_events():
    request = GenerationRequest(
        chat=True, stream=True, include_usage=True, prompt_tokens=2, max_tokens=3
    )
    body = stream_body(request, config=SimConfig(), request_id="r1", created=0)
    assert len(body.frames) == 3
    for frame in [body.head, *body.frames]:
        rest = frame
        while rest:
            size_hex, _, rest = rest.partition(b"\r\n")
            size = int(size_hex, 16)
            payload, rest = rest[:size], rest[size:]
            assert rest.startswith(b"\r\n")
            rest = rest[2:]
            assert payload.startswith(b"data: ") and payload.endswith(b"\n\n")
    assert body.frames[0] is body.frames[1]  # shared, not re-encoded
    assert body.frames[-1].endswith(http_chunk(b"data: [DONE]\n\n"))
    assert n_chunks(7, 3) == 3 and n_chunks(6, 3) == 2


def test_parse_generation_reads_what_shapes_the_answer():
    body = parse_json(
        b'{"messages": [{"role": "user", "content": "a b"}, {"role": "user", "content": "c"}],'
        b' "max_completion_tokens": 9, "max_tokens": 4, "stream": true,'
        b' "stream_options": {"include_usage": true}, "ignore_eos": true}'
    )
    request = parse_generation(body, chat=True, reject_fields=())
    assert request == GenerationRequest(
        chat=True, stream=True, include_usage=True, prompt_tokens=3, max_tokens=9
    )
    with pytest.raises(RequestError) as rejected:
        parse_generation(body, chat=True, reject_fields=("ignore_eos",))
    assert rejected.value.status == 422


def test_lag_histogram_quantiles():
    histogram = LagHistogram()
    for lag_us in range(1, 1001):  # 1 µs .. 1 ms
        histogram.add(lag_us * 1_000)
    histogram.add(50_000_000)  # one 50 ms outlier, in the coarse bins
    assert histogram.quantile_ns(0.5) == pytest.approx(500_000, abs=10_000)
    assert histogram.quantile_ns(0.99) == pytest.approx(990_000, abs=10_000)
    assert histogram.quantile_ns(1.0) == 50_000_000
    assert histogram.max_ns == 50_000_000
    assert LagHistogram().quantile_ns(0.99) == 0


def test_config_is_keyword_only_and_validated():
    config = SimConfig(port=0, ttft_ms=10)
    assert config.itl_ms == 20.0 and config.model == "servelab-sim"
    with pytest.raises(ValidationError):
        SimConfig(tokens_per_chunk=0)
    with pytest.raises(ValidationError):
        SimConfig(surprise=1)
