"""The engine's periodic stats lines, read from its log: the fields /metrics gives, again.

vLLM and SGLang print, while they serve, one line with the running and waiting requests,
the KV cache usage and the generation throughput; SGLang adds one line per prefill batch.
Where /metrics is absent (SGLang without `--enable-metrics`, a build that does not export
it) or lacks a field, these lines give the same `EngineSample`s, on the bench clock: a
line is stamped with `time.perf_counter_ns()` when servelab's log reader receives it, the
clock engine.log's second stamp is on.

| field | vLLM | SGLang `Decode batch` | SGLang `Prefill batch` |
|---|---|---|---|
| running | `Running: N reqs` | `#running-req: N` | `#running-req: N` (1) |
| queued | `Waiting: N reqs` (V0: `Pending`) | `#queue-req: N` | `#queue-req: N` |
| kv_usage (0-1) | `GPU KV cache usage: P%`, / 100 (2) | `token usage: U` (3) | the same (3) |
| gen_throughput | `Avg generation throughput: X tokens/s` (4) | `gen throughput (token/s): X` | - |
| prefill_seqs | - | - | `#new-seq: N` |
| prefill_tokens | - | - | `#new-token: N` |
| cached_tokens | - | - | `#cached-token: N` |

(1) `(mixed #running-req: N)` with `--enable-mixed-chunk`; absent on a disaggregated
prefill server in 0.4.8-0.5.2, so None there. (2) `<device> KV cache usage` from 0.30; V0
prints the GPU's, then the CPU's (swap space): the first is read. (3) Hybrid models print
one usage per pool (`full token usage`, `swa token usage`, `mamba usage`; 0.4.9: `token
usage: full=U, swa=V`): the largest, as SGLang's own gauge from 0.5.10; HiSparse's `gpu`
and `cpu token usage` are not its gauge and are not read. (4) tok/s, the mean since its
previous line; SGLang's is over its last logged steps.

The formats, as the released sources write them (tests/fixtures/engine_logs/stats/ has one
line of each, with its file, function and the versions read):

| engine | versions | the line |
|---|---|---|
| vLLM V0 | 0.1.3-0.4.2 | `Avg prompt ..., Running, Swapped, Pending, GPU KV ..., CPU KV ...` |
| vLLM V0 | 0.4.3-0.11.0 | the same, ending in `.` |
| vLLM V1 | 0.7.0 | `Running: N reqs, Waiting: M reqs ` alone |
| vLLM V1 | 0.7.1-0.7.2 | `Avg prompt ..., Waiting: M reqs GPU KV cache usage: P%.` (no comma) |
| vLLM V1 | 0.7.3- | `..., Waiting: M reqs, GPU KV cache usage: P%, Prefix cache hit rate: H%` |
| vLLM V1 | 0.8.3- | `Engine NNN: ` first (`N Engines Aggregated: ` when aggregated, 0.11.1-) |
| vLLM V1 | 0.11.1- | optional parts: `Preemptions`, `Deferred` (0.20-), `KV fetch` (0.32-), ... |
| vLLM V1 | 0.30.0- | `<device> KV cache usage`; `Prefix cache hit rate` only once seen (0.31-) |
| SGLang | 0.1.13-0.1.16 | no label: `#running-req: N, #token: ...`, `new fill batch. #seq: ...` |
| SGLang | 0.1.17-0.2.13 | `[gpu_id=N] ` (`[gpu=N] ` from 0.2.7) first; `Prefil batch` in 0.1.17 |
| SGLang | 0.2.14-0.5.3 | `Decode batch. `, `Prefill batch. ` |
| SGLang | 0.5.4 | `Decode batch [N], `, `Prefill batch [N], ` |
| SGLang | 0.5.4.post3- | `Decode batch, ` (` [N]` with `SGLANG_LOG_FORWARD_ITERS`) |

Between the fields read, each version adds its own (speculative decoding's `accept len`,
the disaggregation queues, `cuda graph`, `cache hit rate`, `#pending-token`, ...): skipped.
The log prefix before the message varies (vLLM's `INFO 01-02 10:00:00 [loggers.py:123] `
and `(APIServer pid=N) `, SGLang's `[2025-01-02 10:00:00 DP1 TP0] ` or `[10:00:00 TP0] `,
a container runtime's RFC 3339 stamp, colour codes) and is skipped. Numbers may carry
thousands separators (`1,234.5`), read without them. A stats line wrapped over two
physical lines by a terminal is joined again: `LogStats` keeps a line that starts one but
lacks its last field and tries it with the next line (one continuation at most). A wrap
inside the last number of a line that ends with it cannot be told from a whole line.

vLLM (vllm/v1/metrics/loggers.py `LoggingStatLogger.log`) prints the line every
`VLLM_LOG_STATS_INTERVAL` seconds (10 by default; servelab launches it with 1), and only
while the engine is not idle. SGLang (python/sglang/srt/managers/scheduler_metrics_mixin.py
`log_decode_stats`; `report_decode_stats` of observability/ from 0.5.10 and of
scheduler_components/metrics_reporter.py from 0.5.15) prints its Decode line every
`--decode-log-interval` decode steps (40 by default), and a Prefill line for every prefill
batch. Several engines (vLLM's data-parallel `Engine 001`, SGLang's `DPn` ranks,
its older `[gpu=N]` workers) each print their own: a sample holds the sum over the latest
values of each (KV usage: the mean), as the scraper sums label sets; a rank's latest value
of a field is that of its latest line that has the field (a Prefill line has no generation
throughput, a Decode line no prefill counts).

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
from dataclasses import dataclass, fields, replace
from statistics import fmean

from servelab.core.clock import now_ns
from servelab.telemetry.scrape import EngineSample, EngineTrace

__all__ = [
    "LOG_STATS_ENGINES",
    "LogStats",
    "StatsLine",
    "parse_stats_line",
]

# An integer, with or without thousands separators: only digit-comma-three-digit groups,
# so the ", " between fields is never read as one.
_INT = r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)"
_NUM = rf"{_INT}(?:\.\d+)?"

_VLLM = re.compile(
    rf"(?:Engine (?P<rank>\d+): |(?P<engines>\d+) Engines Aggregated: )?"
    rf"Avg prompt throughput: {_NUM} tokens/s, "
    rf"Avg generation throughput: (?P<gen>{_NUM}) tokens/s, "
    rf"Running: (?P<running>{_INT}) reqs, (?:Swapped: {_INT} reqs, )?"
    rf"(?:Waiting|Pending): (?P<queued>{_INT}) reqs,? (?:.*?, )??\w+ KV cache usage: "
    rf"(?P<kv_pct>{_NUM})%"
)
_VLLM_070 = re.compile(  # the whole message: not the middle of a longer (or wrapped) line
    rf"(?<!, )Running: (?P<running>{_INT}) reqs, Waiting: (?P<queued>{_INT}) reqs\s*$"
)
_VLLM_AGGREGATED_RANK = -1
"""vLLM's own engine index for the line summed over its engines."""

_SGLANG_DECODE = re.compile(
    rf"(?:\[gpu(?:_id)?=(?P<gpu>\d+)\] )?Decode batch(?: \[\d+\])?[.,] "
    rf"#running-req: (?P<running>{_INT}), "
    rf"|#running-req: (?P<unlabelled>{_INT}), #token: "
)
_SGLANG_PREFILL = re.compile(
    rf"(?:\[gpu(?:_id)?=(?P<gpu>\d+)\] )?Prefill? batch(?: \[\d+\])?"
    rf"(?:\(mixed #running-req: (?P<mixed>{_INT})\))?[.,] "
    rf"#new-seq: (?P<seqs>{_INT}), #new-token: (?P<new>{_INT}), "
    rf"#cached-token: (?P<cached>{_INT}), "
)
_SGLANG_FILL = re.compile(
    rf"new fill batch\. #seq: (?P<seqs>{_INT})\. #cached_token: (?P<cached>{_INT})\. "
    rf"#new_token: (?P<new>{_INT})\. #remaining_req: (?P<queued>{_INT})\. "
    rf"#running_req: (?P<running>{_INT})\. "
)
_SGLANG_DP = re.compile(r"\bDP(\d+)\b")
_SGLANG_RUNNING = re.compile(rf"#running-req: ({_INT})")
_SGLANG_QUEUED = re.compile(rf"#queue-req: ({_INT})")
_SGLANG_GEN = re.compile(rf"gen throughput \(token/s\): ({_NUM})")
_SGLANG_USAGE = re.compile(
    rf"(?<=, )token usage: full=({_NUM}), swa=({_NUM})"
    rf"|(?<=, )(?:token|full token|swa token|mamba) usage: ({_NUM})"
)

_STARTS = {
    "vllm": re.compile(r"Avg prompt throughput:"),
    "sglang": re.compile(r"Decode batch|Prefill? batch|new fill batch|#running-req: \d+, #token"),
}
"""Where a line begins a stats line: one that does and does not parse may be wrapped."""
_LABELS = {
    "vllm": re.compile(
        r"(?<![\w-])(?:Avg (?:prompt|generation) throughput|Running|Waiting|Pending"
        r"|KV cache usage): "
    ),
    "sglang": re.compile(
        r"(?<![\w-])(?:#running-req|#queue-req|#new-seq|#new-token|#cached-token"
        r"|(?:full |swa )?token usage|mamba usage|gen throughput \(token/s\)): "
    ),
}
"""The field labels read, as the engines write them: how a joined line is judged."""
_MAX_PENDING_CHARS = 2048


@dataclass(frozen=True, slots=True)
class StatsLine:
    """The values of one stats line; `rank` tells the engines of one server apart.

    None where the line has no such field; the prefill counts come from SGLang's Prefill
    lines only.
    """

    rank: int
    running: float | None
    queued: float | None
    kv_usage: float | None
    gen_throughput: float | None
    prefill_tokens: float | None = None
    cached_tokens: float | None = None
    prefill_seqs: float | None = None


def parse_stats_line(engine: str, line: str, *, prefill: bool = False) -> StatsLine | None:
    """The values of `line` if it is `engine`'s periodic stats line, else None.

    `prefill` also reads SGLang's per-batch Prefill lines (as `LogStats` does); without
    it they are not stats lines, since they come with each prefill batch, not periodically.
    """
    parser = _PARSERS.get(engine)
    return parser(line, prefill) if parser is not None else None


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _vllm_line(line: str, _prefill: bool) -> StatsLine | None:
    match = _VLLM.search(line)
    if match is not None:
        rank = _VLLM_AGGREGATED_RANK if match["engines"] else int(match["rank"] or 0)
        return StatsLine(
            rank=rank,
            running=_number(match["running"]),
            queued=_number(match["queued"]),
            kv_usage=_number(match["kv_pct"]) / 100,
            gen_throughput=_number(match["gen"]),
        )
    match = _VLLM_070.search(line)
    if match is None:
        return None
    return StatsLine(0, _number(match["running"]), _number(match["queued"]), None, None)


def _sglang_line(line: str, prefill: bool) -> StatsLine | None:
    decode = _SGLANG_DECODE.search(line)
    if decode is not None:
        return _sglang_decode(line, decode)
    if not prefill:
        return None
    batch = _SGLANG_PREFILL.search(line)
    if batch is not None:
        return _sglang_prefill(line, batch)
    fill = _SGLANG_FILL.search(line)
    if fill is None:
        return None
    return StatsLine(
        rank=_sglang_rank(line[: fill.start()], None),
        running=_number(fill["running"]),
        queued=_number(fill["queued"]),
        kv_usage=None,
        gen_throughput=None,
        prefill_tokens=_number(fill["new"]),
        cached_tokens=_number(fill["cached"]),
        prefill_seqs=_number(fill["seqs"]),
    )


def _sglang_decode(line: str, match: re.Match[str]) -> StatsLine | None:
    queued = _SGLANG_QUEUED.search(line, match.end())
    if queued is None:  # every Decode line has it near its end: this one is cut short
        return None
    gen = _SGLANG_GEN.search(line, match.end())
    return StatsLine(
        rank=_sglang_rank(line[: match.start()], match["gpu"]),
        running=_number(match["running"] or match["unlabelled"]),
        queued=_number(queued.group(1)),
        kv_usage=_sglang_usage(line, match.end()),
        gen_throughput=_number(gen.group(1)) if gen else None,
    )


def _sglang_prefill(line: str, match: re.Match[str]) -> StatsLine | None:
    queued = _SGLANG_QUEUED.search(line, match.end())
    if queued is None:
        return None
    running = match["mixed"]
    if running is None and (found := _SGLANG_RUNNING.search(line, match.end())) is not None:
        running = found.group(1)
    return StatsLine(
        rank=_sglang_rank(line[: match.start()], match["gpu"]),
        running=_number(running) if running is not None else None,
        queued=_number(queued.group(1)),
        kv_usage=_sglang_usage(line, match.end()),
        gen_throughput=None,
        prefill_tokens=_number(match["new"]),
        cached_tokens=_number(match["cached"]),
        prefill_seqs=_number(match["seqs"]),
    )


def _sglang_rank(prefix: str, gpu: str | None) -> int:
    """The data-parallel rank of the log prefix, else the worker's GPU (0.1.17-0.2.13)."""
    dp = _SGLANG_DP.search(prefix)
    if dp is not None:
        return int(dp.group(1))
    return int(gpu) if gpu is not None else 0


def _sglang_usage(line: str, pos: int) -> float | None:
    """The largest pool usage after `pos` (each follows a ", ", which the match looks back on)."""
    found = _SGLANG_USAGE.findall(line, pos)
    usages = [_number(value) for groups in found for value in groups if value]
    return max(usages) if usages else None


_PARSERS: dict[str, Callable[[str, bool], StatsLine | None]] = {
    "vllm": _vllm_line,
    "sglang": _sglang_line,
}

LOG_STATS_ENGINES = frozenset(_PARSERS)
"""Engines whose log has a stats line servelab reads."""


class LogStats:
    """Collects one engine's stats lines as `EngineSample`s; `feed` is thread-safe."""

    def __init__(self, engine: str) -> None:
        if engine not in _PARSERS:
            known = ", ".join(sorted(_PARSERS))
            raise ValueError(f"no stats line known for engine {engine!r} (known: {known})")
        self.engine = engine
        self._parse = _PARSERS[engine]
        self._starts = _STARTS[engine]
        self._labels = _LABELS[engine]
        self._lock = threading.Lock()
        self._pending: str | None = None
        self._latest: dict[int, StatsLine] = {}
        self._samples: list[EngineSample] = []

    def feed(self, line: str, *, t_ns: int | None = None) -> EngineSample | None:
        """Read one log line (stamped now unless `t_ns` is given); the sample it makes, if any."""
        with self._lock:
            parsed = self._read(line)
            if parsed is None:
                return None
            stamp = now_ns() if t_ns is None else t_ns
            self._latest[parsed.rank] = _updated(self._latest.get(parsed.rank), parsed)
            sample = _combined(self.engine, stamp, list(self._latest.values()))
            self._samples.append(sample)
        return sample

    def trace(self) -> EngineTrace:
        """A copy of the samples so far; `reason` says why there are none."""
        with self._lock:
            samples = list(self._samples)
        reason = None if samples else f"no {self.engine} stats line in its log yet"
        return EngineTrace(samples=samples, reason=reason)

    def _read(self, line: str) -> StatsLine | None:
        """`line`'s values, or those of the wrapped line it ends; keeps a wrapped start."""
        pending, self._pending = self._pending, None
        parsed = self._parse(line, True)
        if parsed is None and pending is not None:
            parsed = self._joined(pending, line)
            if parsed is not None:
                return parsed
        if parsed is None and len(line) <= _MAX_PENDING_CHARS and self._starts.search(line):
            self._pending = line
        return parsed

    def _joined(self, pending: str, line: str) -> StatsLine | None:
        """The values of `pending` and `line` read as one line a terminal broke in two.

        The break may fall anywhere; a capture that trims trailing blanks loses the space
        it fell on. The engines put one after every ':' and every ',' but a thousands
        separator's, so that join is tried first there; elsewhere a lost space makes two
        words into none the engine writes, so the join with more of its field labels wins,
        the first on a tie.
        """
        after = line[:1]
        lost = pending.endswith(":") or (pending.endswith(",") and not after.isdigit())
        spaced, unspaced = f"{pending} {line}", pending + line
        joins = (spaced, unspaced) if lost and not after.isspace() else (unspaced, spaced)
        scored = [
            (len(self._labels.findall(joined)), parsed)
            for joined in joins
            if (parsed := self._parse(joined, True)) is not None
        ]
        return max(scored, key=lambda pair: pair[0])[1] if scored else None


def _updated(previous: StatsLine | None, line: StatsLine) -> StatsLine:
    """`line`, with the fields it lacks carried from the rank's previous lines."""
    if previous is None:
        return line
    carried = {
        field.name: getattr(previous, field.name)
        for field in fields(StatsLine)
        if getattr(line, field.name) is None
    }
    return replace(line, **carried)


def _combined(engine: str, t_ns: int, lines: list[StatsLine]) -> EngineSample:
    def total(values: list[float | None]) -> float | None:
        return None if any(v is None for v in values) else sum(v for v in values if v is not None)

    usage = [line.kv_usage for line in lines if line.kv_usage is not None]
    return EngineSample(
        t_ns=t_ns,
        engine=engine,
        running=total([line.running for line in lines]),
        queued=total([line.queued for line in lines]),
        kv_usage=fmean(usage) if usage else None,
        gen_throughput=total([line.gen_throughput for line in lines]),
        prompt_tokens_total=None,
        generation_tokens_total=None,
        prefill_tokens=total([line.prefill_tokens for line in lines]),
        cached_tokens=total([line.cached_tokens for line in lines]),
        prefill_seqs=total([line.prefill_seqs for line in lines]),
        source="log",
    )
