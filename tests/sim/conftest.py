"""Fixtures for the simulator tests: a server in the test's event loop and an SSE reader.

pytest-asyncio is not a dependency, so each test runs its scenario with `asyncio.run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from servelab.sim import RunningSim, SimConfig, start


@dataclass
class Event:
    """One SSE event as a client saw it: arrival time, raw data, parsed JSON (None if broken)."""

    t_ns: int
    data: str
    json: dict[str, Any] | None

    @property
    def text(self) -> str:
        """Generated text (content or reasoning) in this event, '' if none."""
        if not self.json or not self.json.get("choices"):
            return ""
        choice = self.json["choices"][0]
        if "text" in choice:
            return choice["text"] or ""
        delta = choice.get("delta", {})
        return (delta.get("reasoning_content") or "") + (delta.get("content") or "")


async def _read_sse(response: aiohttp.ClientResponse) -> list[Event]:
    events: list[Event] = []
    async for line in response.content:
        if not line.startswith(b"data: "):
            continue
        data = line[len(b"data: ") :].decode().strip()
        try:
            parsed = json.loads(data) if data != "[DONE]" else None
        except json.JSONDecodeError:
            parsed = None
        events.append(Event(time.perf_counter_ns(), data, parsed))
    return events


SimSession = Callable[..., contextlib.AbstractAsyncContextManager[tuple[RunningSim, Any]]]


@pytest.fixture
def sim_session() -> SimSession:
    """`async with sim_session(**config) as (sim, http)`: a simulator on a free port."""

    @contextlib.asynccontextmanager
    async def session(**overrides: Any) -> AsyncIterator[tuple[RunningSim, aiohttp.ClientSession]]:
        sim = await start(SimConfig(port=0, **overrides))
        try:
            async with aiohttp.ClientSession(base_url=sim.url) as http:
                yield sim, http
        finally:
            await sim.stop()

    return session


@pytest.fixture
def read_sse() -> Callable[[aiohttp.ClientResponse], Awaitable[list[Event]]]:
    """Read a whole SSE body into events stamped with perf_counter_ns at arrival."""
    return _read_sse


@pytest.fixture
def one_stream(sim_session: SimSession) -> Callable[..., list[Event]]:
    """`one_stream(body, path=..., **config)`: the events of one request to a fresh simulator."""

    def run(body: dict[str, Any], *, path: str = "/v1/chat/completions", **config: Any):
        async def scenario() -> list[Event]:
            async with sim_session(**config) as (_, http), http.post(path, json=body) as resp:
                assert resp.status == 200
                return await _read_sse(resp)

        return asyncio.run(scenario())

    return run


def chat_body(max_tokens: int = 8, *, stream: bool = True, usage: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "servelab-sim",
        "messages": [{"role": "user", "content": "one two three four five"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream and usage:
        body["stream_options"] = {"include_usage": True}
    return body


def _assert_on_time(errors_ms: list[float]) -> None:
    """Arrival minus due time, per chunk: never early, typically within a couple of ms.

    Quantiles rather than the maximum, so a test machine busy with other work (a stall of
    the test process itself) does not fail a server that kept time.
    """
    ordered = sorted(errors_ms)
    assert ordered[0] > -0.5, f"a chunk arrived {-ordered[0]:.2f} ms before it was due"
    median, p90 = statistics.median(ordered), ordered[int(0.9 * (len(ordered) - 1))]
    assert median < 4.0, f"median lateness {median:.2f} ms"
    assert p90 < 10.0, f"90th percentile lateness {p90:.2f} ms"
    assert ordered[-1] < 250, f"worst lateness {ordered[-1]:.2f} ms"


@pytest.fixture
def on_time() -> Callable[[list[float]], None]:
    """Check per-chunk lateness (ms) as the timing tests expect it."""
    return _assert_on_time


@pytest.fixture
def chat() -> Callable[..., dict[str, Any]]:
    """Build a chat request body with a five-word prompt."""
    return chat_body
