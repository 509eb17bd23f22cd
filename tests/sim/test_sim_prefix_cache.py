"""The prefix cache over HTTP, against real simulator processes: hits in whole blocks,
the off switch, LRU eviction in a small KV cache, the prefill a hit saves, and the
engines' own counter names."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from servelab.sim import SimConfig, read_truth

SHARED = " ".join(f"shared{i}" for i in range(40))

SERVE = """
import sys
from servelab.sim import SimConfig, serve
serve(SimConfig.model_validate_json(sys.argv[1]), on_ready=lambda url: print(url, flush=True))
"""


def _words(name: str, n: int) -> str:
    return " ".join(f"{name}{i}" for i in range(n))


@pytest.fixture
def sim_process() -> Iterator[Callable[..., str]]:
    """`sim_process(**config)`: the URL of `serve(SimConfig(...))` in its own process, for
    settings `servelab sim` has no flag for; each is stopped (SIGTERM) after the test."""
    started: list[subprocess.Popen[str]] = []

    def start(**config: Any) -> str:
        settings = SimConfig(port=0, **config).model_dump_json()
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVE, settings], stdout=subprocess.PIPE, text=True
        )
        started.append(proc)
        assert proc.stdout is not None
        return proc.stdout.readline().strip()

    yield start
    for proc in started:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _one_by_one(url: str, bodies: list[dict[str, Any]], path: str = "/v1/completions"):
    """Send the bodies one after the other; each answer, then /metrics and /sim/stats."""

    async def scenario():
        answers = []
        async with aiohttp.ClientSession(base_url=url) as http:
            for index, body in enumerate(bodies):
                headers = {"X-Request-Id": f"r{index}"}
                async with http.post(path, json=body, headers=headers) as resp:
                    assert resp.status == 200
                    answers.append(await resp.text())
            async with http.get("/metrics") as resp:
                metrics = await resp.text()
            async with http.get("/sim/stats") as resp:
                stats = await resp.json()
        return answers, metrics, stats

    return asyncio.run(scenario())


def _prompt(text: str, max_tokens: int = 4, **extra: Any) -> dict[str, Any]:
    return {"model": "servelab-sim", "prompt": text, "max_tokens": max_tokens, **extra}


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def _types(text: str) -> dict[str, str]:
    """Each metric family's type, by its name (a counter's without `_total`)."""
    return {family.name: family.type for family in text_string_to_metric_families(text)}


def _cached(path: Path) -> list[int]:
    """Each request's cached tokens from the truth log, in request order."""
    records = sorted(read_truth(path), key=lambda r: int(r.request_id[1:]))
    return [r.cached_tokens for r in records]


def test_a_shared_prefix_hits_in_whole_blocks_under_vllms_counters(start_sim, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_sim(metrics_style="vllm", ttft_ms=1, itl_ms=1, record=str(truth))
    bodies = [
        _prompt(f"{SHARED} {_words('a', 10)}"),
        _prompt(f"{SHARED} {_words('b', 10)}"),  # 40 shared words: 2 blocks of 16
        _prompt(f"{SHARED} {_words('a', 10)}"),  # all 50 again: 3 blocks, 48 tokens
        _prompt(_words("shared", 32)),  # 2 full blocks cached, but the last token is not
    ]
    answers, metrics, stats = _one_by_one(sim.url, bodies)
    sim.stop()
    assert _cached(truth) == [0, 32, 48, 16]
    samples = _samples(metrics)
    labels = {"model_name": "servelab-sim", "engine": "0"}
    assert samples["vllm:prefix_cache_queries_total"] == [(labels, 50 + 50 + 50 + 32)]
    assert samples["vllm:prefix_cache_hits_total"] == [(labels, 32 + 48 + 16)]
    types = _types(metrics)
    assert (types["vllm:prefix_cache_queries"], types["vllm:prefix_cache_hits"]) == (
        "counter",
        "counter",
    )
    assert (stats["prefix_cache_queried_tokens"], stats["prefix_cache_hit_tokens"]) == (182, 96)
    config = {"block_size": "16", "enable_prefix_caching": "True", "num_gpu_blocks": "None"}
    assert samples["vllm:cache_config_info"] == [(config | {"engine": "0"}, 1)]
    assert all("prompt_tokens_details" not in answer for answer in answers)  # not asked for


def test_sglangs_hit_rate_cached_tokens_and_realtime_tokens(start_sim):
    sim = start_sim(ttft_ms=1, itl_ms=1)
    _, first_text, _ = _one_by_one(sim.url, [_prompt(f"{SHARED} {_words('a', 10)}")])
    _, second_text, _ = _one_by_one(sim.url, [_prompt(f"{SHARED} {_words('b', 10)}")])
    before, after = _samples(first_text), _samples(second_text)
    state = {
        "model_name": "servelab-sim",
        "engine_type": "unified",
        "tp_rank": "0",
        "pp_rank": "0",
        "moe_ep_rank": "0",
    }
    request = {"model_name": "servelab-sim", "engine_type": "unified"}
    assert before["sglang:cache_hit_rate"] == [(state, 0.0)]
    assert "sglang:cached_tokens_total" not in before  # SGLang creates it at its first hit
    assert _types(first_text)["sglang:cached_tokens"] == "counter"
    assert _types(first_text)["sglang:cache_hit_rate"] == "gauge"
    assert after["sglang:cache_hit_rate"] == [(state, pytest.approx(32 / 50))]
    assert after["sglang:cached_tokens_total"] == [(request, 32)]
    realtime = after["sglang:realtime_tokens_total"]
    assert all(labels == state | {"mode": labels["mode"]} for labels, _ in realtime)
    by_mode = {labels["mode"]: value for labels, value in realtime}
    assert by_mode == {"prefill_compute": 50 + 18, "prefill_cache": 32, "decode": 2 * 3}


def test_with_the_cache_off_nothing_hits(sim_process, tmp_path):
    truth = tmp_path / "truth.jsonl"
    url = sim_process(ttft_ms=1, itl_ms=1, prefix_cache=False, record_path=truth)
    bodies = [_prompt(f"{SHARED} {_words(name, 10)}") for name in "aba"]
    _, metrics, stats = _one_by_one(url, bodies)

    async def server_info() -> dict[str, Any]:
        async with aiohttp.ClientSession() as http, http.get(f"{url}/server_info") as resp:
            return await resp.json()

    info = asyncio.run(server_info())
    samples = _samples(metrics)
    assert samples["sglang:cache_hit_rate"][0][1] == 0
    assert "sglang:cached_tokens_total" not in samples
    realtime = {labels["mode"]: value for labels, value in samples["sglang:realtime_tokens_total"]}
    assert (realtime["prefill_compute"], realtime["prefill_cache"]) == (150, 0)
    assert (stats["prefix_cache_queried_tokens"], stats["prefix_cache_hit_tokens"]) == (0, 0)
    assert stats["prefix_cache_tokens"] == 0
    assert (info["disable_radix_cache"], info["page_size"]) == (True, 16)
    vllm_url = sim_process(ttft_ms=1, itl_ms=1, prefix_cache=False, metrics_style="vllm")
    vllm = _samples(_one_by_one(vllm_url, bodies)[1])
    assert vllm["vllm:prefix_cache_queries_total"][0][1] == 0  # vLLM looks nothing up
    assert vllm["vllm:prefix_cache_hits_total"][0][1] == 0
    assert vllm["vllm:cache_config_info"][0][0]["enable_prefix_caching"] == "False"


def _lru_run(start_sim, tmp_path: Path, capacity: int) -> tuple[list[int], dict[str, Any]]:
    """Prompts of 48 words of one of three prefixes then 2 of their own, one at a time:
    p1, p2, p3, then p1 and p3 again."""
    truth = tmp_path / f"truth-{capacity}.jsonl"
    sim = start_sim(step_base_ms=1, kv_capacity_tokens=capacity, record=str(truth))
    prefixes = {name: _words(name, 48) for name in ("p", "q", "r")}
    order = ["p", "q", "r", "p", "r"]
    bodies = [_prompt(f"{prefixes[n]} {_words(f'{n}own{i}-', 2)}", 2) for i, n in enumerate(order)]
    _, _, stats = _one_by_one(sim.url, bodies)
    sim.stop()
    return _cached(truth), stats


def test_lru_eviction_in_a_small_kv_cache_lowers_hits(start_sim, tmp_path):
    roomy, roomy_stats = _lru_run(start_sim, tmp_path, capacity=4096)
    small, small_stats = _lru_run(start_sim, tmp_path, capacity=128)  # 8 blocks
    assert roomy == [0, 0, 0, 48, 48]
    assert roomy_stats["prefix_cache_evicted_tokens"] == 0
    # Admitting q and r evicted p's least recently freed blocks (its tail); r was the
    # most recently used prefix, so it still hits in full.
    assert small == [0, 0, 0, 16, 48]
    assert small_stats["prefix_cache_evicted_tokens"] > 0
    assert small_stats["prefix_cache_tokens"] <= 128


@pytest.mark.timing
def test_a_hit_saves_its_prefill_in_the_ttft(start_sim, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_sim(step_base_ms=1, prefill_per_token_ms=0.05, record=str(truth))
    shared = _words("long", 1600)
    bodies = [
        _prompt(f"{shared} {_words('a', 16)}", 2, stream=True),  # 1616 prefilled: ~82 ms
        _prompt(f"{shared} {_words('b', 16)}", 2, stream=True),  # 1600 cached: ~2 ms
        _prompt(f"{_words('other', 1600)} {_words('c', 16)}", 2, stream=True),  # no hit
    ]
    _one_by_one(sim.url, bodies)
    sim.stop()
    records = sorted(read_truth(truth), key=lambda r: r.request_id)
    ttft_ms = [(r.chunk_sent_ns[0] - r.t_recv_ns) / 1e6 for r in records]
    assert [r.cached_tokens for r in records] == [0, 1600, 0]
    assert ttft_ms[0] > 80 and ttft_ms[2] > 80
    # the third prompt, with no hit, is the control: it pays its prefill like the first.
    # A quarter of the first's (at least 80 ms) leaves the hit's ~2 ms about 18 ms of send lag
    assert ttft_ms[1] < ttft_ms[0] / 4


def test_usage_reports_cached_tokens_when_asked(sim_process):
    url = sim_process(ttft_ms=0, itl_ms=0, cache_report=True, block_size=1)
    stream = {"stream": True, "stream_options": {"include_usage": True}}
    bodies = [
        _prompt(f"{SHARED} {_words('a', 10)}"),
        _prompt(f"{SHARED} {_words('b', 10)}", **stream),
        _prompt(f"{SHARED} {_words('c', 10)}"),
    ]
    answers, _, _ = _one_by_one(url, bodies)
    first, streamed, last = answers
    usage = [line for line in streamed.splitlines() if '"usage"' in line]
    assert '"prompt_tokens_details":{"cached_tokens":40}' in usage[0]  # blocks of 1 token
    assert '"prompt_tokens_details":{"cached_tokens":0}' in first
    assert '"prompt_tokens_details":{"cached_tokens":40}' in last


def test_a_later_turn_hits_the_answer_it_repeats(start_sim):
    sim = start_sim(ttft_ms=0, itl_ms=0, metrics_style="vllm")
    question = _words("q", 30)
    turn = {"model": "servelab-sim", "max_tokens": 20}
    first = turn | {"messages": [{"role": "user", "content": question}], "stream": True}

    async def scenario() -> float:
        async with aiohttp.ClientSession(base_url=sim.url) as http:
            async with http.post("/v1/chat/completions", json=first) as resp:
                events = [line[6:] for line in (await resp.text()).splitlines() if line]
            deltas = [json.loads(e)["choices"][0]["delta"] for e in events if e != "[DONE]"]
            answer = "".join(delta.get("content", "") for delta in deltas)
            follow_up = [
                {"role": "user", "content": question},
                {"role": "assistant", "content": answer},
                {"role": "user", "content": _words("next", 5)},
            ]
            async with http.post("/v1/chat/completions", json=turn | {"messages": follow_up}):
                pass
            async with http.get("/metrics") as resp:
                return _samples(await resp.text())["vllm:prefix_cache_hits_total"][0][1]

    # The first turn's KV covers its 30 prompt tokens and 19 of its 20 output tokens (the
    # last one is never fed back): 3 full blocks, all of which the second turn repeats.
    assert asyncio.run(scenario()) == 48
