"""The engine's own view while the load runs: its Prometheus /metrics, scraped at 10 Hz.

SGLang and vLLM say how many requests run and wait and how full the KV cache is, which is
what tells a running-request cap (the story's `--max-running-requests 64`) from a full
cache or a slow step. Both name styles map to the same fields (newest name first; an older
one is read only when the newer is absent, never added to it, since the versions that
carry both report the same value under each):

| field | SGLang | vLLM |
|---|---|---|
| running | num_running_reqs (0.3.4: num_requests_running) | num_requests_running |
| queued | num_queue_reqs (0.3.4: num_requests_waiting) | num_requests_waiting |
| kv_usage (0-1) | token_usage | kv_cache_usage_perc (before 0.9.2: gpu_cache_usage_perc) |
| gen_throughput (tok/s) | gen_throughput | generation_tokens_total, per s |
| prompt_tokens_total | prompt_tokens_total | prompt_tokens_total |
| generation_tokens_total | generation_tokens_total | generation_tokens_total |
| prefix_queries_total | prompt_tokens_total | prefix_cache_queries_total (gpu_prefix_...) |
| prefix_hits_total | cached_tokens_total | prefix_cache_hits_total (gpu_prefix_...) |

(each name with its engine's prefix, `sglang:` or `vllm:`). Where the names changed:
vLLM 0.9.2 added kv_cache_usage_perc and prefix_cache_queries/hits beside the gpu_ names
(PR 18354), hid the gpu_ ones in 0.11 (PR 24245) and removed them (PR 29330). V0's
num_requests_swapped and gpu_prefix_cache_hit_rate gauge (deprecated in 0.8, hidden in 0.9:
PRs 14136, 15458) are kept in the raw rows only: swapped requests neither run nor wait, as
vLLM's own log line keeps them apart, and a hit-rate gauge has no counts to difference.
Before 0.9 (PR 18003) the prefix counters counted blocks, not tokens: their ratio is the
same. SGLang 0.3.4 (its metrics_collector.py, Oct 2024) said num_requests_running and
num_requests_waiting; collector.py renamed them late in 2024 and later added
cached_tokens_total. tests/fixtures/engine_metrics/README.md cites each source.

The prefix cache's counters are in tokens on both engines: vLLM counts the prompt tokens it
looked up and those it found; SGLang counts every prompt token and the cached ones among
them. A level's hit rate is the ratio of the two counters' growth over the level.

Pages in other shapes read the same. A gateway or an OpenTelemetry bridge that rewrites
`vllm:num_requests_running` as `vllm_num_requests_running` (Ray's exporter as
`ray_vllm:...`) is read under the engine's own name; a family declared by HELP/TYPE with no
sample leaves its field None, except a counter, which counts 0 (prometheus_client declares
a labelled counter before its first increment: SGLang's cached tokens before the first
hit); federation's timestamps are ignored.

Several label sets of one family are summed (KV usage: averaged) when they are different
workers, and a worker's copies count once (`_one_per_series`):
- labels that differ in value name different workers: vLLM's `engine`, SGLang's
  `dp_rank` and `tp_rank`, a gateway's `worker_addr`, a federation's `instance`;
- `job`, `prometheus`, `prometheus_replica` and `replica` only say who copied the series,
  so rows differing in nothing else are one series (the larger value: a lagging copy of a
  counter is behind, never ahead);
- a row whose labels all appear, with others, in another row is dropped: the page repeats
  it in that finer-labelled view, which alone counts (the engine's own rows beside a
  federation's copies of them with `instance` and `job` added; a gateway's total beside
  its per-`worker_addr` rows).
SGLang's tp ranks are summed because by default only the first rank of each attention-TP
group reports; with `--enable-metrics-for-all-schedulers` and plain TP every rank reports
the same batch, which this sums once per rank.

The scraper is a thread with urllib, not a task on the load generator's event loop, and it
drops every line of families it does not know before parsing, so a large /metrics costs
the client little.

Why 10 Hz: a level's engine counts need three samples (`telemetry.summary`), and at 1 Hz a
level of two seconds (vLLM capped at 6, 12 and 24 streams) got one, which read 0 running.
What one scrape costs, measured against the simulator's /metrics (15 KB of text) on
loopback, on a two-core machine that was running a test suite beside it: 3.7 ms wall
(median; p90 9 ms), 1.9 ms of the client's CPU and 2.6 ms of the server's. At 10 Hz that is
1.9% of one core in the client and 2.6% in the server; at 1 Hz 0.5% and 0.4%; at 50 Hz 8%
and 11%, too much to hide beside a load generator. 10 Hz gives a two-second level about 20
samples for 2-3% of a core on each side; the scrape's own wall time stays far under the
interval. Reading exported names and telling copies apart took parsing a 30 KB page from
0.45 to 0.65 ms (best of 15 runs, same machine).

An engine without /metrics (transformers serve; SGLang without
--enable-metrics) answers 404 or refuses the first scrape: the scraper then stops and
records why, and the summary's engine columns say n/a.
"""

from __future__ import annotations

import http.client
import re
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from servelab.core.clock import NS_PER_S, now_ns, wall_anchor
from servelab.core.errors import ConfigError
from servelab.core.units import NS_PER_MS
from servelab.telemetry._loop import ErrorLog, Periodic
from servelab.telemetry.gpu import Sink

__all__ = [
    "DEFAULT_SCRAPE_INTERVAL_S",
    "DEFAULT_SCRAPE_TIMEOUT_S",
    "SCRAPE_MAX_DUTY",
    "SCRAPE_MAX_INTERVAL_S",
    "EngineName",
    "EngineSample",
    "EngineTrace",
    "MetricsScraper",
    "ParsedMetrics",
    "guess_engine",
    "metrics_url",
    "parse_metrics",
    "sample_from_text",
]

DEFAULT_SCRAPE_INTERVAL_S = 0.1
"""10 Hz: see the module docstring for what it costs."""
SCRAPE_MAX_DUTY = 0.05
"""Scrapes take at most 5% of the time: a /metrics page that typically takes 30 ms to render
(a CPU-bound server's, beside its own work) is asked every 0.6 s, not every 0.1 s."""
SCRAPE_MAX_INTERVAL_S = 1.0
"""However slow the page, it is asked every second: a level of a few seconds still gets the
samples its engine counts need."""
DEFAULT_SCRAPE_TIMEOUT_S = 2.0

EngineName = Literal["sglang", "vllm"]
_ENGINES: tuple[EngineName, ...] = ("sglang", "vllm")
"""Ties go to the first: a page naming both engines equally often is read as SGLang's."""

_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "sglang": {
        "running": ("sglang:num_running_reqs", "sglang:num_requests_running"),
        "queued": ("sglang:num_queue_reqs", "sglang:num_requests_waiting"),
        "kv_usage": ("sglang:token_usage",),
        "gen_throughput": ("sglang:gen_throughput",),
        "prompt_tokens_total": ("sglang:prompt_tokens_total",),
        "generation_tokens_total": ("sglang:generation_tokens_total",),
        "prefix_queries_total": ("sglang:prompt_tokens_total",),
        "prefix_hits_total": ("sglang:cached_tokens_total",),
    },
    "vllm": {
        "running": ("vllm:num_requests_running",),
        "queued": ("vllm:num_requests_waiting",),
        "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "gen_throughput": (),
        "prompt_tokens_total": ("vllm:prompt_tokens_total",),
        "generation_tokens_total": ("vllm:generation_tokens_total",),
        "prefix_queries_total": (
            "vllm:prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_queries_total",
        ),
        "prefix_hits_total": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    },
}
"""Each engine's names of each field, newest first: see the module docstring's table."""
_AVERAGED = frozenset({"kv_usage"})

# Kept in the rows beside the mapped ones: capacity, cache and preemption context.
_RAW_ONLY = (
    "sglang:num_used_tokens",
    "sglang:max_total_num_tokens",
    "sglang:cache_hit_rate",
    "sglang:num_requests_total",
    "vllm:num_preemptions_total",
    "vllm:request_success_total",
    "vllm:num_requests_swapped",
    "vllm:gpu_prefix_cache_hit_rate",
)
_CACHE_CONFIG = "vllm:cache_config_info"
"""vLLM's cache settings as labels of one gauge: its block size and whether prefix caching
is on, as the engine resolved them. Read into the sample, not kept in the raw rows (its
labels are long, and they do not change while the engine runs)."""
_KNOWN_SAMPLES = frozenset(
    [
        *(name for fields in _NAMES.values() for names in fields.values() for name in names),
        *_RAW_ONLY,
        _CACHE_CONFIG,
    ]
)
# Family names as HELP/TYPE lines may write them (counters with or without _total).
_KNOWN_FAMILIES = _KNOWN_SAMPLES | {name.removesuffix("_total") for name in _KNOWN_SAMPLES}

_COPY_LABELS = frozenset({"job", "prometheus", "prometheus_replica", "replica"})
"""Labels that say which scrape job or which Prometheus copied a series, not whose it is."""
_EXPORTED_NAME = re.compile(
    r"^(# (?:HELP|TYPE) )?(?:ray_(sglang|vllm)[:_]|(sglang|vllm)_)", re.MULTILINE
)
"""A name as an exporter may write it, to be read under the engine's own: `vllm_x` (as
OpenTelemetry bridges and some gateways write it) and `ray_vllm:x` (Ray's metrics agent) are
`vllm:x`. Only such names match, so an engine's own page costs one pass of the regex."""

# HTTP answers that mean "this server has no /metrics" rather than "not now".
_NO_METRICS_STATUS = frozenset({400, 401, 403, 404, 405, 410, 501})

_NO_METRICS_HINT = "SGLang serves /metrics only with --enable-metrics; transformers serve has none"

Labels = dict[str, str]


@dataclass(frozen=True)
class ParsedMetrics:
    """The known families of one scrape: `engine` is the engine the page names most
    ('sglang', 'vllm') or None (neither); `engines` every engine it names at all."""

    engine: str | None
    raw: dict[str, list[tuple[Labels, float]]]
    unincremented: frozenset[str] = frozenset()
    """Counters declared by HELP/TYPE with no sample yet: they count 0."""
    engines: frozenset[str] = frozenset()

    def cache_config(self) -> tuple[int | None, bool | None]:
        """The block size and prefix caching vLLM reports in its cache_config_info."""
        rows = self.raw.get(_CACHE_CONFIG) or [({}, 0.0)]
        labels = rows[0][0]
        block = labels.get("block_size", "")
        caching = labels.get("enable_prefix_caching")
        return (
            int(block) if block.isdigit() else None,
            None if caching is None else caching == "True",
        )

    def value(self, name: str) -> float | None:
        """The field's value under the newest name present: summed over distinct series
        (averaged for KV usage); 0 for a counter only declared; None if absent."""
        names = _NAMES[self.engine][name] if self.engine in _NAMES else ()
        for sample_name in names:
            rows = self.raw.get(sample_name)
            if rows:
                values = _one_per_series(rows)
                total = sum(values)
                return total / len(values) if name in _AVERAGED else total
        return 0.0 if self.unincremented.intersection(names) else None


@dataclass(frozen=True, slots=True)
class EngineSample:
    """One scrape (or one stats line of the engine's log, `telemetry.logstats`) mapped to the
    common fields; None where the engine does not report one."""

    t_ns: int
    engine: str | None
    running: float | None
    queued: float | None
    kv_usage: float | None
    gen_throughput: float | None
    prompt_tokens_total: float | None
    generation_tokens_total: float | None
    prefix_queries_total: float | None = None
    prefix_hits_total: float | None = None
    block_tokens: int | None = None
    """The KV cache's block size, where the engine reports it."""
    prefix_caching: bool | None = None
    """Whether the engine says its prefix cache is on, where it says."""
    prefill_tokens: float | None = None
    """Prompt tokens the latest prefill batch computed (SGLang's `#new-token`)."""
    cached_tokens: float | None = None
    """Prompt tokens the latest prefill batch took from the prefix cache (`#cached-token`)."""
    prefill_seqs: float | None = None
    """Requests the latest prefill batch admitted (SGLang's `#new-seq`)."""
    source: Literal["metrics", "log"] = "metrics"


@dataclass(frozen=True)
class EngineTrace:
    """What the scraper holds; `reason` says why the engine's metrics are unavailable."""

    url: str | None = None
    samples: list[EngineSample] = field(default_factory=list)
    reason: str | None = None


def metrics_url(url: str) -> str:
    """The /metrics at the root of the engine's URL, unless `url` already names it."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"not an http(s) URL for /metrics: {url!r}")
    path = parts.path if parts.path.rstrip("/").endswith("/metrics") else "/metrics"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def parse_metrics(text: str) -> ParsedMetrics:
    """Parse Prometheus text, keeping the families this module knows, with their labels."""
    from prometheus_client.parser import text_string_to_metric_families

    known, occurrences = _scan(text)
    raw: dict[str, list[tuple[Labels, float]]] = {}
    declared: set[str] = set()
    for family in text_string_to_metric_families(known):
        counted = f"{family.name}_total"
        if family.type == "counter" and not family.samples and counted in _KNOWN_SAMPLES:
            declared.add(counted)
        for sample in family.samples:
            if sample.name in _KNOWN_SAMPLES:
                raw.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return ParsedMetrics(
        engine=_likeliest(occurrences),
        raw=raw,
        unincremented=frozenset(declared - raw.keys()),
        engines=frozenset(engine for engine in _ENGINES if occurrences[engine]),
    )


def sample_from_text(
    text: str, *, t_ns: int = 0, engine: EngineName | None = None
) -> EngineSample | None:
    """A saved /metrics page read as the scraper reads a live one; None if it carries no
    engine's names (or none of `engine`'s, when given).

    `engine` reads a page carrying both engines' names (a gateway in front of both) as
    that engine's. vLLM's gen_throughput stays None: from its counter alone a rate needs
    two pages.
    """
    parsed = parse_metrics(text)
    if engine is not None:
        if engine not in parsed.engines:
            return None
        parsed = replace(parsed, engine=engine)
    if parsed.engine is None:
        return None
    return _sample(parsed, t_ns)


def guess_engine(text: str) -> EngineName | None:
    """Which engine's /metrics the text looks like: the one whose prefix (`vllm:`,
    `sglang:`, in any shape the module docstring lists) it names most; None for neither."""
    return _likeliest(_scan(text)[1])


def _sample(parsed: ParsedMetrics, t_ns: int) -> EngineSample:
    block_tokens, prefix_caching = parsed.cache_config()
    return EngineSample(
        t_ns=t_ns,
        engine=parsed.engine,
        running=parsed.value("running"),
        queued=parsed.value("queued"),
        kv_usage=parsed.value("kv_usage"),
        gen_throughput=parsed.value("gen_throughput"),
        prompt_tokens_total=parsed.value("prompt_tokens_total"),
        generation_tokens_total=parsed.value("generation_tokens_total"),
        prefix_queries_total=parsed.value("prefix_queries_total"),
        prefix_hits_total=parsed.value("prefix_hits_total"),
        block_tokens=block_tokens,
        prefix_caching=prefix_caching,
    )


def _scan(text: str) -> tuple[str, dict[str, int]]:
    """The lines of known families only, under the engine's own names (parsing every
    histogram would be wasted work), and how often each engine's prefix occurs."""
    text = _EXPORTED_NAME.sub(_engines_own, text)
    known: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            words = line.split(maxsplit=3)
            if len(words) >= 3 and words[1] in ("HELP", "TYPE") and words[2] in _KNOWN_FAMILIES:
                known.append(line)
        elif line.split("{", 1)[0].split(" ", 1)[0] in _KNOWN_SAMPLES:
            known.append(line)
    return "\n".join(known) + "\n", {engine: text.count(f"{engine}:") for engine in _ENGINES}


def _engines_own(match: re.Match[str]) -> str:
    return f"{match[1] or ''}{match[2] or match[3]}:"


def _likeliest(occurrences: dict[str, int]) -> EngineName | None:
    """The engine whose prefix occurs most, None if neither does."""
    engine = max(_ENGINES, key=lambda name: occurrences[name])
    return engine if occurrences[engine] else None


def _one_per_series(rows: list[tuple[Labels, float]]) -> list[float]:
    """One value per distinct series of a family, by the rules of the module docstring:
    copier labels set aside, equal label sets are one series (the larger value), and a
    label set that another extends is repeated in that finer view."""
    merged: dict[frozenset[tuple[str, str]], float] = {}
    for labels, value in rows:
        key = frozenset(item for item in labels.items() if item[0] not in _COPY_LABELS)
        merged[key] = max(value, merged.get(key, value))
    return [value for key, value in merged.items() if not any(key < other for other in merged)]


class MetricsScraper:
    """Scrapes an engine's /metrics on a background thread from `start` to `stop`."""

    def __init__(
        self,
        url: str,
        *,
        sink: Sink | None = None,
        interval_s: float = DEFAULT_SCRAPE_INTERVAL_S,
        timeout_s: float = DEFAULT_SCRAPE_TIMEOUT_S,
    ) -> None:
        self.url = metrics_url(url)
        self._sink = sink
        self.errors = ErrorLog()
        self._timeout_s = timeout_s
        # The engine is local or reached directly, as the load generator reaches it.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._lock = threading.Lock()
        self._samples: list[EngineSample] = []
        self._reason: str | None = None
        self._previous_tokens: tuple[int, float] | None = None
        self._loop = Periodic(
            "servelab-telemetry-metrics",
            interval_s,
            self._scrape,
            self.errors,
            label="metrics",
            max_duty=SCRAPE_MAX_DUTY,
            max_interval_s=SCRAPE_MAX_INTERVAL_S,
        )

    def start(self) -> None:
        anchor_ns, unix_s = wall_anchor()
        self._emit({"kind": "start", "t_ns": anchor_ns, "unix_time": unix_s, "url": self.url})
        self._loop.start()

    def stop(self, timeout_s: float = 5.0) -> bool:
        """End the thread; False if a scrape is still stuck after `timeout_s`."""
        self._loop.signal_stop()
        return self._loop.join(timeout_s)

    def trace(self) -> EngineTrace:
        with self._lock:
            return EngineTrace(url=self.url, samples=list(self._samples), reason=self._reason)

    def _emit(self, row: dict[str, Any]) -> None:
        if self._sink is not None:
            self._sink([row])

    def _scrape(self) -> None:
        t_send = now_ns()
        try:
            with self._opener.open(self.url, timeout=self._timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            exc.close()
            self._failed(
                f"HTTP {exc.code} from {self.url}",
                final=exc.code in _NO_METRICS_STATUS,
                hint=_NO_METRICS_HINT if exc.code == 404 else None,
            )
            return
        except urllib.error.URLError as exc:
            timed_out = isinstance(exc.reason, TimeoutError)
            self._failed(f"{self.url} did not answer: {exc.reason}", final=not timed_out)
            return
        except TimeoutError:
            self._failed(f"{self.url} did not answer within {self._timeout_s:g} s", final=False)
            return
        except (OSError, http.client.HTTPException) as exc:  # reset, or cut off mid-body
            self._failed(f"{self.url}: {type(exc).__name__}: {exc}", final=False)
            return
        t_recv = now_ns()
        parsed = parse_metrics(body.decode("utf-8", errors="replace"))
        t_ns = (t_send + t_recv) // 2
        sample = _sample(parsed, t_ns)
        if sample.gen_throughput is None and sample.generation_tokens_total is not None:
            sample = _with_derived_throughput(sample, self._previous_tokens)
        if sample.generation_tokens_total is not None:
            self._previous_tokens = (t_ns, sample.generation_tokens_total)
        with self._lock:
            self._samples.append(sample)
        self._emit(
            {
                "kind": "metrics",
                "t_ns": t_ns,
                "scrape_ms": (t_recv - t_send) / NS_PER_MS,
                "engine": sample.engine,
                "running": sample.running,
                "queued": sample.queued,
                "kv_usage": sample.kv_usage,
                "gen_throughput": sample.gen_throughput,
                "prompt_tokens_total": sample.prompt_tokens_total,
                "generation_tokens_total": sample.generation_tokens_total,
                "prefix_queries_total": sample.prefix_queries_total,
                "prefix_hits_total": sample.prefix_hits_total,
                "block_tokens": sample.block_tokens,
                "prefix_caching": sample.prefix_caching,
                "raw": {
                    name: [[labels, value] for labels, value in rows]
                    for name, rows in parsed.raw.items()
                    if name != _CACHE_CONFIG
                },
            }
        )

    def _failed(self, message: str, *, final: bool, hint: str | None = None) -> None:
        """A scrape failed: before any success a final failure means the engine has none."""
        with self._lock:
            unavailable = final and not self._samples
            if unavailable:
                self._reason = message if hint is None else f"{message} ({hint})"
        if unavailable:
            self._loop.signal_stop()
            self._emit({"kind": "unavailable", "t_ns": now_ns(), "reason": self._reason})
        else:
            self.errors.add(f"metrics: {message}")
            self._emit({"kind": "error", "t_ns": now_ns(), "message": message})


def _with_derived_throughput(
    sample: EngineSample, previous: tuple[int, float] | None
) -> EngineSample:
    """vLLM has no throughput gauge: output tokens since the previous scrape per second."""
    if previous is None or sample.generation_tokens_total is None:
        return sample
    then_ns, then_tokens = previous
    delta = sample.generation_tokens_total - then_tokens
    if delta < 0 or sample.t_ns <= then_ns:  # the engine restarted and its counter with it
        return sample
    return replace(sample, gen_throughput=delta * NS_PER_S / (sample.t_ns - then_ns))
