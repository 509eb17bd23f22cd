"""Each injected fault as a client meets it, and the seeded, repeatable choice of faults."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from servelab.sim import SimConfig
from servelab.sim.faults import FAULT_WINDOW_CHUNKS, Fault, FaultPicker

FAST = {"ttft_ms": 0.0, "itl_ms": 1.0}


def test_fail_answers_500_with_a_json_error(sim_session, chat):
    async def scenario():
        async with sim_session(fail_rate=1.0) as (sim, http):
            statuses = []
            for stream in (True, False):
                async with http.post("/v1/chat/completions", json=chat(4, stream=stream)) as r:
                    statuses.append((r.status, await r.json()))
            return statuses, sim.stats()

    statuses, stats = asyncio.run(scenario())
    for status, body in statuses:
        assert status == 500
        assert body["error"]["code"] == 500
    assert stats.faults_injected == {"fail": 2}
    assert stats.requests_by_outcome == {"failed": 2}


def test_drop_cuts_the_chunked_body_after_a_few_tokens(sim_session, chat):
    async def scenario():
        async with sim_session(drop_rate=1.0, **FAST) as (sim, http):
            async with http.post("/v1/chat/completions", json=chat(32)) as resp:
                assert resp.status == 200
                received = b""
                with pytest.raises(aiohttp.ClientPayloadError):
                    async for chunk in resp.content.iter_any():
                        received += chunk
            return received, sim.stats()

    received, stats = asyncio.run(scenario())
    text_chunks = received.count(b'"content":" tok"')
    assert 1 <= text_chunks <= FAULT_WINDOW_CHUNKS
    assert b"[DONE]" not in received
    assert stats.requests_by_outcome == {"dropped": 1}


def test_malformed_sends_one_broken_event_then_goes_on(one_stream, chat):
    events = one_stream(chat(10), malformed_rate=1.0, **FAST)
    broken = [e for e in events if e.json is None and e.data != "[DONE]"]
    assert len(broken) == 1
    with pytest.raises(json.JSONDecodeError):
        json.loads(broken[0].data)
    position = events.index(broken[0])
    assert 1 <= sum(1 for e in events[:position] if e.text) <= FAULT_WINDOW_CHUNKS
    assert sum(1 for e in events if e.text) == 10
    assert events[-1].data == "[DONE]"


def test_stall_stops_sending_but_keeps_the_connection(sim_session, chat):
    async def scenario():
        async with sim_session(stall_rate=1.0, **FAST) as (sim, http):
            resp = await http.post("/v1/chat/completions", json=chat(32))
            received = b""
            with pytest.raises(TimeoutError):
                while chunk := await asyncio.wait_for(resp.content.readany(), timeout=0.3):
                    received += chunk
            assert not resp.content.at_eof()
            active_while_stalled = sim.stats().requests_active
            resp.close()  # the client gives up; the server should notice
            for _ in range(100):
                if sim.stats().requests_active == 0:
                    break
                await asyncio.sleep(0.01)
            return received, active_while_stalled, sim.stats()

    received, active_while_stalled, stats = asyncio.run(scenario())
    assert 1 <= received.count(b'"content":" tok"') <= FAULT_WINDOW_CHUNKS
    assert active_while_stalled == 1
    assert stats.requests_active == 0
    assert stats.requests_by_outcome == {"client_disconnected": 1}


def test_non_streaming_stall_never_answers(sim_session, chat):
    async def scenario():
        async with sim_session(stall_rate=1.0, **FAST) as (_, http):
            timeout = aiohttp.ClientTimeout(total=0.3)
            with pytest.raises(TimeoutError):
                await http.post("/v1/chat/completions", json=chat(2, stream=False), timeout=timeout)

    asyncio.run(scenario())


def test_non_streaming_ignores_drop_and_malformed(sim_session, chat):
    async def scenario():
        async with sim_session(drop_rate=0.5, malformed_rate=0.5, **FAST) as (_, http):
            bodies = []
            for _ in range(4):
                async with http.post("/v1/chat/completions", json=chat(3, stream=False)) as r:
                    bodies.append((r.status, await r.json()))
            return bodies

    for status, body in asyncio.run(scenario()):
        assert status == 200
        assert body["usage"]["completion_tokens"] == 3


def _observed_faults(sim_session, chat, **config) -> list[str]:
    """Send requests one by one and classify what each one met, from the client's side."""

    async def classify(http) -> str:
        async with http.post("/v1/chat/completions", json=chat(8)) as resp:
            if resp.status == 500:
                return "fail"
            try:
                body = await resp.read()
            except aiohttp.ClientPayloadError:
                return "drop"
        return "malformed" if b'data: {"choices": [\n' in body else "none"

    async def scenario():
        async with sim_session(**config, **FAST) as (_, http):
            return [await classify(http) for _ in range(24)]

    return asyncio.run(scenario())


def test_seeded_faults_repeat_and_depend_on_the_seed(sim_session, chat):
    rates = {"fail_rate": 0.25, "drop_rate": 0.25, "malformed_rate": 0.25}
    first = _observed_faults(sim_session, chat, seed=7, **rates)
    again = _observed_faults(sim_session, chat, seed=7, **rates)
    other = _observed_faults(sim_session, chat, seed=8, **rates)
    assert first == again
    assert first != other
    assert {"fail", "drop", "malformed", "none"} <= set(first)


def test_fault_picker_draws_the_same_sequence_for_a_seed():
    config = SimConfig(fail_rate=0.2, drop_rate=0.2, malformed_rate=0.2, stall_rate=0.2, seed=3)
    a, b = FaultPicker(config), FaultPicker(config)
    plans_a = [a.pick(stream=True, n_chunks=50) for _ in range(200)]
    plans_b = [b.pick(stream=True, n_chunks=50) for _ in range(200)]
    assert plans_a == plans_b
    shares = {kind: sum(p.kind is kind for p in plans_a) / 200 for kind in Fault}
    for kind in (Fault.FAIL, Fault.DROP, Fault.MALFORMED, Fault.STALL, Fault.NONE):
        assert 0.1 < shares[kind] < 0.3
    assert all(1 <= p.at_chunk <= FAULT_WINDOW_CHUNKS for p in plans_a if p.kind is not Fault.NONE)


def test_fault_strikes_before_the_last_chunk_of_short_outputs():
    picker = FaultPicker(SimConfig(drop_rate=1.0))
    assert {picker.pick(stream=True, n_chunks=2).at_chunk for _ in range(50)} == {1}
    assert {picker.pick(stream=True, n_chunks=1).at_chunk for _ in range(50)} == {0}


def test_fault_rates_above_one_are_refused():
    with pytest.raises(ValueError, match="at most 1"):
        SimConfig(fail_rate=0.6, stall_rate=0.6)
