"""The /metrics scraper against real HTTP servers: the simulator in both name styles, a
server without /metrics, a port nobody listens on; and the parser on Prometheus text as
prometheus_client writes it for real engines (with _created series and several ranks)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from servelab.core.errors import ConfigError
from servelab.sim import SimConfig, start
from servelab.telemetry.gpu import GpuTrace
from servelab.telemetry.scrape import MetricsScraper, metrics_url, parse_metrics
from servelab.telemetry.summary import summarize_level

CHAT = "/v1/chat/completions"
KV_CAPACITY_TOKENS = 1_000


def _body(max_tokens: int) -> dict[str, Any]:
    return {
        "model": "servelab-sim",
        "messages": [{"role": "user", "content": "one two three four five"}],
        "max_tokens": max_tokens,
        "stream": True,
    }


async def _scrape_under_load(style: str, *, requests: int = 4, max_tokens: int = 30):
    """Scrape a simulator (cap 2) every 0.1 s while `requests` streams run, and after."""
    config = SimConfig(
        port=0,
        profile="linear",
        max_running_requests=2,
        kv_capacity_tokens=KV_CAPACITY_TOKENS,
        metrics_style=style,
        step_base_ms=10,
    )
    sim = await start(config)
    rows: list[dict[str, Any]] = []
    scraper = MetricsScraper(sim.url + "/v1", sink=rows.extend, interval_s=0.1)
    try:
        scraper.start()
        async with aiohttp.ClientSession(base_url=sim.url) as http:

            async def one() -> None:
                async with http.post(CHAT, json=_body(max_tokens)) as resp:
                    await resp.read()

            t_start = time.perf_counter_ns()
            await asyncio.gather(*(one() for _ in range(requests)))
            t_end = time.perf_counter_ns()
        await asyncio.sleep(0.25)  # scrapes after the load: the counters' final values
    finally:
        stopped = await asyncio.to_thread(scraper.stop, 2.0)
        await sim.stop()
    assert stopped
    return scraper.trace(), rows, t_start, t_end


@pytest.mark.timing
@pytest.mark.parametrize("style", ["sglang", "vllm"])
def test_both_name_styles_map_to_the_common_fields(style):
    trace, rows, t_start, t_end = asyncio.run(_scrape_under_load(style))
    assert trace.reason is None and trace.url.endswith("/metrics")
    assert {sample.engine for sample in trace.samples} == {style}
    assert max(sample.running for sample in trace.samples) == 2  # the cap
    assert max(sample.queued for sample in trace.samples) >= 1
    # At most 2 running requests of 5 prompt + 30 output tokens: 70 of 1,000 tokens held.
    assert 0 < max(sample.kv_usage for sample in trace.samples) <= 2 * (5 + 30) / KV_CAPACITY_TOKENS
    last = trace.samples[-1]
    assert (last.running, last.queued) == (0, 0)
    assert last.generation_tokens_total == 4 * 30
    assert last.prompt_tokens_total == 4 * 5
    rates = [s.gen_throughput for s in trace.samples if s.gen_throughput is not None]
    assert max(rates) > 0  # SGLang's gauge, or derived from vLLM's counter

    level = summarize_level(GpuTrace(), trace, t_start, t_end)
    engine = level.engine
    assert engine.available and engine.engine == style and engine.samples >= 3
    assert engine.running_max == 2 and engine.queued_max >= 1
    assert 0 < engine.running_mean <= 2
    assert engine.gen_throughput_mean > 0
    # the counter read between scrapes 0.1 s apart: two running at 10 ms steps make about
    # 20 tokens an interval, what the ends of the level can be off by
    assert engine.generation_tokens == pytest.approx(4 * 30, abs=30)

    metrics_rows = [row for row in rows if row["kind"] == "metrics"]
    raw = metrics_rows[-1]["raw"]
    running_name = "sglang:num_running_reqs" if style == "sglang" else "vllm:num_requests_running"
    ((labels, value),) = raw[running_name]
    assert labels["model_name"] == "servelab-sim" and value == 0
    assert rows[0]["kind"] == "start" and rows[0]["url"] == trace.url
    assert not any("_bucket" in name for name in raw)  # histograms are not kept


async def _no_metrics_server() -> web.AppRunner:
    """An OpenAI-ish server with no /metrics, as transformers serve is."""

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


def test_an_engine_without_metrics_is_unavailable_after_the_first_404():
    async def scenario():
        runner = await _no_metrics_server()
        host, port = runner.addresses[0][:2]
        scraper = MetricsScraper(f"http://{host}:{port}", interval_s=0.05)
        try:
            scraper.start()
            await asyncio.sleep(0.3)
            thread_ended = not any(
                t.name == "servelab-telemetry-metrics" for t in threading.enumerate()
            )
        finally:
            await asyncio.to_thread(scraper.stop, 2.0)
            await runner.cleanup()
        return scraper, thread_ended

    scraper, thread_ended = asyncio.run(scenario())
    trace = scraper.trace()
    assert trace.reason.startswith(f"HTTP 404 from {trace.url} (SGLang serves /metrics only")
    assert trace.samples == [] and scraper.errors.lines() == []
    assert thread_ended  # it stopped asking
    level = summarize_level(GpuTrace(), trace, 0, time.perf_counter_ns())
    assert not level.engine.available and level.engine.reason == trace.reason
    assert level.engine.running_mean is None


def test_a_refused_connection_is_unavailable():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    rows: list[dict[str, Any]] = []
    scraper = MetricsScraper(f"http://127.0.0.1:{port}/", sink=rows.extend, interval_s=0.05)
    scraper.start()
    time.sleep(0.2)
    assert scraper.stop(2.0)
    reason = scraper.trace().reason
    assert reason.startswith(f"http://127.0.0.1:{port}/metrics did not answer:")
    assert "refused" in reason.lower()
    assert [row["kind"] for row in rows] == ["start", "unavailable"]


def _engine_text(style: str) -> str:
    """/metrics as prometheus_client writes it for a real engine: two ranks, _created series."""
    registry = CollectorRegistry()
    if style == "sglang":
        labels = ["model_name", "tp_rank", "dp_rank"]
        gauges = {
            "sglang:num_running_reqs": (3, 5),
            "sglang:num_queue_reqs": (1, 0),
            "sglang:token_usage": (0.5, 0.25),
            "sglang:gen_throughput": (100.0, 150.0),
        }
        counters = {"sglang:prompt_tokens": (10, 20), "sglang:generation_tokens": (7, 8)}
        histogram = "sglang:time_to_first_token_seconds"
    else:
        labels = ["model_name", "engine"]
        gauges = {
            "vllm:num_requests_running": (3, 5),
            "vllm:num_requests_waiting": (1, 0),
            "vllm:gpu_cache_usage_perc": (0.5, 0.25),  # the name before kv_cache_usage_perc
        }
        counters = {"vllm:prompt_tokens": (10, 20), "vllm:generation_tokens": (7, 8)}
        histogram = "vllm:time_to_first_token_seconds"
    for name, values in gauges.items():
        gauge = Gauge(name, "doc", labels, registry=registry)
        for rank, value in enumerate(values):
            gauge.labels("m", str(rank), *(["0"] if style == "sglang" else [])).set(value)
    for name, values in counters.items():
        counter = Counter(name, "doc", labels, registry=registry)
        for rank, value in enumerate(values):
            counter.labels("m", str(rank), *(["0"] if style == "sglang" else [])).inc(value)
    Histogram(histogram, "doc", registry=registry).observe(0.3)
    Gauge("process_resident_memory_bytes_x", "another family", registry=registry).set(1)
    return generate_latest(registry).decode()


@pytest.mark.parametrize("style", ["sglang", "vllm"])
def test_parse_sums_ranks_averages_kv_and_keeps_only_known_families(style):
    text = _engine_text(style)
    assert "_created" in text  # what real engines' counters carry
    parsed = parse_metrics(text)
    assert parsed.engine == style
    assert parsed.value("running") == 8
    assert parsed.value("queued") == 1
    assert parsed.value("kv_usage") == pytest.approx(0.375)
    assert parsed.value("prompt_tokens_total") == 30
    assert parsed.value("generation_tokens_total") == 15
    assert parsed.value("gen_throughput") == (250.0 if style == "sglang" else None)
    assert all(name.startswith(style + ":") for name in parsed.raw)
    assert not any(name.endswith(("_created", "_bucket")) for name in parsed.raw)


def test_parse_of_a_page_with_no_engine_metrics():
    parsed = parse_metrics("<html><body>hello</body></html>\nup 1\n")
    assert parsed.engine is None and parsed.raw == {}
    assert parsed.value("running") is None


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/metrics"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/metrics"),
        ("http://h:1/metrics", "http://h:1/metrics"),
        ("https://h/prefix/metrics/", "https://h/prefix/metrics/"),
    ],
)
def test_metrics_url(url, expected):
    assert metrics_url(url) == expected


def test_metrics_url_refuses_what_is_not_http():
    with pytest.raises(ConfigError, match="not an http"):
        metrics_url("127.0.0.1:8000")


async def _scrape_for(seconds: float) -> tuple[int, int]:
    """Scrape an idle simulator at the default rate for `seconds`: (samples, errors)."""
    sim = await start(SimConfig(port=0, profile="linear"))
    scraper = MetricsScraper(sim.url)
    try:
        scraper.start()
        await asyncio.sleep(seconds)
    finally:
        stopped = await asyncio.to_thread(scraper.stop, 2.0)
        await sim.stop()
    assert stopped
    return len(scraper.trace().samples), len(scraper.errors.lines())


@pytest.mark.timing
def test_a_short_level_gets_enough_scrapes_at_the_default_rate():
    """A level of a second holds several times the samples its engine counts need."""
    from servelab.telemetry.summary import MIN_ENGINE_SAMPLES

    samples, errors = asyncio.run(_scrape_for(1.0))
    assert errors == 0
    # about 10 scrapes at 0.1 s in the second; the bar of 6 lets four be missed
    assert samples >= 2 * MIN_ENGINE_SAMPLES, samples


VLLM_PREFIX_PAGE = """\
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 2522.0
vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7963259966259575e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 1280.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="auto",enable_prefix_caching="True",\
engine="0",gpu_memory_utilization="0.92",num_gpu_blocks="4096"} 1.0
"""
"""Lines of vLLM 0.32's (CPU build) /metrics, as it served them in the suite."""


def test_the_prefix_cache_counters_and_vllms_cache_config_are_read():
    parsed = parse_metrics(VLLM_PREFIX_PAGE)
    assert parsed.engine == "vllm"
    assert parsed.value("prefix_queries_total") == 2522.0
    assert parsed.value("prefix_hits_total") == 1280.0
    assert parsed.cache_config() == (128, True)
    off = VLLM_PREFIX_PAGE.replace('enable_prefix_caching="True"', 'enable_prefix_caching="False"')
    assert parse_metrics(off).cache_config() == (128, False)
    assert parse_metrics("vllm:num_requests_running 1\n").cache_config() == (None, None)


def test_a_declared_counter_without_samples_counts_zero():
    """SGLang declares its cached-token counter before its first hit: 0 hits, not unknown."""
    page = (
        "# HELP sglang:cached_tokens_total Cached prompt tokens.\n"
        "# TYPE sglang:cached_tokens_total counter\n"
        'sglang:prompt_tokens_total{model_name="m"} 640.0\n'
    )
    parsed = parse_metrics(page)
    assert parsed.value("prefix_hits_total") == 0.0
    assert parsed.value("prefix_queries_total") == 640.0
    assert (
        parse_metrics('sglang:prompt_tokens_total{model_name="m"} 1\n').value("prefix_hits_total")
        is None
    )
