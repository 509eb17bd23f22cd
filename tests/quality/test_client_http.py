"""A full pass and a teacher-forced pass over HTTP, against servers on 127.0.0.1 that
answer in recorded vLLM shapes (and a transformers serve that rejects logprobs)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from servelab.bench.endpoint import Api
from servelab.bench.quality.client import QualityClient, QualityTarget
from servelab.bench.quality.evaluate import evaluate_quality
from servelab.bench.quality.greedy import TOP_LOGPROBS
from servelab.bench.quality.probes import make_probes
from servelab.bench.quality.results import QualityPass

BOS = 1
GENERATED = 5


def _logprob(token: int, shift: float) -> float:
    return -((token % 7) / 10 + 0.05) - shift


def _ids(text: str) -> list[int]:
    return [sum(map(ord, w)) % 900 + 2 for w in text.split()]


class FakeVllm:
    """vLLM's answers, in its shapes: /tokenize, /v1/completions streamed with
    return_tokens_as_token_ids, and prompt_logprobs on a prompt of ids."""

    def __init__(self, *, shift: float = 0.0) -> None:
        self.shift = shift
        self.bodies: list[tuple[str, dict[str, Any]]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/v1/completions", self.completions)
        return app

    async def tokenize(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(("/tokenize", body))
        tokens = ([BOS] if body.get("add_special_tokens", True) else []) + _ids(body["prompt"])
        return web.json_response({"count": len(tokens), "max_model_len": 8192, "tokens": tokens})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(("/v1/completions", body))
        if "prompt_logprobs" in body:
            return self._prompt_logprobs(body)
        prompt = [BOS, *_ids(body["prompt"])]
        out = [(sum(prompt) * 7 + 13 * k) % 500 + 10 for k in range(GENERATED)]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for token in out:
            choice: dict[str, Any] = {"index": 0, "text": f" w{token}", "finish_reason": None}
            if body.get("logprobs") is not None:
                choice["logprobs"] = {
                    "text_offset": [0],
                    "token_logprobs": [_logprob(token, self.shift)],
                    "tokens": [f"token_id:{token}"],
                    "top_logprobs": [{f"token_id:{token}": _logprob(token, self.shift)}],
                }
            await response.write(_event({"id": "cmpl-1", "choices": [choice]}))
        last = {"index": 0, "text": "", "finish_reason": "length", "stop_reason": None}
        await response.write(_event({"id": "cmpl-1", "choices": [last]}))
        usage = {"prompt_tokens": len(prompt), "completion_tokens": GENERATED}
        await response.write(_event({"id": "cmpl-1", "choices": [], "usage": usage}))
        await response.write(b"data: [DONE]\n\n")
        return response

    def _prompt_logprobs(self, body: dict[str, Any]) -> web.StreamResponse:
        prompt: list[int] = body["prompt"]
        entries: list[Any] = [None]
        for token in prompt[1:]:
            entries.append(
                {
                    str(token): {
                        "logprob": _logprob(token, self.shift),
                        "rank": 1,
                        "decoded_token": f" w{token}",
                    }
                }
            )
        answer = {
            "id": "cmpl-2",
            "object": "text_completion",
            "choices": [
                {
                    "index": 0,
                    "text": " x",
                    "logprobs": None,
                    "finish_reason": "length",
                    "prompt_logprobs": entries,
                }
            ],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": 1},
        }
        return web.Response(text=json.dumps(answer), content_type="application/json")


class FakeTransformers:
    """transformers serve: chat only, and a 400 to any request with logprobs."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        if "logprobs" in body:
            return web.json_response({"error": "logprobs is not supported"}, status=400)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for piece in ("It", " is", " so"):
            await response.write(_event({"choices": [{"index": 0, "delta": {"content": piece}}]}))
        end = {"index": 0, "delta": {}, "finish_reason": "length"}
        await response.write(_event({"choices": [end], "usage": {"completion_tokens": 3}}))
        await response.write(b"data: [DONE]\n\n")
        return response


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _serve(app: web.Application, work: Callable[[str], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        runner = web.AppRunner(app)
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        site = web.SockSite(runner, sock)
        await site.start()
        try:
            return await work(f"http://127.0.0.1:{sock.getsockname()[1]}")
        finally:
            await runner.cleanup()

    return asyncio.run(main())


def test_vllm_pass_and_teacher_forced_pass_over_http() -> None:
    probes = make_probes(6, seed=11)
    server = FakeVllm()

    async def work(url: str) -> tuple[QualityPass, QualityPass, QualityClient]:
        target = QualityTarget(base_url=url, model="m", engine="vllm")
        async with QualityClient(target) as client:
            before = await client.run_pass(probes, name="before", concurrency=3)
            after = await client.run_pass(
                probes, name="after", forced_on={"before": before}, force_own=False
            )
        return before, after, client

    before, after, client = _serve(server.app(), work)
    assert client.logprobs_available and client.forced_method == "prompt_logprobs"
    assert before.errors == {} and after.errors == {}
    reading = before.readings[0]
    assert reading.ok and reading.token_source == "ids" and len(reading.token_ids or []) == 5
    assert reading.logprobs == [_logprob(t, 0.0) for t in reading.token_ids or []]
    assert [s.on for s in before.forced] == ["before"]
    assert [s.on for s in after.forced] == ["before"]
    forced = before.forced[0].readings[0]
    assert forced.ok and forced.logprobs == reading.logprobs and forced.top1 == [True] * 5
    assert before.wall_s > 0 and before.forced[0].wall_s > 0

    free = [
        b
        for path, b in server.bodies
        if path == "/v1/completions" and "prompt" in b and isinstance(b["prompt"], str)
    ]
    # 2 top logprobs: the position's best is listed beside the sampled token (not_greedy)
    assert all(b["temperature"] == 0 and b["logprobs"] == TOP_LOGPROBS == 2 for b in free)
    assert all(b["return_tokens_as_token_ids"] is True for b in free)
    scored = [b for path, b in server.bodies if "prompt_logprobs" in b]
    prompt_ids = [BOS, *_ids(probes[0].prompt)]
    assert scored[0]["prompt"] == prompt_ids + (reading.token_ids or [])
    assert scored[0]["max_tokens"] == 1 and scored[0]["prompt_logprobs"] == 1
    # the prompt was tokenized once per probe, then cached across passes
    assert sum(path == "/tokenize" for path, _ in server.bodies) == len(probes)

    result = evaluate_quality(
        probes=probes,
        seed=11,
        engine="vllm",
        passes=[before, after],
        logprobs_available=True,
        forced_method="prompt_logprobs",
    )
    (determinism,) = result.comparisons
    assert determinism.verdict == "within_floor"
    assert determinism.metrics.mean_abs_dlogprob == 0.0
    assert determinism.metrics.exact_match_rate == 1.0


def test_shifted_logprobs_over_http_are_drift() -> None:
    probes = make_probes(12, seed=11)
    plain, shifted = FakeVllm(), FakeVllm(shift=0.01)

    async def reference(url: str) -> QualityPass:
        async with QualityClient(QualityTarget(base_url=url, model="m", engine="vllm")) as c:
            return await c.run_pass(probes, name="before")

    before = _serve(plain.app(), reference)

    async def candidate(url: str) -> QualityPass:
        async with QualityClient(QualityTarget(base_url=url, model="m", engine="vllm")) as c:
            return await c.run_pass(
                probes, name="loaded", forced_on={"before": before}, force_own=False, loaded=True
            )

    loaded = _serve(shifted.app(), candidate)
    result = evaluate_quality(
        probes=probes,
        seed=11,
        engine="vllm",
        passes=[before, loaded],
        logprobs_available=True,
        forced_method="prompt_logprobs",
    )
    (batch,) = result.comparisons
    assert batch.kind == "batch_invariance"
    assert batch.primary_value == pytest.approx(0.01)
    assert batch.verdict == "drift"


def test_transformers_serve_is_greedy_only_and_says_so() -> None:
    probes = make_probes(4, seed=2)
    server = FakeTransformers()

    async def work(url: str) -> tuple[QualityPass, QualityClient]:
        target = QualityTarget(base_url=url, model="m", engine="transformers")
        async with QualityClient(target) as client:
            return await client.run_pass(probes, name="before"), client

    run, client = _serve(server.app(), work)
    assert not client.logprobs_available
    assert "transformers serve rejects" in (client.logprobs_reason or "")
    assert client.forced_method is None and run.forced == []
    assert all("logprobs" not in b for b in server.bodies)
    assert all(r.ok and r.text == "It is so" and r.logprobs is None for r in run.readings)


def test_a_400_to_logprobs_turns_them_off() -> None:
    """An OpenAI chat endpoint that refuses logprobs: one refused request, then greedy
    only, with the reason (echo cannot score chat probes, so no teacher forcing either)."""
    probes = make_probes(3, seed=2)
    server = FakeTransformers()

    async def chat_work(url: str) -> tuple[QualityPass, QualityClient]:
        target = QualityTarget(base_url=url, model="m", engine="openai", api=Api.CHAT)
        async with QualityClient(target) as client:
            return await client.run_pass(probes, name="before"), client

    run, client = _serve(server.app(), chat_work)
    assert not client.logprobs_available
    assert "HTTP 400" in (client.logprobs_reason or "")
    [asked] = [b for b in server.bodies if "logprobs" in b]
    assert asked["logprobs"] is True and asked["top_logprobs"] == TOP_LOGPROBS
    assert all(r.ok for r in run.readings) and run.errors == {}


def test_unreachable_server_is_a_transport_error_per_probe() -> None:
    probes = make_probes(2, seed=2)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()

    async def work() -> QualityPass:
        target = QualityTarget(base_url=f"http://127.0.0.1:{port}", model="m", engine="vllm")
        async with QualityClient(target) as client:
            return await client.run_pass(probes, name="before")

    run = asyncio.run(work())
    assert run.errors == {"transport": 2}
    assert all(r.error_kind == "transport" for r in run.readings)


class FakeSglang(FakeVllm):
    """SGLang's answers: token strings (no ids) in the stream, /tokenize, and /generate
    with input_token_logprobs from logprob_start_len on."""

    def app(self) -> web.Application:
        app = super().app()
        app.router.add_post("/generate", self.generate)
        return app

    async def tokenize(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(("/tokenize", body))
        special = body.get("add_special_tokens", True)
        words = body["prompt"].split()
        # the stream's " w<id>" pieces tokenize back to <id>
        ids = [int(w[1:]) if w[1:].isdigit() else _ids(w)[0] for w in words]
        tokens = ([BOS] if special else []) + ids
        return web.json_response({"tokens": tokens, "count": len(tokens)})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(("/v1/completions", body))
        prompt = [BOS, *_ids(body["prompt"])]
        out = [(sum(prompt) * 7 + 13 * k) % 500 + 10 for k in range(GENERATED)]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for token in out:
            lp = {"tokens": [f" w{token}"], "token_logprobs": [_logprob(token, 0.0)]}
            choice = {"index": 0, "text": f" w{token}", "logprobs": lp, "finish_reason": None}
            await response.write(_event({"choices": [choice]}))
        usage = {"completion_tokens": GENERATED}
        last = {"index": 0, "text": "", "finish_reason": "length"}
        await response.write(_event({"choices": [last], "usage": usage}))
        await response.write(b"data: [DONE]\n\n")
        return response

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(("/generate", body))
        ids: list[int] = body["input_ids"]
        start = body["logprob_start_len"]
        scored = [
            [None if i == 0 else _logprob(t, self.shift), t, None] for i, t in enumerate(ids)
        ][start:]
        tops = [[[lp, t, None]] for lp, t, _ in scored]
        meta = {
            "prompt_tokens": len(ids),
            "completion_tokens": 1,
            "input_token_logprobs": scored,
            "input_top_logprobs": tops,
        }
        return web.json_response({"text": " x", "meta_info": meta})


def test_sglang_teacher_forcing_through_generate() -> None:
    probes = make_probes(4, seed=8)
    server = FakeSglang()

    async def work(url: str) -> tuple[QualityPass, QualityClient]:
        target = QualityTarget(base_url=url, model="m", engine="sglang")
        async with QualityClient(target) as client:
            return await client.run_pass(probes, name="before"), client

    run, client = _serve(server.app(), work)
    assert client.forced_method == "sglang_generate" and run.errors == {}
    reading = run.readings[0]
    assert reading.token_source == "logprobs" and reading.token_ids is None
    forced = run.forced[0].readings[0]
    assert forced.ok and forced.logprobs == reading.logprobs and forced.top1 == [True] * 5
    generate = next(b for path, b in server.bodies if path == "/generate")
    prompt = [BOS, *_ids(probes[0].prompt)]
    assert generate["logprob_start_len"] == len(prompt) - 1
    assert generate["return_logprob"] is True
