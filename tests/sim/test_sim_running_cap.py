"""The running-request cap and continuous batching over HTTP, checked against the truth log."""

from __future__ import annotations

import asyncio
import itertools
import time

import aiohttp
import pytest
from pydantic import ValidationError

from servelab.core.errors import ConfigError
from servelab.sim import (
    Fault,
    LinearStepCost,
    Outcome,
    SimConfig,
    TruthRecord,
    read_truth,
    start,
)
from servelab.sim.faults import FaultPicker

MS = 1_000_000
BATCHING = {"profile": "linear", "step_base_ms": 10, "step_per_seq_ms": 2}


def _dues(record: TruthRecord) -> list[int]:
    """When each chunk of a request was due: its send time minus its lag."""
    return [sent - lag for sent, lag in zip(record.chunk_sent_ns, record.chunk_lag_ns, strict=True)]


def _max_overlap(intervals: list[tuple[int, int]]) -> int:
    """Most intervals [start, end) open at one instant."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = current = 0
    for _, change in events:  # at equal times an end (-1) sorts before a start
        current += change
        most = max(most, current)
    return most


async def _concurrently(http: aiohttp.ClientSession, bodies: list[dict], *, stagger_s: float):
    """Send the bodies in order, `stagger_s` apart, and read every answer whole."""

    async def one(index: int, body: dict) -> int:
        await asyncio.sleep(index * stagger_s)
        headers = {"X-Request-Id": f"r{index}"}
        async with http.post("/v1/chat/completions", json=body, headers=headers) as resp:
            await resp.read()
            return resp.status

    return await asyncio.gather(*(one(i, body) for i, body in enumerate(bodies)))


def _run_eight(sim_session, chat, tmp_path, **config):
    path = tmp_path / "truth.jsonl"

    async def scenario():
        async with sim_session(record_path=path, max_running_requests=4, **config) as (sim, http):
            load = asyncio.create_task(_concurrently(http, [chat(5)] * 8, stagger_s=0.002))
            # 30 ms: after the last of the eight is sent (7 x 2 ms = 14 ms) and before any of
            # the first four can finish (fixed timing: 20 + 4 x 10 = 60 ms; batching: five
            # steps, a prefill and four decodes, of at least 10 ms each: 50 ms)
            await asyncio.sleep(0.03)
            during = sim.stats()
            statuses = await load
        return statuses, during

    statuses, during = asyncio.run(scenario())
    assert statuses == [200] * 8
    records = sorted(read_truth(path), key=lambda r: r.t_recv_ns)
    assert [r.outcome for r in records] == [Outcome.COMPLETE] * 8
    return records, during


@pytest.mark.timing
def test_fixed_timing_with_a_cap_queues_the_rest_and_their_ttft_grows(sim_session, chat, tmp_path):
    ttft, itl = 20 * MS, 10 * MS
    records, during = _run_eight(sim_session, chat, tmp_path, ttft_ms=20, itl_ms=10)
    assert (during.requests_running, during.requests_waiting) == (4, 4)
    starts = [r.chunk_sent_ns[0] - r.chunk_lag_ns[0] - ttft for r in records]
    assert _max_overlap([(s, r.t_done_ns) for s, r in zip(starts, records, strict=True)]) == 4
    for begin, record in zip(starts, records, strict=True):  # chunks on the fixed grid
        assert _dues(record) == [begin + ttft + k * itl for k in range(5)]
    ttft_ms = [(r.chunk_sent_ns[0] - r.t_recv_ns) / MS for r in records]
    # due exactly 20 ms after receipt and never sent before it; the 15 ms above is the send
    # lag allowed (not derived from a measured spread)
    assert all(19.5 < t < 35 for t in ttft_ms[:4])
    # the later four start as the first four finish, 60 ms after them
    assert all(ttft_ms[k] > 20 + 60 - 10 for k in range(4, 8))
    assert min(starts[4:]) >= min(r.t_done_ns for r in records[:4])


@pytest.mark.timing
def test_batching_with_a_cap_runs_four_and_steps_them_together(sim_session, chat, tmp_path):
    records, during = _run_eight(sim_session, chat, tmp_path, **BATCHING)
    assert (during.requests_running, during.requests_waiting) == (4, 4)
    assert during.steps > 0
    dues = [_dues(r) for r in records]
    assert _max_overlap([(d[0], d[-1] + 1) for d in dues]) == 4
    # a token is due at each step's end, for every request running in that step
    step_ends = sorted({t for d in dues for t in d})
    for d in dues:
        first = step_ends.index(d[0])
        assert d == step_ends[first : first + 5]
    gaps = {b - a for a, b in itertools.pairwise(step_ends)}
    assert 18 * MS in gaps  # four decoding: 10 ms + 2 ms each
    first_four, later_four = dues[:4], dues[4:]
    assert min(d[0] for d in later_four) > min(d[-1] for d in first_four)
    ttft_ms = [(r.chunk_sent_ns[0] - r.t_recv_ns) / MS for r in records]
    assert max(ttft_ms[:4]) < min(ttft_ms[4:])


@pytest.mark.timing
def test_fixed_timing_non_streaming_answers_wait_for_a_slot_too(sim_session, chat):
    async def scenario():
        async with sim_session(max_running_requests=1, ttft_ms=20, itl_ms=10) as (_, http):

            async def one() -> float:
                t_send = time.perf_counter_ns()
                async with http.post("/v1/chat/completions", json=chat(3, stream=False)) as resp:
                    await resp.read()
                return (time.perf_counter_ns() - t_send) / MS

            return sorted(await asyncio.gather(one(), one()))

    first_ms, second_ms = asyncio.run(scenario())
    assert 40 <= first_ms < 60  # 20 ms + 2 x 10 ms
    assert 80 <= second_ms < 110  # waited for the first


def test_batching_answers_non_streaming_requests_after_their_last_step(sim_session, chat):
    async def scenario():
        async with sim_session(**BATCHING) as (sim, http):
            async with http.post("/v1/chat/completions", json=chat(4, stream=False)) as resp:
                body = await resp.json()
            return body, sim.stats()

    body, stats = asyncio.run(scenario())
    assert body["usage"]["completion_tokens"] == 4
    assert stats.steps == 4  # one prefill step gives the first token, three decode steps
    assert stats.requests_by_outcome == {"complete": 1}


def test_batching_refuses_a_request_that_can_never_fit_the_kv_cache(sim_session, chat, tmp_path):
    path = tmp_path / "truth.jsonl"

    async def scenario():
        async with sim_session(kv_capacity_tokens=12, record_path=path, **BATCHING) as (_, http):
            async with http.post("/v1/chat/completions", json=chat(8)) as resp:  # 5 + 8 > 12
                refused = resp.status, await resp.json()
            async with http.post("/v1/chat/completions", json=chat(7)) as resp:
                await resp.read()
                return refused, resp.status

    (status, body), fitting = asyncio.run(scenario())
    assert status == 400 and "KV cache" in body["error"]["message"]
    assert fitting == 200
    assert [r.outcome for r in read_truth(path)] == [Outcome.REJECTED, Outcome.COMPLETE]


def _seed_hitting_only_the_first(rate: str) -> int:
    """A seed whose fault draws hit the first request and spare the second."""
    for seed in range(100):
        picker = FaultPicker(SimConfig(seed=seed, **{rate: 0.5}))
        first, second = (picker.pick(stream=True, n_chunks=10).kind for _ in range(2))
        if first is not Fault.NONE and second is Fault.NONE:
            return seed
    raise AssertionError("no such seed below 100")


@pytest.mark.parametrize("rate", ["drop_rate", "stall_rate"])
def test_a_dropped_or_stalled_stream_gives_its_slot_back(sim_session, chat, rate):
    seed = _seed_hitting_only_the_first(rate)
    config = {"max_running_requests": 1, "seed": seed, rate: 0.5} | BATCHING

    async def scenario():
        async with sim_session(**config) as (_, http):
            first = await http.post("/v1/chat/completions", json=chat(1000))  # 12 s of steps
            await first.content.readany()
            async with http.post("/v1/chat/completions", json=chat(3)) as second:
                await asyncio.wait_for(second.read(), timeout=2)
            first.close()
            return second.status

    assert asyncio.run(scenario()) == 200


def test_batching_runs_in_one_process():
    with pytest.raises(ValidationError, match="workers must be 1"):
        SimConfig(profile="linear", workers=2)

    async def scenario():
        await start(SimConfig(port=0, workers=2), step_cost=LinearStepCost(base_ms=1))

    with pytest.raises(ConfigError, match="workers must be 1"):
        asyncio.run(scenario())
