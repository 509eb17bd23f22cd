"""GET /metrics: the engine's state and request latencies, under SGLang's or vLLM's names.

So that whatever reads a real engine's /metrics (servelab's telemetry, a Prometheus)
reads the simulator's unchanged. The hot path only bumps plain counters and bucket
lists; the Prometheus text is built on scrape by `prometheus_client.generate_latest`
from a private registry holding one collector.

Where the names, labels and buckets come from:
- SGLang: python/sglang/srt/metrics/collector.py (sgl-project/sglang main at 00ae9c1):
  SchedulerMetricsCollector (sglang:num_running_reqs, num_queue_reqs, num_used_tokens,
  token_usage, gen_throughput, cache_hit_rate, max_total_num_tokens, queue_time_seconds,
  realtime_tokens_total with a `mode` label; labels model_name, engine_type, tp_rank,
  pp_rank, moe_ep_rank as the scheduler sets them) and TokenizerMetricsCollector
  (sglang:prompt_tokens_total, generation_tokens_total, cached_tokens_total,
  num_requests_total, time_to_first_token_seconds, inter_token_latency_seconds,
  e2e_request_latency_seconds; labels model_name, engine_type as the tokenizer manager
  sets them).
- vLLM: vllm/v1/metrics/loggers.py, PrometheusStatLogger of the 0.12 series (it notes
  time_per_output_token_seconds as "deprecated in 0.11"): vllm:num_requests_running,
  num_requests_waiting, kv_cache_usage_perc (vllm:gpu_cache_usage_perc, deprecated in
  0.9, is gone), prompt_tokens_total, generation_tokens_total, num_preemptions_total,
  request_success_total, prefix_cache_queries_total, prefix_cache_hits_total (the same
  names in 0.32), time_to_first_token_seconds, inter_token_latency_seconds,
  e2e_request_latency_seconds, request_queue_time_seconds; labels model_name, engine.
  vllm:cache_config_info, a gauge of 1 whose labels are the CacheConfig's fields as
  strings and engine (no model_name): the simulator's block_size, enable_prefix_caching
  and num_gpu_blocks (vLLM sends every field).

What the simulator puts in them: latencies are observed when a request completes (the
engines observe TTFT at the first token); TTFT, inter-token latency and E2E run from
receive to the first, between, and to the last text chunk sent, a gap before a chunk of
k tokens counting k times as gap / k (SGLang's way); queue time runs from receive to the
start of generation. gen_throughput is output tokens per second since the previous
scrape. KV usage is the tokens held over the capacity, 0 when the capacity is unlimited;
in fixed-timing mode the tokens held are the prompt plus the tokens sent of each running
request. Tokens held count a cached block once however many requests share it, and not
at all once it is free (both engines count free cached blocks as free). There is no
preemption.

The prefix cache's (see `servelab.sim.prefix_cache`), in tokens:
- vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total: each request, when it
  starts, adds its prompt tokens to the queries and the tokens its hit supplied to the
  hits (vLLM's `PrefixCacheStats.record` at admission); both stay 0 with the cache off.
- sglang:cache_hit_rate: of the latest prefill, hits / (hits + prompt tokens computed),
  the hits being those of the requests it starts (SGLang's log_prefill_stats; its
  decode log lines leave the gauge alone in the sources read, and so does the simulator).
- sglang:cached_tokens_total: at each completed request, the tokens its hit supplied;
  absent until one is positive (SGLang creates the series at its first increment).
- sglang:realtime_tokens_total{mode}: prefill_compute, the prompt tokens computed;
  prefill_cache, the hits; decode, the output tokens from decoding (each request's
  first comes from its prefill). SGLang adds to it at each batch it logs; the simulator
  at every step (batching) or when a request starts and ends (fixed timing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.utils import floatToGoString

from servelab.core.clock import NS_PER_S, now_ns
from servelab.sim.config import MetricsStyle
from servelab.sim.scheduler import Stream
from servelab.sim.stats import EngineLoad, SimCounters

__all__ = ["CONTENT_TYPE", "EngineMetrics"]

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""The classic text format, which is what generate_latest writes."""


@dataclass(frozen=True, slots=True)
class _Names:
    """One engine's metric names, label sets and latency buckets."""

    running: str
    waiting: str
    kv_usage: str
    prompt_tokens: str
    generation_tokens: str
    requests: str
    ttft: str
    itl: str
    e2e: str
    queue: str
    state_labels: dict[str, str]
    request_labels: dict[str, str]
    ttft_buckets: Sequence[float]
    itl_buckets: Sequence[float]
    e2e_buckets: Sequence[float]
    queue_buckets: Sequence[float]


# Buckets, in seconds, as the sources above define them.
_SGLANG_TTFT = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
_SGLANG_E2E = (*_SGLANG_TTFT, 600, 1200, 1800, 2400)
_SGLANG_ITL = (
    *(0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060),
    *(0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0),
)
_SGLANG_QUEUE = (
    *(0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200),
    *(300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000),
)
_VLLM_TTFT = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5),
    *(10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
)
_VLLM_ITL = (
    *(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5),
    *(10.0, 20.0, 40.0, 80.0),
)
_VLLM_LATENCY = (
    *(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0),
    *(120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)


def _names(style: MetricsStyle, model: str) -> _Names:
    if style is MetricsStyle.VLLM:
        labels = {"model_name": model, "engine": "0"}
        return _Names(
            running="vllm:num_requests_running",
            waiting="vllm:num_requests_waiting",
            kv_usage="vllm:kv_cache_usage_perc",
            prompt_tokens="vllm:prompt_tokens",
            generation_tokens="vllm:generation_tokens",
            requests="vllm:request_success",
            ttft="vllm:time_to_first_token_seconds",
            itl="vllm:inter_token_latency_seconds",
            e2e="vllm:e2e_request_latency_seconds",
            queue="vllm:request_queue_time_seconds",
            state_labels=labels,
            request_labels=labels,
            ttft_buckets=_VLLM_TTFT,
            itl_buckets=_VLLM_ITL,
            e2e_buckets=_VLLM_LATENCY,
            queue_buckets=_VLLM_LATENCY,
        )
    request_labels = {"model_name": model, "engine_type": "unified"}
    state_labels = request_labels | {"tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
    return _Names(
        running="sglang:num_running_reqs",
        waiting="sglang:num_queue_reqs",
        kv_usage="sglang:token_usage",
        prompt_tokens="sglang:prompt_tokens",
        generation_tokens="sglang:generation_tokens",
        requests="sglang:num_requests",
        ttft="sglang:time_to_first_token_seconds",
        itl="sglang:inter_token_latency_seconds",
        e2e="sglang:e2e_request_latency_seconds",
        queue="sglang:queue_time_seconds",
        state_labels=state_labels,
        request_labels=request_labels,
        ttft_buckets=_SGLANG_TTFT,
        itl_buckets=_SGLANG_ITL,
        e2e_buckets=_SGLANG_E2E,
        queue_buckets=_SGLANG_QUEUE,
    )


class _Histogram:
    """Counts per bucket (upper bounds inclusive, the last one +Inf) and the sum, in s."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = np.asarray(bounds, dtype=np.float64)
        self.counts = np.zeros(len(bounds) + 1, dtype=np.int64)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[np.searchsorted(self.bounds, value)] += 1
        self.sum += value

    def observe_many(self, values: np.ndarray, times: np.ndarray | None = None) -> None:
        """Count each value `times` times (once when None); numpy, for a stream's gaps."""
        index = np.searchsorted(self.bounds, values)
        self.counts += np.bincount(index, weights=times, minlength=len(self.counts)).astype(
            np.int64
        )
        self.sum += float(values.sum() if times is None else (values * times).sum())

    def family(self, name: str, doc: str, labels: dict[str, str]) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, doc, labels=list(labels))
        bounds = [floatToGoString(bound) for bound in self.bounds] + ["+Inf"]
        cumulative = np.cumsum(self.counts).tolist()
        family.add_metric(
            list(labels.values()), list(zip(bounds, cumulative, strict=True)), self.sum
        )
        return family


class EngineMetrics:
    """Latency histograms fed by finished requests, and the /metrics text on demand."""

    def __init__(
        self,
        *,
        style: MetricsStyle,
        model: str,
        counters: SimCounters,
        load: Callable[[], EngineLoad],
        block_size: int,
        prefix_cache: bool,
    ) -> None:
        self._style = style
        self._block_size = block_size
        self._prefix_cache = prefix_cache
        self._names = names = _names(style, model)
        self._counters = counters
        self._load = load
        self._requests = 0
        self._cached_tokens = 0
        """Prompt tokens the cache supplied to completed requests."""
        self._ttft = _Histogram(names.ttft_buckets)
        self._itl = _Histogram(names.itl_buckets)
        self._e2e = _Histogram(names.e2e_buckets)
        self._queue = _Histogram(names.queue_buckets)
        self._last_scrape = (counters.started_ns, 0)
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(self)

    def observe(self, stream: Stream) -> None:
        """Count a request that completed: its TTFT, inter-token gaps, E2E and queue time."""
        sent = stream.sent_ns
        if not sent:
            return
        self._requests += 1
        self._cached_tokens += stream.cached_tokens
        t_recv = stream.timed.t_recv_ns
        self._ttft.observe((sent[0] - t_recv) / NS_PER_S)
        self._e2e.observe((sent[-1] - t_recv) / NS_PER_S)
        self._queue.observe((stream.timed.start_ns - t_recv) / NS_PER_S)
        if len(sent) > 1:  # a gap before a chunk of k tokens counts k times as gap / k
            gaps_s = np.diff(np.asarray(sent, dtype=np.int64)) / NS_PER_S
            per_chunk = stream.tokens_per_chunk
            last = stream.timed.completion_tokens - (len(sent) - 1) * per_chunk
            if per_chunk == 1:
                self._itl.observe_many(gaps_s)
            else:
                tokens = np.full(len(gaps_s), per_chunk, dtype=np.float64)
                tokens[-1] = last
                self._itl.observe_many(gaps_s / tokens, tokens)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self._registry)

    def collect(self) -> Iterator[Metric]:
        """The metric families now (the prometheus_client Collector protocol)."""
        names, counters, load = self._names, self._counters, self._load()
        state, request = names.state_labels, names.request_labels
        capacity = load.kv_capacity_tokens
        usage = load.kv_used_tokens / capacity if capacity else 0.0
        yield _gauge(names.running, "Requests generating.", state, load.running)
        yield _gauge(names.waiting, "Requests waiting to start.", state, load.waiting)
        yield _gauge(names.kv_usage, "KV cache usage; 1 means full.", state, usage)
        if self._style is MetricsStyle.SGLANG:
            yield _gauge("sglang:num_used_tokens", "Tokens held.", state, load.kv_used_tokens)
            yield _gauge("sglang:max_total_num_tokens", "KV capacity.", state, capacity or 0)
            yield _gauge("sglang:gen_throughput", "Output tok/s.", state, self._throughput())
            hit_rate = counters.prefill_hit_rate
            yield _gauge("sglang:cache_hit_rate", "Prefix cache hit rate.", state, hit_rate)
            yield self._realtime_tokens(state)
        yield _counter(names.prompt_tokens, "Prompt tokens.", request, counters.prompt_tokens)
        yield _counter(names.generation_tokens, "Output tokens.", request, counters.tokens_sent)
        if self._style is MetricsStyle.VLLM:
            finished = request | {"finished_reason": "length"}
            yield _counter(names.requests, "Requests completed.", finished, self._requests)
            yield _counter("vllm:num_preemptions", "Preemptions.", request, 0)
            yield self._cache_config(capacity)
            queried, hits = counters.prefix_queried_tokens, counters.prefix_hit_tokens
            yield _counter(
                "vllm:prefix_cache_queries", "Prompt tokens looked up.", request, queried
            )
            yield _counter("vllm:prefix_cache_hits", "Prompt tokens hit.", request, hits)
        else:
            yield _counter(names.requests, "Requests completed.", request, self._requests)
            cached = CounterMetricFamily(
                "sglang:cached_tokens", "Cached prompt tokens.", labels=list(request)
            )
            if self._cached_tokens > 0:
                cached.add_metric(list(request.values()), self._cached_tokens)
            yield cached
        yield self._ttft.family(names.ttft, "Time to first token, s.", request)
        yield self._itl.family(names.itl, "Inter-token latency, s.", request)
        yield self._e2e.family(names.e2e, "End-to-end request latency, s.", request)
        yield self._queue.family(names.queue, "Queueing time, s.", state)

    def _cache_config(self, capacity: int | None) -> GaugeMetricFamily:
        """vllm:cache_config_info: the cache's settings as labels, the way vLLM writes them."""
        blocks = capacity // self._block_size if capacity else None
        info = {
            "block_size": str(self._block_size),
            "enable_prefix_caching": str(self._prefix_cache),
            "num_gpu_blocks": str(blocks),
            "engine": "0",
        }
        return _gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", info, 1)

    def _realtime_tokens(self, labels: dict[str, str]) -> CounterMetricFamily:
        """sglang:realtime_tokens_total, one series per kind of token processed."""
        counters = self._counters
        family = CounterMetricFamily(
            "sglang:realtime_tokens", "Tokens processed, by mode.", labels=[*labels, "mode"]
        )
        for mode, tokens in (
            ("prefill_compute", counters.prefill_computed_tokens),
            ("prefill_cache", counters.prefix_hit_tokens),
            ("decode", counters.decode_tokens),
        ):
            family.add_metric([*labels.values(), mode], tokens)
        return family

    def _throughput(self) -> float:
        """Output tokens per second since the previous scrape (or the start)."""
        then_ns, then_tokens = self._last_scrape
        now, tokens = now_ns(), self._counters.tokens_sent
        self._last_scrape = (now, tokens)
        return (tokens - then_tokens) * NS_PER_S / max(now - then_ns, 1)


def _gauge(name: str, doc: str, labels: dict[str, str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


def _counter(name: str, doc: str, labels: dict[str, str], value: float) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family
