"""The quality path over HTTP: greedy text, logprobs in vLLM's shapes, teacher forcing."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from servelab.bench.quality.client import NEUTRAL_SAMPLING
from servelab.sim.tokenmodel import VOCAB, VOCAB_IDS, Distribution, context_state

PROMPT = "the quick brown fox"
FAST = {"ttft_ms": 0, "itl_ms": 0}


def _completion(prompt: Any = PROMPT, **fields: Any) -> dict[str, Any]:
    return {"model": "servelab-sim", "prompt": prompt, "max_tokens": 6, **fields}


def _chat(content: str = PROMPT, **fields: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": content}]
    return {"model": "servelab-sim", "messages": messages, "max_tokens": 6, **fields}


def _post_all(sim_session, requests: list[tuple[str, dict[str, Any]]], read_sse=None, **config):
    """Each (path, body) answered by one simulator: JSON bodies, or SSE events if streamed."""

    async def scenario() -> list[Any]:
        answers = []
        async with sim_session(**(FAST | config)) as (_, http):
            for path, body in requests:
                async with http.post(path, json=body) as resp:
                    assert resp.status == 200, await resp.text()
                    answers.append(
                        await read_sse(resp) if body.get("stream") else await resp.json()
                    )
        return answers

    return asyncio.run(scenario())


def test_greedy_text_is_a_function_of_the_prompt(sim_session):
    same, again, other = _post_all(
        sim_session,
        [
            ("/v1/completions", _completion(temperature=0)),
            ("/v1/completions", _completion(temperature=0)),
            ("/v1/completions", _completion("a different prompt", temperature=0)),
        ],
    )
    text = same["choices"][0]["text"]
    assert text == again["choices"][0]["text"]
    assert text != other["choices"][0]["text"]
    assert all(word in VOCAB for word in text.split()) and len(text.split()) == 6


def test_completions_logprobs_in_vllm_shape(sim_session):
    (body,) = _post_all(sim_session, [("/v1/completions", _completion(logprobs=2))])
    choice = body["choices"][0]
    logprobs = choice["logprobs"]
    assert list(logprobs) == ["text_offset", "token_logprobs", "tokens", "top_logprobs"]
    assert "".join(logprobs["tokens"]) == choice["text"]
    offsets = [sum(len(t) for t in logprobs["tokens"][:i]) for i in range(6)]
    assert logprobs["text_offset"] == offsets
    for token, logprob, top in zip(
        logprobs["tokens"], logprobs["token_logprobs"], logprobs["top_logprobs"], strict=True
    ):
        assert logprob < 0 and top[token] == logprob
        assert max(top.values()) == logprob  # greedy: the sampled token is the argmax
        assert len(top) in (2, 3)  # the sampled token, then the top 2 without it
    assert "prompt_logprobs" not in choice


def test_streamed_logprobs_match_the_whole_answer(sim_session, read_sse):
    whole, events = _post_all(
        sim_session,
        [
            ("/v1/completions", _completion(logprobs=1)),
            ("/v1/completions", _completion(logprobs=1, stream=True)),
        ],
        read_sse=read_sse,
        tokens_per_chunk=4,
    )
    chunks = [e.json["choices"][0] for e in events if e.json and e.json["choices"]]
    assert [c["finish_reason"] for c in chunks] == [None, "length"]
    merged = {
        key: [value for c in chunks for value in c["logprobs"][key]]
        for key in whole["choices"][0]["logprobs"]
    }
    assert merged == whole["choices"][0]["logprobs"]


def test_chat_logprobs_in_openai_shape(sim_session, read_sse):
    body, events = _post_all(
        sim_session,
        [
            ("/v1/chat/completions", _chat(logprobs=True, top_logprobs=3)),
            ("/v1/chat/completions", _chat(logprobs=True, top_logprobs=3, stream=True)),
        ],
        read_sse=read_sse,
    )
    choice = body["choices"][0]
    content = choice["logprobs"]["content"]
    assert "".join(entry["token"] for entry in content) == choice["message"]["content"]
    for entry in content:
        assert list(entry) == ["token", "logprob", "bytes", "top_logprobs"]
        assert entry["bytes"] == list(entry["token"].encode())
        assert len(entry["top_logprobs"]) == 3
        assert entry["top_logprobs"][0] == {k: entry[k] for k in ("token", "logprob", "bytes")}
    streamed = [
        entry
        for e in events
        if e.json and e.json["choices"] and e.json["choices"][0]["logprobs"]
        for entry in e.json["choices"][0]["logprobs"]["content"]
    ]
    assert streamed == content
    role = events[0].json["choices"][0]
    assert role["delta"] == {"role": "assistant"} and role["logprobs"] is None


def test_teacher_forced_prompt_logprobs_equal_the_streamed_ones(sim_session, read_sse):
    """Send the prompt's ids plus the streamed answer's ids: prompt_logprobs gives back the
    logprob of each answer token exactly, and the ids agree with /tokenize's."""

    async def scenario():
        async with sim_session(**FAST) as (_, http):
            async with http.post("/tokenize", json={"prompt": PROMPT}) as resp:
                prompt_ids = (await resp.json())["tokens"]
            streamed = _completion(logprobs=0, stream=True, return_tokens_as_token_ids=True)
            async with http.post("/v1/completions", json=streamed) as resp:
                events = [e for e in await read_sse(resp) if e.json and e.json["choices"]]
            logprobs = [e.json["choices"][0]["logprobs"] for e in events]
            tokens = [t for lp in logprobs for t in lp["tokens"]]
            values = [v for lp in logprobs for v in lp["token_logprobs"]]
            answer_ids = [int(t.removeprefix("token_id:")) for t in tokens]
            forced = _completion(prompt_ids + answer_ids, max_tokens=1, prompt_logprobs=0)
            async with http.post("/v1/completions", json=forced) as resp:
                scored = (await resp.json())["choices"][0]["prompt_logprobs"]
            return prompt_ids, answer_ids, values, scored

    prompt_ids, answer_ids, values, scored = asyncio.run(scenario())
    assert scored[0] is None and len(scored) == len(prompt_ids) + len(answer_ids)
    tail = scored[len(prompt_ids) :]
    assert [entry[str(i)]["logprob"] for entry, i in zip(tail, answer_ids, strict=True)] == values
    for entry, i in zip(tail, answer_ids, strict=True):  # each the argmax of its position
        assert entry[str(i)]["logprob"] == max(e["logprob"] for e in entry.values())
    state = context_state(prompt_ids)
    assert answer_ids[0] == Distribution(state).greedy()


def test_echo_scores_the_prompt_first(sim_session):
    (body,) = _post_all(
        sim_session, [("/v1/completions", _completion(echo=True, logprobs=1, max_tokens=2))]
    )
    choice = body["choices"][0]
    logprobs = choice["logprobs"]
    assert choice["text"].startswith(PROMPT)
    assert logprobs["tokens"][:4] == ["the", " quick", " brown", " fox"]
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    assert all(value < 0 for value in logprobs["token_logprobs"][1:])
    # vLLM scores the prompt for echo, and reports it in prompt_logprobs too
    assert choice["prompt_logprobs"][0] is None and len(choice["prompt_logprobs"]) == 4
    quick = choice["prompt_logprobs"][1]
    assert next(iter(quick.values()))["decoded_token"] == " quick"
    assert next(iter(quick.values()))["logprob"] == logprobs["token_logprobs"][1]


def test_bad_logprob_requests_get_vllm_400s(sim_session):
    async def scenario():
        statuses = []
        async with sim_session(**FAST) as (_, http):
            for path, body in [
                ("/v1/completions", _completion(logprobs=21)),
                ("/v1/completions", _completion(prompt_logprobs=1, stream=True)),
                ("/v1/chat/completions", _chat(top_logprobs=2)),
                ("/v1/chat/completions", _chat(logprobs="yes")),
            ]:
                async with http.post(path, json=body) as resp:
                    statuses.append(resp.status)
        return statuses

    assert asyncio.run(scenario()) == [400] * 4


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_requests_without_quality_fields_keep_the_fast_path(sim_session, read_sse, path):
    """No logprobs, no temperature 0, no corruption: the " tok" text and the old fields."""
    body = _completion() if path == "/v1/completions" else _chat()
    plain, streamed = _post_all(
        sim_session, [(path, body), (path, body | {"stream": True})], read_sse=read_sse
    )
    choice = plain["choices"][0]
    assert choice == {
        "index": 0,
        **({"text": " tok" * 6} if "text" in choice else {}),
        **(
            {"message": {"role": "assistant", "content": " tok" * 6}} if "message" in choice else {}
        ),
        "logprobs": None,
        "finish_reason": "length",
    }
    chunks = [e.json["choices"][0] for e in streamed if e.json and e.json["choices"]]
    assert all(
        set(c) == {"index", "text" if "text" in c else "delta", "logprobs", "finish_reason"}
        for c in chunks
    )
    assert all(c["logprobs"] is None for c in chunks)


def test_logprobs_are_normalized():
    dist = Distribution(context_state([1, 2, 3]))
    total = sum(math.exp(dist.logprob(i)) for i in VOCAB_IDS)
    assert 0.99 < total < 1.0  # the rest is spread over the other 31,936 ids
    best = dist.greedy()
    assert dist.top(1) == [best]
    ties = sum(1 for i in VOCAB_IDS if dist.logprob(i) >= dist.logprob(best))
    assert dist.rank(best) == ties  # vLLM's rank counts the ids at least as likely


def test_the_probes_neutral_sampling_and_cache_salt_are_accepted_and_ignored(sim_session):
    """The quality client sends vLLM's sampling fields at their no-op values and a
    cache_salt per pass (bench.quality.client): the simulator answers as without them."""
    extra = {**NEUTRAL_SAMPLING["vllm"], "cache_salt": "servelab-quality-r-before"}
    plain, neutral, chat_plain, chat_neutral = _post_all(
        sim_session,
        [
            ("/v1/completions", _completion(temperature=0, logprobs=2)),
            ("/v1/completions", _completion(temperature=0, logprobs=2, **extra)),
            ("/v1/chat/completions", _chat(temperature=0)),
            ("/v1/chat/completions", _chat(temperature=0, **extra)),
        ],
    )
    assert neutral["choices"][0]["text"] == plain["choices"][0]["text"]
    assert neutral["choices"][0]["logprobs"] == plain["choices"][0]["logprobs"]
    assert chat_neutral["choices"][0]["message"] == chat_plain["choices"][0]["message"]
