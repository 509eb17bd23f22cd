"""What an engine says about itself, read from a loopback server answering the engines'
real JSON shapes (vLLM's ModelCard; SGLang's /server_info, trimmed from its documented
output), and the settings diagnose gets from it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import ClientSession, web

from servelab.bench.results import RunInfo
from servelab.core.redact import MASK
from servelab.diagnose.server_settings import settings_from_server_info
from servelab.engines.server_info import ServerInfo, read_server_info

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# vllm/entrypoints/openai/engine/protocol.py ModelCard, as models/serving.py fills it: the
# base model with the engine's max_model_len, then a LoRA adapter's card without one.
VLLM_MODELS = {
    "object": "list",
    "data": [
        {
            "id": "meta-llama/Llama-3.1-8B-Instruct",
            "object": "model",
            "created": 1767225600,
            "owned_by": "vllm",
            "root": "/models/llama-3.1-8b",
            "parent": None,
            "max_model_len": 32768,
            "permission": [{"id": "modelperm-1", "object": "model_permission"}],
        },
        {
            "id": "sql-lora",
            "object": "model",
            "created": 1767225600,
            "owned_by": "vllm",
            "root": "/adapters/sql",
            "parent": "meta-llama/Llama-3.1-8B-Instruct",
            "max_model_len": None,
            "permission": [{"id": "modelperm-2", "object": "model_permission"}],
        },
    ],
}
SGLANG_MODELS = {
    "object": "list",
    "data": [
        {
            "id": "qwen/qwen2.5-0.5b-instruct",
            "object": "model",
            "created": 1767225600,
            "owned_by": "sglang",
            "root": "qwen/qwen2.5-0.5b-instruct",
            "max_model_len": 32768,
        }
    ],
}
API_KEY = "sk-servelab-test-7f3a9c"
# SGLang's /server_info: ServerArgs fields, then scheduler_info, internal_states, version.
SGLANG_SERVER_INFO: dict[str, Any] = {
    "model_path": "qwen/qwen2.5-0.5b-instruct",
    "tokenizer_path": "qwen/qwen2.5-0.5b-instruct",
    "context_length": None,
    "host": "0.0.0.0",
    "port": 30000,
    "ssl_keyfile_password": None,
    "kv_cache_dtype": "auto",
    "mem_fraction_static": 0.907,
    "max_running_requests": 128,
    "max_total_tokens": 20480,
    "chunked_prefill_size": 8192,
    "max_prefill_tokens": 16384,
    "tp_size": 1,
    "api_key": API_KEY,
    "admin_api_key": None,
    "served_model_name": "qwen/qwen2.5-0.5b-instruct",
    "attention_backend": "fa3",
    "cuda_graph_max_bs": 4,
    "cuda_graph_bs": [1, 2, 4],
    "disable_cuda_graph": False,
    "status": "ready",
    "max_total_num_tokens": 20480,
    "max_req_input_len": 20474,
    "internal_states": [
        {
            "model_path": "qwen/qwen2.5-0.5b-instruct",
            "api_key": API_KEY,
            "last_gen_throughput": 714.1,
            "memory_usage": {"weight": 0.9, "kvcache": 0.23, "token_capacity": 20480},
            "effective_max_running_requests_per_dp": 128,
        }
    ],
    "version": "0.5.4",
}


def json_route(body: Any, status: int = 200) -> Handler:
    async def handle(_request: web.Request) -> web.StreamResponse:
        return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")

    return handle


def text_route(text: str, status: int = 200) -> Handler:
    async def handle(_request: web.Request) -> web.StreamResponse:
        return web.Response(text=text, status=status)

    return handle


def slow_route(delay_s: float) -> Handler:
    async def handle(_request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(delay_s)
        return web.json_response({})

    return handle


def read_from(routes: dict[str, Handler], **options: Any) -> tuple[ServerInfo, list[str]]:
    """read_server_info against a server on 127.0.0.1 with `routes` (all else 404), and the
    paths it was asked for."""
    asked: list[str] = []

    @web.middleware
    async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
        asked.append(request.path)
        return await handler(request)

    async def main() -> ServerInfo:
        app = web.Application(middlewares=[record])
        for path, handler in routes.items():
            app.router.add_get(path, handler)
        runner = web.AppRunner(app)
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(runner, sock).start()
        try:
            async with ClientSession() as session:
                url = f"http://127.0.0.1:{sock.getsockname()[1]}"
                return await read_server_info(url, session, **options)
        finally:
            await runner.cleanup()

    return asyncio.run(main()), asked


def outcomes(info: ServerInfo) -> list[str]:
    return [read.outcome for read in info.server_args_reads]


def test_vllm_model_cards_give_max_model_len_and_no_server_args():
    info, asked = read_from({"/v1/models": json_route(VLLM_MODELS)})
    assert info.models.outcome == "read"
    assert info.models.url.endswith("/v1/models")
    assert info.max_model_len == {"meta-llama/Llama-3.1-8B-Instruct": 32768, "sql-lora": None}
    assert outcomes(info) == ["absent", "absent"]
    assert asked == ["/v1/models", "/server_info", "/get_server_info"]
    assert info.server_args == {} and info.server_args_url is None
    assert settings_from_server_info(info) == {
        "max_model_len": (
            32768,
            "GET /v1/models: max_model_len=32768 (model meta-llama/Llama-3.1-8B-Instruct)",
        )
    }


def test_sglang_server_info_is_read_from_the_new_path_without_asking_the_old_one():
    info, asked = read_from(
        {"/v1/models": json_route(SGLANG_MODELS), "/server_info": json_route(SGLANG_SERVER_INFO)}
    )
    assert asked == ["/v1/models", "/server_info"]
    assert outcomes(info) == ["read"]
    assert info.server_args_url is not None and info.server_args_url.endswith("/server_info")
    args = info.server_args
    assert args["max_running_requests"] == 128
    assert args["max_total_num_tokens"] == 20480
    assert args["cuda_graph_bs"] == [1, 2, 4]
    assert args["version"] == "0.5.4"
    assert "internal_states" not in args
    settings = settings_from_server_info(info)
    assert settings["max_model_len"] == (32768, "GET /v1/models: max_model_len=32768")
    assert settings["chunked_prefill_size"] == (8192, "GET /server_info: chunked_prefill_size=8192")
    assert settings["disable_cuda_graph"] == (False, "GET /server_info: disable_cuda_graph=False")
    assert "context_length" not in settings  # null: SGLang left it to the model


def test_secret_server_args_are_masked_before_they_are_kept():
    info, _ = read_from({"/server_info": json_route(SGLANG_SERVER_INFO)})
    assert info.server_args["api_key"] == MASK
    assert info.server_args["admin_api_key"] is None  # unset stays visibly unset
    assert API_KEY not in info.model_dump_json()
    assert settings_from_server_info(info)["api_key"] == (MASK, f"GET /server_info: api_key={MASK}")


def test_an_older_sglang_is_read_at_get_server_info():
    info, asked = read_from({"/get_server_info": json_route(SGLANG_SERVER_INFO)})
    assert asked == ["/v1/models", "/server_info", "/get_server_info"]
    assert info.models.outcome == "absent"
    assert outcomes(info) == ["absent", "read"]
    assert info.server_args_url is not None and info.server_args_url.endswith("/get_server_info")
    assert settings_from_server_info(info)["tp_size"] == (1, "GET /get_server_info: tp_size=1")


def test_failures_are_recorded_with_their_reason_and_stop_nothing():
    info, asked = read_from(
        {"/v1/models": text_route("oops", status=500), "/server_info": text_route("<html>")}
    )
    assert (info.models.outcome, info.models.reason) == ("unavailable", "HTTP 500")
    assert [(r.outcome, r.reason) for r in info.server_args_reads] == [
        ("unavailable", "the body is not JSON")
    ]
    assert asked == ["/v1/models", "/server_info"]  # not absent: the old name is not asked
    assert settings_from_server_info(info) == {}


def test_a_body_of_the_wrong_shape_is_unavailable():
    info, _ = read_from(
        {
            "/v1/models": json_route({"models": ["m"]}),
            # vLLM's development-mode /server_info (VLLM_SERVER_DEV_MODE=1)
            "/server_info": json_route({"vllm_config": "model='m', max_model_len=4096"}),
        }
    )
    assert info.models.outcome == "unavailable"
    assert info.models.reason == "not a model list (no data array of model cards)"
    assert (
        info.server_args_reads[0].reason == "not SGLang's server info (no model_path and tp_size)"
    )
    assert info.server_args == {}


def test_a_server_that_does_not_answer_in_time_is_unavailable():
    info, _ = read_from(
        {"/v1/models": slow_route(1.0), "/server_info": slow_route(1.0)}, timeout_s=0.2
    )
    assert (info.models.outcome, info.models.reason) == ("unavailable", "no answer within 0.2 s")
    assert info.server_args_reads[0].reason == "no answer within 0.2 s"


def test_nothing_listening_is_unavailable_not_an_exception():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()

    async def main() -> ServerInfo:
        async with ClientSession() as session:
            return await read_server_info(f"http://127.0.0.1:{port}/", session)

    info = asyncio.run(main())
    assert info.models.outcome == "unavailable"
    assert info.models.reason is not None and "ClientConnectorError" in info.models.reason
    assert outcomes(info) == ["unavailable"]


def test_the_chosen_model_card_gives_max_model_len():
    info = ServerInfo.model_validate(
        {
            "models": {"url": "http://h:8000/v1/models", "outcome": "read"},
            "max_model_len": {"a": 4096, "b": 8192, "lora": None},
        }
    )
    assert settings_from_server_info(info, model="b")["max_model_len"] == (
        8192,
        "GET /v1/models: max_model_len=8192 (model b)",
    )
    assert settings_from_server_info(info, model="lora")["max_model_len"][0] == 4096
    assert settings_from_server_info(info, model="gone")["max_model_len"][0] == 4096


def test_a_run_recorded_before_server_info_still_reads():
    run = {
        "name": "old",
        "command": [],
        "started_utc": "2026-01-01T00:00:00+00:00",
        "servelab_version": "0.1.0",
        "versions": {},
        "git_sha": None,
        "host": {},
        "target": {"url": "http://127.0.0.1:8000"},
        "workload": {},
        "load": {},
    }
    assert RunInfo.model_validate(run).server_info is None
