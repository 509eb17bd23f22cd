"""The truth log agrees with what a client saw, and is complete once the server stops."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson
import pytest

from servelab.sim import Fault, Outcome, SimConfig, TruthRecord, read_truth, start
from servelab.sim.truth import FLUSH_INTERVAL_S


@pytest.mark.timing
def test_truth_log_matches_the_client(sim_session, read_sse, chat, tmp_path):
    path = tmp_path / "truth.jsonl"
    ids = [f"req-{i}" for i in range(6)]

    async def one(http, request_id):
        t_send = time.perf_counter_ns()
        headers = {"X-Request-Id": request_id}
        async with http.post("/v1/chat/completions", json=chat(6), headers=headers) as resp:
            events = await read_sse(resp)
        return request_id, t_send, [e.t_ns for e in events if e.text]

    async def scenario():
        async with sim_session(ttft_ms=15, itl_ms=5, record_path=path) as (_, http):
            return await asyncio.gather(*(one(http, rid) for rid in ids))

    seen = {rid: (t_send, arrivals) for rid, t_send, arrivals in asyncio.run(scenario())}
    records = {r.request_id: r for r in read_truth(path)}
    assert set(records) == set(ids)
    for rid, (t_send, arrivals) in seen.items():
        record = records[rid]
        assert record.outcome is Outcome.COMPLETE and record.fault is Fault.NONE
        assert record.status == 200 and record.stream
        assert record.endpoint == "/v1/chat/completions"
        assert (record.prompt_tokens, record.completion_tokens) == (5, 6)
        assert len(record.chunk_sent_ns) == len(arrivals) == 6
        assert t_send <= record.t_recv_ns < record.chunk_sent_ns[0]
        for sent, arrived in zip(record.chunk_sent_ns, arrivals, strict=True):
            assert sent <= arrived < sent + 25_000_000  # received after it was sent, soon
        # sent when due: a busy 2-core machine may be a scheduler tick late, never more
        assert all(0 <= lag < 20_000_000 for lag in record.chunk_lag_ns)
        assert record.chunk_sent_ns[0] - record.t_recv_ns - record.chunk_lag_ns[0] == 15_000_000
        assert record.t_done_ns >= record.chunk_sent_ns[-1]


def test_truth_log_records_faults_and_rejections(sim_session, chat, tmp_path):
    path = tmp_path / "truth.jsonl"

    async def scenario():
        config = {"ttft_ms": 0, "itl_ms": 0, "record_path": path, "reject_fields": ["best_of"]}
        async with sim_session(fail_rate=1.0, **config) as (_, http):
            async with http.post("/v1/chat/completions", json=chat(3)) as resp:
                await resp.read()
            async with http.post("/v1/chat/completions", json=chat(3) | {"best_of": 2}) as r:
                await r.read()

    asyncio.run(scenario())
    failed, rejected = read_truth(path)
    assert (failed.status, failed.fault, failed.outcome) == (500, Fault.FAIL, Outcome.FAILED)
    assert failed.completion_tokens == 0 and failed.chunk_sent_ns == []
    assert (rejected.status, rejected.outcome) == (422, Outcome.REJECTED)


def test_truth_log_is_flushed_while_running(chat, tmp_path):
    """A reader can follow the log live: records appear within the flush interval."""
    path = tmp_path / "truth.jsonl"

    async def scenario():
        sim = await start(SimConfig(port=0, ttft_ms=0, itl_ms=0, record_path=path))
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.post(f"{sim.url}/v1/chat/completions", json=chat(2)) as resp,
            ):
                await resp.read()
            await asyncio.sleep(FLUSH_INTERVAL_S + 0.2)
            return path.read_bytes()
        finally:
            await sim.stop()

    lines = asyncio.run(scenario()).splitlines()
    assert len(lines) == 1
    assert TruthRecord.model_validate(orjson.loads(lines[0])).completion_tokens == 2


def test_stopping_ends_streams_in_flight_and_records_them(chat, tmp_path):
    path = tmp_path / "truth.jsonl"

    async def scenario():
        sim = await start(SimConfig(port=0, ttft_ms=0, itl_ms=50, record_path=path))
        async with aiohttp.ClientSession() as http:
            resp = await http.post(f"{sim.url}/v1/chat/completions", json=chat(100))
            await resp.content.readany()
            t0 = time.perf_counter()
            await sim.stop()
            stop_s = time.perf_counter() - t0
            try:
                await resp.read()
                ended = "complete"
            except aiohttp.ClientPayloadError:
                ended = "cut"
        return stop_s, ended

    stop_s, ended = asyncio.run(scenario())
    assert stop_s < 1.0
    assert ended == "cut"
    (record,) = read_truth(path)
    assert record.outcome is Outcome.STOPPED
    assert 0 < record.completion_tokens < 100
