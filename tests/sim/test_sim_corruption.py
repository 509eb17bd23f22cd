"""Planted corruption, as a client sees it on the wire."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from servelab.cli import app
from servelab.sim import Corruption, Outcome, SimConfig, read_truth

FAST = {"ttft_ms": 0, "itl_ms": 0}
PROMPT = "what is the capital of france"


def _completion(**fields: Any) -> dict[str, Any]:
    return {"model": "servelab-sim", "prompt": PROMPT, "max_tokens": 6} | fields


def _chat(**fields: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": PROMPT}]
    return {"model": "servelab-sim", "messages": messages, "max_tokens": 6} | fields


async def _exchange(http: aiohttp.ClientSession, path: str, body: dict[str, Any], read_sse):
    async with http.post(path, json=body) as resp:
        if body.get("stream"):
            return resp.status, await read_sse(resp)
        return resp.status, await resp.text()


def _run(sim_session, read_sse, requests: list[tuple[str, dict[str, Any]]], **config):
    """(status, events or text) of each request, in order, to one simulator."""

    async def scenario():
        async with sim_session(**(FAST | config)) as (_, http):
            return [await _exchange(http, path, body, read_sse) for path, body in requests]

    return asyncio.run(scenario())


def _choices(events) -> list[dict[str, Any]]:
    return [e.json["choices"][0] for e in events if e.json and e.json["choices"]]


def test_nan_logprobs_are_null_in_streams_and_a_500_whole(sim_session, read_sse):
    (s1, events), (s2, chat_events), (s3, whole), (s4, plain) = _run(
        sim_session,
        read_sse,
        [
            ("/v1/completions", _completion(logprobs=1, stream=True)),
            ("/v1/chat/completions", _chat(logprobs=True, stream=True)),
            ("/v1/completions", _completion(logprobs=1)),
            ("/v1/completions", _completion()),
        ],
        corruption="nan-logprobs",
        corrupt_after_tokens=2,
    )
    assert (s1, s2, s3, s4) == (200, 200, 500, 200)
    values = [v for c in _choices(events) for v in c["logprobs"]["token_logprobs"]]
    assert all(v < 0 for v in values[:2]) and values[2:] == [None] * 4
    tops = [t for c in _choices(events) for t in c["logprobs"]["top_logprobs"]]
    assert all(set(top.values()) == {None} for top in tops[2:])
    content = [e for c in _choices(chat_events)[1:] for e in c["logprobs"]["content"]]
    assert [e["logprob"] is None for e in content] == [False] * 2 + [True] * 4
    assert whole == "Internal Server Error"  # vLLM's JSONResponse refuses NaN
    assert json.loads(plain)["choices"][0]["finish_reason"] == "length"  # nothing to encode


def test_wrong_token_departs_from_the_reference_at_token_n(sim_session, read_sse):
    body = _completion(logprobs=1)
    ((_, clean),) = _run(sim_session, read_sse, [("/v1/completions", body)])
    ((_, corrupt),) = _run(
        sim_session,
        read_sse,
        [("/v1/completions", body)],
        corruption="wrong-token",
        corrupt_after_tokens=3,
    )
    reference = json.loads(clean)["choices"][0]["logprobs"]
    wrong = json.loads(corrupt)["choices"][0]["logprobs"]
    assert wrong["tokens"][:3] == reference["tokens"][:3]
    assert wrong["tokens"][3] != reference["tokens"][3]
    top = wrong["top_logprobs"][3]
    assert wrong["token_logprobs"][3] < max(top.values())  # the runner-up, honestly scored
    assert top[reference["tokens"][3]] == reference["token_logprobs"][3]


def test_reasoning_only_leaves_content_empty(sim_session, read_sse):
    (_, events), (_, whole) = _run(
        sim_session,
        read_sse,
        [
            ("/v1/chat/completions", _chat(stream=True)),
            ("/v1/chat/completions", _chat()),
        ],
        corruption="reasoning-only",
    )
    deltas = [c["delta"] for c in _choices(events)[1:]]
    assert all("content" not in d and d["reasoning_content"] for d in deltas)
    message = json.loads(whole)["choices"][0]["message"]
    assert message["content"] is None
    assert len(message["reasoning_content"].split()) == 6


def test_no_finish_reason_and_usage_overcount(sim_session, read_sse):
    stream = _completion(stream=True, stream_options={"include_usage": True})
    ((_, unfinished),) = _run(
        sim_session, read_sse, [("/v1/completions", stream)], corruption="no-finish-reason"
    )
    ((_, overcounted), (_, whole)) = _run(
        sim_session,
        read_sse,
        [("/v1/completions", stream), ("/v1/chat/completions", _chat())],
        corruption="usage-overcount",
    )
    assert [c["finish_reason"] for c in _choices(unfinished)] == [None] * 6
    assert unfinished[-1].data == "[DONE]"
    usage = overcounted[-2].json["usage"]
    assert len(_choices(overcounted)) == 6
    assert usage["completion_tokens"] == 12
    assert usage["total_tokens"] == usage["prompt_tokens"] + 12
    assert json.loads(whole)["usage"]["completion_tokens"] == 12


def test_a_corruption_rate_hits_a_seeded_share(sim_session, read_sse):
    requests = [("/v1/completions", _completion(max_tokens=1))] * 40

    def hit(seed: int) -> list[bool]:
        answers = _run(
            sim_session,
            read_sse,
            requests,
            corruption="no-finish-reason",
            corruption_rate=0.5,
            seed=seed,
        )
        return [json.loads(text)["choices"][0]["finish_reason"] is None for _, text in answers]

    first = hit(seed=7)
    assert first == hit(seed=7)
    assert 8 <= sum(first) <= 32  # 40 draws at 1/2: outside this about once in 10^4


def test_planted_corruption_puts_every_request_on_the_greedy_path(sim_session, read_sse):
    ((_, text),) = _run(
        sim_session,
        read_sse,
        [("/v1/completions", _completion())],
        corruption="no-finish-reason",
        corruption_rate=0.0,
    )
    choice = json.loads(text)["choices"][0]
    assert "tok" not in choice["text"].split() and choice["finish_reason"] == "length"


def test_corrupt_after_tokens_needs_a_kind_that_strikes_at_a_token():
    with pytest.raises(ValidationError, match="corrupt_after_tokens places"):
        SimConfig(corruption=Corruption.REASONING_ONLY, corrupt_after_tokens=2)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--corrupt", "garbage"], "--corrupt: Input should be 'none', 'nan-logprobs'"),
        (["--corrupt-rate", "2"], "--corrupt-rate"),
        (["--corrupt", "no-finish-reason", "--corrupt-after-tokens", "3"], "places"),
    ],
)
def test_bad_corruption_flags_are_one_line_errors(args, message):
    result = CliRunner().invoke(app, ["sim", "--port", "0", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert result.output.strip().count("\n") == 0


def test_the_cli_plants_corruption(start_sim):
    sim = start_sim(corrupt="usage-overcount", corrupt_rate=1.0, ttft_ms=0, itl_ms=0)

    async def scenario():
        async with (
            aiohttp.ClientSession(base_url=sim.url) as http,
            http.post("/v1/completions", json=_completion(max_tokens=3)) as resp,
        ):
            return await resp.json()

    assert asyncio.run(scenario())["usage"]["completion_tokens"] == 6


def test_the_truth_log_records_the_nan_500_as_failed(sim_session, read_sse, tmp_path):
    record = tmp_path / "truth.jsonl"
    _run(
        sim_session,
        read_sse,
        [("/v1/completions", _completion(logprobs=0)), ("/v1/completions", _completion())],
        corruption="nan-logprobs",
        record_path=record,
    )
    failed, complete = read_truth(record)
    assert (failed.status, failed.outcome, failed.completion_tokens) == (500, Outcome.FAILED, 0)
    assert (complete.status, complete.outcome, complete.completion_tokens) == (
        200,
        Outcome.COMPLETE,
        6,
    )
