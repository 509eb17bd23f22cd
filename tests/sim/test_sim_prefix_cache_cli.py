"""`servelab sim`'s prefix-cache flags, as a process started from them."""

from __future__ import annotations

import asyncio

import aiohttp
from typer.testing import CliRunner

from servelab.cli import app

PROMPTS = [" ".join([*(f"s{i}" for i in range(20)), tail]) for tail in ("a", "b")]


def _hits_and_usage(url: str) -> tuple[str, str]:
    async def scenario() -> tuple[str, str]:
        async with aiohttp.ClientSession(base_url=url) as http:
            for prompt in PROMPTS:
                body = {"model": "servelab-sim", "prompt": prompt, "max_tokens": 2}
                async with http.post("/v1/completions", json=body) as resp:
                    answer = await resp.text()
            async with http.get("/metrics") as resp:
                metrics = await resp.text()
        return answer, metrics

    return asyncio.run(scenario())


def test_block_size_cache_report_and_the_off_switch_from_flags(start_sim):
    on = start_sim(ttft_ms=1, itl_ms=1, metrics_style="vllm", block_size=8, cache_report=True)
    answer, metrics = _hits_and_usage(on.url)
    assert '"prompt_tokens_details":{"cached_tokens":16}' in answer  # 2 blocks of the 20 words
    assert 'vllm:prefix_cache_hits_total{engine="0",model_name="servelab-sim"} 16.0' in metrics
    off = start_sim(ttft_ms=1, itl_ms=1, metrics_style="vllm", prefix_cache=False)
    answer, metrics = _hits_and_usage(off.url)
    assert "prompt_tokens_details" not in answer
    assert 'vllm:prefix_cache_hits_total{engine="0",model_name="servelab-sim"} 0.0' in metrics


def test_block_size_without_the_cache_is_a_one_line_error():
    result = CliRunner().invoke(
        app, ["sim", "--port", "0", "--no-prefix-cache", "--block-size", "8"]
    )
    assert result.exit_code == 2
    assert "--block-size sizes the prefix cache" in result.output
    assert result.output.strip().count("\n") == 0


def test_help_says_the_cache_is_on_by_default():
    result = CliRunner().invoke(app, ["sim", "--help"], env={"COLUMNS": "200"})
    assert "--no-prefix-cache" in result.output and "on by default" in result.output
