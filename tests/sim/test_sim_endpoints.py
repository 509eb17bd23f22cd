"""Non-streaming answers, the side endpoints, and rejected requests."""

from __future__ import annotations

import asyncio
import time

import pytest

from servelab.core.errors import EngineLaunchError
from servelab.sim import SimConfig, start

TOKEN = " tok"


@pytest.mark.timing
def test_non_streaming_chat_arrives_whole_when_the_last_chunk_is_due(sim_session, chat):
    ttft_ms, itl_ms = 20.0, 10.0

    async def scenario():
        async with sim_session(ttft_ms=ttft_ms, itl_ms=itl_ms, reasoning_tokens=2) as (_, http):
            t_send = time.perf_counter_ns()
            async with http.post("/v1/chat/completions", json=chat(5, stream=False)) as resp:
                body = await resp.json()
            return (time.perf_counter_ns() - t_send) / 1e6, resp.status, body

    elapsed_ms, status, body = asyncio.run(scenario())
    assert status == 200
    # due when its last chunk is, 20 + 4 x 10 = 60 ms after the server received it (after
    # t_send): never earlier; the 50 ms above it is not derived from a measured spread
    assert ttft_ms + 4 * itl_ms - 0.5 < elapsed_ms < ttft_ms + 4 * itl_ms + 50
    assert body["object"] == "chat.completion"
    message = body["choices"][0]["message"]
    assert message == {"role": "assistant", "content": TOKEN * 3, "reasoning_content": TOKEN * 2}
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}


def test_non_streaming_completions_and_usage_switch(sim_session):
    body = {"prompt": [11, 12, 13, 14], "max_tokens": 2}

    async def scenario():
        answers = []
        for send_usage in (True, False):
            async with (
                sim_session(ttft_ms=0, itl_ms=0, send_usage=send_usage) as (_, http),
                http.post("/v1/completions", json=body) as resp,
            ):
                answers.append(await resp.json())
        return answers

    with_usage, without_usage = asyncio.run(scenario())
    assert with_usage["choices"][0]["text"] == TOKEN * 2
    assert with_usage["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    assert "usage" not in without_usage


def test_tokenize_counts_words_like_usage(sim_session):
    async def scenario():
        async with sim_session() as (_, http):
            async with http.post("/tokenize", json={"prompt": "the quick  brown\nfox"}) as resp:
                plain = await resp.json()
            messages = [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hello there"}]},
            ]
            async with http.post("/tokenize", json={"messages": messages}) as resp:
                chat = await resp.json()
            async with http.post("/tokenize", json={"prompt": 5}) as resp:
                bad_status = resp.status
            return plain, chat, bad_status

    plain, chat, bad_status = asyncio.run(scenario())
    assert plain["count"] == 4 and len(plain["tokens"]) == 4
    assert plain["max_model_len"] > 0
    assert chat["count"] == 4
    assert bad_status == 400


def test_models_health_and_stats(sim_session, chat):
    async def scenario():
        async with sim_session(model="my-model", ttft_ms=0, itl_ms=0) as (sim, http):
            async with http.get("/v1/models") as resp:
                models = await resp.json()
            async with http.get("/health") as resp:
                health = resp.status
            async with http.post("/v1/chat/completions", json=chat(4)) as resp:
                await resp.read()
            async with http.get("/sim/stats") as resp:
                stats = await resp.json()
            return models, health, stats, sim.stats()

    models, health, stats, direct = asyncio.run(scenario())
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["my-model"]
    assert health == 200
    assert stats["requests_total"] == 1
    assert stats["requests_active"] == 0
    assert stats["chunks_sent"] == 4 and stats["tokens_sent"] == 4
    assert stats["requests_by_outcome"] == {"complete": 1}
    assert 0 <= stats["send_lag_p50_ms"] <= stats["send_lag_p99_ms"] <= stats["send_lag_max_ms"]
    assert direct.chunks_sent == 4


def test_reject_fields_answers_422_naming_the_fields(sim_session, chat):
    async def scenario():
        async with sim_session(reject_fields=["ignore_eos", "min_tokens"]) as (_, http):
            body = chat(2) | {"ignore_eos": True}
            async with http.post("/v1/chat/completions", json=body) as resp:
                one = resp.status, await resp.json()
            body |= {"min_tokens": 2}
            async with http.post("/v1/completions", json=body | {"prompt": "x"}) as resp:
                two = resp.status, await resp.json()
            accepted = chat(2, stream=False) | {"temperature": 0.0, "top_p": 1}
            async with http.post("/v1/chat/completions", json=accepted) as resp:
                three = resp.status
            return one, two, three

    one, two, three = asyncio.run(scenario())
    assert one == (422, {"detail": "Unexpected fields in the request: {'ignore_eos'}"})
    assert two == (
        422,
        {"detail": "Unexpected fields in the request: {'ignore_eos', 'min_tokens'}"},
    )
    assert three == 200


def test_unrejected_pinning_fields_are_accepted(sim_session, chat):
    async def scenario():
        async with sim_session(ttft_ms=0, itl_ms=0) as (_, http):
            body = chat(3, stream=False) | {"ignore_eos": True, "min_tokens": 3}
            async with http.post("/v1/chat/completions", json=body) as resp:
                return resp.status, await resp.json()

    status, body = asyncio.run(scenario())
    assert status == 200
    assert body["usage"]["completion_tokens"] == 3


def test_invalid_bodies_get_400_with_an_openai_error(sim_session):
    bad = [
        b"not json",
        b"[1, 2]",
        b'{"messages": []}',
        b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}',
        b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}',
    ]

    async def scenario():
        async with sim_session() as (_, http):
            answers = []
            for raw in bad:
                async with http.post("/v1/chat/completions", data=raw) as resp:
                    answers.append((resp.status, await resp.json()))
            return answers

    for status, body in asyncio.run(scenario()):
        assert status == 400
        assert body["error"]["type"] == "invalid_request_error"


def test_client_request_id_is_echoed(sim_session, chat):
    async def scenario():
        async with sim_session(ttft_ms=0, itl_ms=0) as (_, http):
            headers = {"X-Request-Id": "abc-123"}
            async with http.post("/v1/chat/completions", json=chat(1), headers=headers) as resp:
                await resp.read()
                return resp.headers["X-Request-Id"]

    assert asyncio.run(scenario()) == "abc-123"


def test_a_taken_port_is_a_launch_error(sim_session):
    async def scenario():
        async with sim_session() as (sim, _):
            port = int(sim.url.rsplit(":", 1)[1])
            with pytest.raises(EngineLaunchError, match="cannot listen"):
                await start(SimConfig(port=port))

    asyncio.run(scenario())
