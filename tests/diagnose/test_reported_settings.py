"""What the engine reported about itself at the bench's preflight enters diagnose's facts:
settings named with the endpoint they were read from, after the command and the log."""

from __future__ import annotations

from pathlib import Path

from servelab.diagnose.engineconf import engine_config
from servelab.diagnose.server_settings import settings_from_server_info
from servelab.engines.server_info import EndpointRead, ServerInfo
from tests.diagnose.builders import diagnose, level, summary, write_run

SGLANG_INFO = ServerInfo(
    models=EndpointRead(url="http://127.0.0.1:30000/v1/models", outcome="read"),
    max_model_len={"qwen/qwen2.5-0.5b-instruct": 32768},
    server_args_reads=[EndpointRead(url="http://127.0.0.1:30000/server_info", outcome="read")],
    server_args={
        "model_path": "qwen/qwen2.5-0.5b-instruct",
        "tp_size": 1,
        "max_running_requests": 48,
        "chunked_prefill_size": 8192,
        "max_prefill_tokens": 16384,
        "max_total_num_tokens": 409_600,
        "mem_fraction_static": 0.88,
        "cuda_graph_max_bs": None,
    },
)


def _reported() -> dict[str, tuple[object, str]]:
    return settings_from_server_info(SGLANG_INFO)


def test_an_attached_engine_s_reported_limits_are_its_configuration():
    conf = engine_config("sglang", [], [], _reported())
    assert conf.running_cap is not None and conf.running_cap.value == 48
    assert conf.running_cap.source == "GET /server_info: max_running_requests=48"
    assert conf.kv_capacity_tokens is not None and conf.kv_capacity_tokens.value == 409_600
    assert conf.max_batch_tokens is not None and conf.max_batch_tokens.value == 16384
    assert conf.resolved["max_model_len"].source == "GET /v1/models: max_model_len=32768"
    assert "cuda_graph_max_bs" not in conf.resolved  # a null arg is the engine's default


def test_the_command_comes_before_what_the_engine_reports():
    command = ["python3", "-m", "sglang.launch_server", "--max-running-requests", "64"]
    conf = engine_config("sglang", command, [], _reported())
    assert conf.running_cap is not None and conf.running_cap.value == 64
    assert conf.running_cap.source == "engine command: --max-running-requests 64"
    assert conf.resolved["max_running_requests"].value == 64


def test_diagnosis_lists_the_reported_settings_with_their_endpoint(tmp_path: Path):
    levels = [
        level(0, 1, total_tps=100.0, tpot_ms=10.0, ttft_ms=40.0),
        level(1, 4, total_tps=390.0, tpot_ms=10.2, ttft_ms=41.0),
    ]
    run = summary(levels)
    run.run.server_info = SGLANG_INFO
    found = diagnose(write_run(tmp_path, run), engine="sglang")
    listed = {c.name: c for c in found.configuration}
    assert listed["mem_fraction_static"].value == 0.88
    assert listed["mem_fraction_static"].source == "GET /server_info: mem_fraction_static=0.88"
    assert listed["max_model_len"].value == 32768
