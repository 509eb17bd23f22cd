"""`servelab bench` records what the engine says about itself in summary.json: against the
simulator (vLLM's /v1/models card, SGLang's /server_info) and against a server that has
neither, where the run goes on without them. All traffic stays on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from servelab.diagnose.server_settings import settings_from_server_info
from servelab.engines.server_info import ServerInfo
from servelab.sim.config import MAX_MODEL_LEN
from tests.conftest import SERVELAB

MODEL = "bare-model"


def bench(url: str, out: Path, *args: str) -> dict[str, Any]:
    """`servelab bench --url` for one short level; summary.json once it exits 0."""
    result = subprocess.run(
        [
            *SERVELAB,
            *("bench", "--url", url, "--concurrency", "1", "--num-requests", "2"),
            *("--input-len", "8", "--output-len", "4", "--warmup", "0"),
            *("--out", str(out), "--runs-dir", str(out.parent / "runs")),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def test_the_simulators_context_length_and_server_args_land_in_the_summary(start_sim, tmp_path):
    sim = start_sim(ttft_ms=5, itl_ms=1, max_running_requests=4)
    summary = bench(sim.url, tmp_path / "run")
    assert summary["status"] == "complete"
    info = ServerInfo.model_validate(summary["run"]["server_info"])
    assert info.models.url == f"{sim.url}/v1/models"
    assert info.max_model_len == {"servelab-sim": MAX_MODEL_LEN}
    assert info.server_args_url == f"{sim.url}/server_info"
    assert info.server_args["max_running_requests"] == 4
    settings = settings_from_server_info(info, model="servelab-sim")
    assert settings["max_model_len"] == (
        MAX_MODEL_LEN,
        f"GET /v1/models: max_model_len={MAX_MODEL_LEN}",
    )
    assert settings["max_running_requests"] == (4, "GET /server_info: max_running_requests=4")


def test_a_vllm_style_simulator_has_no_server_info(start_sim, tmp_path):
    sim = start_sim(ttft_ms=5, itl_ms=1, metrics_style="vllm")
    info = ServerInfo.model_validate(bench(sim.url, tmp_path / "run")["run"]["server_info"])
    assert info.max_model_len == {"servelab-sim": MAX_MODEL_LEN}
    assert [r.outcome for r in info.server_args_reads] == ["absent", "absent"]
    assert info.server_args == {}


async def _chat(request: web.Request) -> web.StreamResponse:
    """A chat completion of max_tokens chunks; usage counts the prompt's words."""
    body = await request.json()
    words = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
    tokens = int(body.get("max_tokens") or 4)
    usage = {"prompt_tokens": words, "completion_tokens": tokens, "total_tokens": words + tokens}
    base = {"id": "c", "created": 0, "model": MODEL}
    if not body.get("stream"):
        message = {"role": "assistant", "content": " tok" * tokens}
        choice = {"index": 0, "message": message, "finish_reason": "length"}
        return web.json_response(
            {**base, "object": "chat.completion", "choices": [choice]} | {"usage": usage}
        )
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for _ in range(tokens):
        delta = {"index": 0, "delta": {"content": " tok"}, "finish_reason": None}
        chunk = {**base, "object": "chat.completion.chunk", "choices": [delta]}
        await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
    last = {**base, "object": "chat.completion.chunk", "choices": [], "usage": usage}
    await response.write(b"data: " + orjson.dumps(last) + b"\n\ndata: [DONE]\n\n")
    await response.write_eof()
    return response


@pytest.fixture
def bare_server() -> Iterator[str]:
    """An OpenAI-style server on 127.0.0.1 that serves chat completions and 404s all else
    (/v1/models, /tokenize, /server_info, /get_server_info, /metrics)."""
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _chat)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    loop.run_until_complete(web.SockSite(runner, sock).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


def test_a_server_without_the_endpoints_records_them_absent_and_the_bench_succeeds(
    bare_server, tmp_path
):
    summary = bench(bare_server, tmp_path / "run", "--model", MODEL)
    assert summary["status"] == "complete"
    assert summary["levels"][0]["completed"] == 2
    info = ServerInfo.model_validate(summary["run"]["server_info"])
    assert info.models.outcome == "absent"
    assert info.max_model_len == {}
    assert [(r.url, r.outcome) for r in info.server_args_reads] == [
        (f"{bare_server}/server_info", "absent"),
        (f"{bare_server}/get_server_info", "absent"),
    ]
    assert settings_from_server_info(info) == {}
