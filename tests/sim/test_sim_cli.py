"""`servelab sim`'s flags: the two modes, and their mistakes as one line and exit 2."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from typer.testing import CliRunner

from servelab.cli import app


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--step-base-ms", "5", "--workers", "2"], "--workers must be 1 with continuous batching"),
        (
            ["--profile", "nope"],
            "unknown profile 'nope'; known: glm5-rtxpro6000-tp8, linear, model",
        ),
        (["--profile", "linear", "--itl-ms", "3"], "--itl-ms is a fixed timing"),
        (["--kv-capacity-tokens", "100"], "--kv-capacity-tokens needs continuous batching"),
        (["--step-overhead-ms", "1"], "--step-overhead-ms needs continuous batching"),
        (["--step-base-ms", "1", "--profile", "other"], "describes the linear profile"),
        (["--profile", "linear", "--chunked-prefill-size", "0"], "at least 1, got 0"),
        (["--max-running-requests", "0"], "--max-running-requests must be at least 1"),
        (["--metrics-style", "tgi"], "--metrics-style: Input should be 'sglang' or 'vllm'"),
    ],
)
def test_bad_flags_are_one_line_errors(args, message):
    result = CliRunner().invoke(app, ["sim", "--port", "0", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert result.output.strip().count("\n") == 0
    assert "Traceback" not in result.output


def test_the_batching_engine_runs_as_a_process_from_its_flags(start_sim, chat):
    sim = start_sim(
        step_base_ms=5, step_per_seq_ms=1, max_running_requests=2, metrics_style="vllm", seed=3
    )

    async def scenario():
        async with aiohttp.ClientSession(base_url=sim.url) as http:
            async with http.post("/v1/chat/completions", json=chat(4)) as resp:
                text = await resp.text()
            async with http.get("/metrics") as resp:
                metrics = await resp.text()
            async with http.get("/sim/stats") as resp:
                stats = await resp.json()
        return text, metrics, stats

    text, metrics, stats = asyncio.run(scenario())
    assert text.count('"content":" tok"') == 4
    assert "vllm:generation_tokens_total" in metrics
    assert stats["steps"] == 4
