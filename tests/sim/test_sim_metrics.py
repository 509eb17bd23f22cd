"""GET /metrics: Prometheus text under SGLang's or vLLM's names, live during a load."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from servelab.sim import SimConfig

BATCHING = {"profile": "linear", "step_base_ms": 10, "step_per_seq_ms": 1}


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample by name, with its labels."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def _value(samples: dict, name: str) -> float:
    (labels, value), *others = samples[name]
    assert not others and labels["model_name"] == "servelab-sim"
    return value


async def _scrape(http: aiohttp.ClientSession) -> dict:
    async with http.get("/metrics") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return _samples(await resp.text())


def _under_load(sim_session, chat, n_requests: int, max_tokens: int, **config):
    """Scrape while `n_requests` streams run, then again once they are done."""

    async def scenario():
        async with sim_session(**config) as (_, http):

            async def one() -> None:
                async with http.post("/v1/chat/completions", json=chat(max_tokens)) as resp:
                    await resp.read()

            load = asyncio.gather(*(one() for _ in range(n_requests)))
            # 100 ms: every request is sent at once and, where a test reads `during`, none can
            # finish before 190 ms (20 tokens, 10 ms apart or linear steps of at least 10 ms);
            # at 50 ms a busy machine's scrape once came before any first token
            await asyncio.sleep(0.1)
            during = await _scrape(http)
            await load
            return during, await _scrape(http)

    return asyncio.run(scenario())


@pytest.mark.timing
def test_sglang_names_show_the_batch_the_queue_and_the_kv_cache(sim_session, chat):
    config = {"max_running_requests": 2, "kv_capacity_tokens": 1000} | BATCHING
    during, after = _under_load(sim_session, chat, 5, 20, **config)
    assert _value(during, "sglang:num_running_reqs") == 2
    assert _value(during, "sglang:num_queue_reqs") == 3
    used = _value(during, "sglang:num_used_tokens")
    assert 2 * 5 < used <= 2 * (5 + 20)  # two prompts of 5 words and some output
    assert _value(during, "sglang:token_usage") == pytest.approx(used / 1000)
    assert _value(during, "sglang:max_total_num_tokens") == 1000
    assert _value(during, "sglang:gen_throughput") > 0
    assert _value(during, "sglang:cache_hit_rate") == 0
    labels = during["sglang:num_running_reqs"][0][0]
    assert labels == {
        "model_name": "servelab-sim",
        "engine_type": "unified",
        "tp_rank": "0",
        "pp_rank": "0",
        "moe_ep_rank": "0",
    }
    assert _value(after, "sglang:num_running_reqs") == 0
    assert _value(after, "sglang:num_used_tokens") == 0
    assert _value(after, "sglang:prompt_tokens_total") == 5 * 5
    assert _value(after, "sglang:generation_tokens_total") == 5 * 20
    assert _value(after, "sglang:num_requests_total") == 5
    assert _value(after, "sglang:time_to_first_token_seconds_count") == 5
    assert _value(after, "sglang:e2e_request_latency_seconds_count") == 5
    assert _value(after, "sglang:inter_token_latency_seconds_count") == 5 * 19
    assert _value(after, "sglang:queue_time_seconds_count") == 5
    inf = [v for labels, v in after["sglang:queue_time_seconds_bucket"] if labels["le"] == "+Inf"]
    assert inf == [5]


@pytest.mark.timing
def test_vllm_names_in_fixed_timing_with_a_cap(sim_session, chat):
    config = {"metrics_style": "vllm", "max_running_requests": 3, "ttft_ms": 10, "itl_ms": 10}
    during, after = _under_load(sim_session, chat, 4, 20, **config)
    assert _value(during, "vllm:num_requests_running") == 3
    assert _value(during, "vllm:num_requests_waiting") == 1
    assert _value(during, "vllm:kv_cache_usage_perc") == 0  # no capacity: unlimited
    assert during["vllm:num_requests_running"][0][0] == {
        "model_name": "servelab-sim",
        "engine": "0",
    }
    assert not [name for name in during if name.startswith("sglang:")]
    assert _value(after, "vllm:prompt_tokens_total") == 4 * 5
    assert _value(after, "vllm:generation_tokens_total") == 4 * 20
    assert _value(after, "vllm:num_preemptions_total") == 0
    (labels, success), *_ = after["vllm:request_success_total"]
    assert (labels["finished_reason"], success) == ("length", 4)
    for histogram in ("time_to_first_token", "e2e_request_latency", "request_queue_time"):
        assert _value(after, f"vllm:{histogram}_seconds_count") == 4
    # the fourth request waited for a slot: about one request's 10 + 19 x 10 = 200 ms (it
    # was sent with the other three); the 50 ms under it and 300 ms over it are not derived
    assert 0.15 < _value(after, "vllm:request_queue_time_seconds_sum") < 0.5


@pytest.mark.timing
def test_inter_token_latency_counts_each_token_of_a_chunk(sim_session, chat):
    config = {"ttft_ms": 0, "itl_ms": 10, "tokens_per_chunk": 2}
    _, after = _under_load(sim_session, chat, 1, 6, **config)  # 3 chunks, 2 gaps of 10 ms
    assert _value(after, "sglang:inter_token_latency_seconds_count") == 4
    assert _value(after, "sglang:inter_token_latency_seconds_sum") == pytest.approx(0.02, abs=5e-3)


@pytest.mark.timing
def test_fixed_timing_without_a_cap_runs_everything_at_once(sim_session, chat):
    during, _ = _under_load(sim_session, chat, 6, 20, ttft_ms=0, itl_ms=10)
    assert _value(during, "sglang:num_running_reqs") == 6
    assert _value(during, "sglang:num_queue_reqs") == 0
    assert _value(during, "sglang:num_used_tokens") > 6 * 5


def test_metrics_style_is_checked():
    with pytest.raises(ValueError, match="sglang"):
        SimConfig(metrics_style="tgi")
