"""The engine's periodic stats lines, read from its log: the fields /metrics gives, again.

vLLM and SGLang print, while they serve, one line with the running and waiting requests,
the KV cache usage and the generation throughput. Where /metrics is absent (SGLang without
`--enable-metrics`, a build that does not export it) or lacks a field, these lines give
the same `EngineSample`s, on the bench clock: a line is stamped with
`time.perf_counter_ns()` when servelab's log reader receives it, the clock engine.log's
second stamp is on.

| field | vLLM `Engine 000: ...` | SGLang `Decode batch, ...` |
|---|---|---|
| running | `Running: N reqs` | `#running-req: N` |
| queued | `Waiting: N reqs` | `#queue-req: N` |
| kv_usage (0-1) | `<device> KV cache usage: P%`, / 100 | `token usage: U` (1) |
| gen_throughput | `Avg generation throughput: X tokens/s` (2) | `gen throughput (token/s): X` |

(1) hybrid models: the larger of `full token usage` and `swa token usage`, as SGLang's own
gauge. (2) tok/s, the mean since its previous line; SGLang's is over its last logged steps.

vLLM (vllm/v1/metrics/loggers.py `LoggingStatLogger.log`) prints the line every
`VLLM_LOG_STATS_INTERVAL` seconds (10 by default; servelab launches it with 1), and only
while the engine is not idle. SGLang (python/sglang/srt/managers/scheduler_metrics_mixin.py
`log_decode_stats`) prints it every `--decode-log-interval` decode steps (40 by default);
older releases wrote `Decode batch.` with a full stop. Several engines (vLLM's
data-parallel `Engine 001`, SGLang's `DPn` ranks) each print their own: a sample holds
the sum over the latest line of each (KV usage: the mean), as the scraper sums label sets.

transformers serve (5.24, and the embedded engine) has no stats line and no /metrics.
Its continuous-batching logger says, at INFO, only how it sized its cache and chose its
paths, once, when the first request builds the manager: those lines are log signatures
(`engines.signature_data`), not samples. At DEBUG it adds one `Request ... finished:
prefill_len = ... decode_len = ...` line per request (timings the client measures itself)
and the scheduler's `cache_free_percent = ... < self.safety_margin = ...: limiting the
requests scheduled.`, which appears only while the free cache is under the margin (15%),
so it cannot give a usage series. Measured on the CPU, 16 concurrent streams of 64 tokens
for 20 s: 0 continuous-batching lines per second at INFO (41 lines/s in all, uvicorn's
and the request notices), 19 more at DEBUG, all per-request; the limiting line did not
appear in 2.5 minutes of load sized to fill most of a 10,240-token cache. servelab keeps
that logger at INFO.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from statistics import fmean

from servelab.core.clock import now_ns
from servelab.telemetry.scrape import EngineSample, EngineTrace

__all__ = [
    "LOG_STATS_ENGINES",
    "LogStats",
    "StatsLine",
    "parse_stats_line",
]

_VLLM = re.compile(
    r"Engine (?P<rank>\d+): Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, "
    r"Avg generation throughput: (?P<gen>[\d.]+) tokens/s, Running: (?P<running>\d+) reqs, "
    r"Waiting: (?P<queued>\d+) reqs, .*?\b\w+ KV cache usage: (?P<kv_pct>[\d.]+)%"
)
_SGLANG = re.compile(r"Decode batch(?: \[\d+\])?[.,] #running-req: (?P<running>\d+), ")
_SGLANG_RANK = re.compile(r"\bDP(?P<rank>\d+)\b")
_SGLANG_QUEUED = re.compile(r"#queue-req: (\d+)")
_SGLANG_GEN = re.compile(r"gen throughput \(token/s\): ([\d.]+)")
_SGLANG_USAGE = re.compile(r"(?<![\w-])(?:full |swa )?token usage: ([\d.]+)")


@dataclass(frozen=True, slots=True)
class StatsLine:
    """The values of one stats line; `rank` tells the engines of one server apart."""

    rank: int
    running: float
    queued: float | None
    kv_usage: float | None
    gen_throughput: float | None


def _vllm_line(line: str) -> StatsLine | None:
    match = _VLLM.search(line)
    if match is None:
        return None
    return StatsLine(
        rank=int(match["rank"]),
        running=float(match["running"]),
        queued=float(match["queued"]),
        kv_usage=float(match["kv_pct"]) / 100,
        gen_throughput=float(match["gen"]),
    )


def _sglang_line(line: str) -> StatsLine | None:
    match = _SGLANG.search(line)
    if match is None:
        return None
    rest = line[match.end() :]
    rank = _SGLANG_RANK.search(line[: match.start()])
    queued = _SGLANG_QUEUED.search(rest)
    gen = _SGLANG_GEN.search(rest)
    usages = [float(value) for value in _SGLANG_USAGE.findall(rest)]
    return StatsLine(
        rank=int(rank["rank"]) if rank else 0,
        running=float(match["running"]),
        queued=float(queued.group(1)) if queued else None,
        kv_usage=max(usages) if usages else None,
        gen_throughput=float(gen.group(1)) if gen else None,
    )


_PARSERS: dict[str, Callable[[str], StatsLine | None]] = {
    "vllm": _vllm_line,
    "sglang": _sglang_line,
}

LOG_STATS_ENGINES = frozenset(_PARSERS)
"""Engines whose log has a stats line servelab reads."""


def parse_stats_line(engine: str, line: str) -> StatsLine | None:
    """The values of `line` if it is `engine`'s stats line, else None."""
    parser = _PARSERS.get(engine)
    return parser(line) if parser is not None else None


class LogStats:
    """Collects one engine's stats lines as `EngineSample`s; `feed` is thread-safe."""

    def __init__(self, engine: str) -> None:
        if engine not in _PARSERS:
            known = ", ".join(sorted(_PARSERS))
            raise ValueError(f"no stats line known for engine {engine!r} (known: {known})")
        self.engine = engine
        self._parse = _PARSERS[engine]
        self._lock = threading.Lock()
        self._latest: dict[int, StatsLine] = {}
        self._samples: list[EngineSample] = []

    def feed(self, line: str, *, t_ns: int | None = None) -> EngineSample | None:
        """Read one log line (stamped now unless `t_ns` is given); the sample it makes, if any."""
        parsed = self._parse(line)
        if parsed is None:
            return None
        stamp = now_ns() if t_ns is None else t_ns
        with self._lock:
            self._latest[parsed.rank] = parsed
            sample = _combined(self.engine, stamp, list(self._latest.values()))
            self._samples.append(sample)
        return sample

    def trace(self) -> EngineTrace:
        """A copy of the samples so far; `reason` says why there are none."""
        with self._lock:
            samples = list(self._samples)
        reason = None if samples else f"no {self.engine} stats line in its log yet"
        return EngineTrace(samples=samples, reason=reason)


def _combined(engine: str, t_ns: int, lines: list[StatsLine]) -> EngineSample:
    def total(values: list[float | None]) -> float | None:
        return None if any(v is None for v in values) else sum(v for v in values if v is not None)

    usage = [line.kv_usage for line in lines if line.kv_usage is not None]
    return EngineSample(
        t_ns=t_ns,
        engine=engine,
        running=sum(line.running for line in lines),
        queued=total([line.queued for line in lines]),
        kv_usage=fmean(usage) if usage else None,
        gen_throughput=total([line.gen_throughput for line in lines]),
        prompt_tokens_total=None,
        generation_tokens_total=None,
        source="log",
    )
