"""Computes a level's summary from its request records: one pure function.

Every definition here is the metrics contract of docs/METRICS.md; a test checks each
summary field is documented there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servelab.bench.load import LevelSpec
from servelab.bench.records import ErrorKind, OutputTokenSource, RequestRecord
from servelab.bench.results import ClientNode, ClientStats, InputTokenSource, LevelSummary
from servelab.core.clock import NS_PER_MS, NS_PER_S
from servelab.core.units import MS_PER_S

__all__ = [
    "CLIENT_BOUND_CPU_PCT",
    "CLIENT_BOUND_P99_LAG_SHARE",
    "NodeClock",
    "WorkerStats",
    "compute_level",
    "itl_ns",
    "slo_values_ms",
]

CLIENT_BOUND_P99_LAG_SHARE = 0.10
"""A p99 lag above this share of the level's time scale marks it client_bound."""
PREEMPTED_MOSTLY = 0.5
"""A thread whose switches were mostly involuntary was taken off its core with work left:
it ran until preempted, the mark of a CPU-bound thread (one that waits for I/O blocks)."""
CLIENT_BOUND_CPU_PCT = 90.0
"""A worker busier than this, in % of one core, marks its level client_bound."""


@dataclass(frozen=True, slots=True)
class NodeClock:
    """The cluster node a worker ran on, and that node's clock against the driver's."""

    node: str
    """Ray's node id, its first 8 hex digits."""
    address: str
    offset_ns: int
    """The node's clock minus the driver's, measured before the level (stamps are corrected)."""
    error_ns: int
    """Half the round trip of the best sample: the true offset is within this of offset_ns."""
    lost: bool = False
    """The worker was lost with its node during the level."""

    @property
    def label(self) -> str:
        return f"{self.address} ({self.node})"


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """What one worker process measured about itself during a level."""

    worker: int
    loop_lag_p99_ns: int
    loop_lag_max_ns: int
    cpu_s: float
    """CPU time of the worker process from its first send to its last completion."""
    wall_s: float
    """Wall time from its first send to its last completion."""
    node: NodeClock | None = None
    """Where the worker ran, on a cluster (bench.cluster); None on one host."""
    wait_s: float = 0.0
    """Time its event loop's thread was runnable but waited for a core, over the same span
    (0 where the kernel does not keep it)."""
    preempted_share: float | None = None
    """Of that thread's context switches over the level, the share that were involuntary:
    it lost the core with work left, rather than blocking for I/O. None where unknown."""

    @property
    def demand_pct(self) -> float:
        """The share of a core it wanted, in %. A worker that mostly lost its core with work
        left (most switches involuntary) wanted its CPU time and its wait for the core: on
        a shared machine a saturated worker gets half a core and still wants all of it. One
        that mostly blocked for I/O wanted only its CPU time: its wait is the latency of
        each wake-up behind another thread (the lag the loop-lag rule judges), not work."""
        if self.wall_s <= 0:
            return 0.0
        wanted = self.cpu_s
        if self.preempted_share is not None and self.preempted_share >= PREEMPTED_MOSTLY:
            wanted += self.wait_s
        return 100.0 * wanted / self.wall_s


def compute_level(
    records: Sequence[RequestRecord],
    *,
    level: LevelSpec,
    workers: Sequence[WorkerStats],
    slo_ms: dict[str, float] | None = None,
    interrupted: bool = False,
    notes: Sequence[str] = (),
) -> LevelSummary:
    """The summary of one level from its records (warm-up records are ignored)."""
    measured = [r for r in records if not r.warmup]
    warmups = sum(1 for r in records if r.warmup)
    live = [r for r in measured if r.error_kind is not ErrorKind.CANCELLED]
    done = [r for r in live if r.ok]
    failed = [r for r in live if not r.ok]

    duration_s = _duration_s(live)
    ttft = [r.ttft_ns for r in done]
    ttft_ms = [t / NS_PER_MS for t in ttft if t is not None]
    e2e_ms = [r.e2e_ns / NS_PER_MS for r in done]
    tpot_ms = [
        (r.e2e_ns - t) / NS_PER_MS / (r.output_tokens - 1)
        for r, t in zip(done, ttft, strict=True)
        if t is not None and r.output_tokens > 1
    ]
    itl = [(gap / NS_PER_MS, k) for r in done for gap, k in itl_ns(r)]
    latency = {
        **_stats("ttft_ms", ttft_ms),
        **_stats("tpot_ms", tpot_ms),
        **_stats("itl_ms", [gap for gap, _ in itl], [k for _, k in itl]),
        **_stats("e2e_latency_ms", e2e_ms),
    }

    input_tokens, input_source = _input_tokens(done)
    output_tokens = sum(r.output_tokens for r in done)
    per_s = 1.0 / duration_s if duration_s > 0 else 0.0

    goodput, good_fraction = _goodput(done, len(done) + len(failed), duration_s, slo_ms)
    # The latency statistics are built by name (_stats), so the summary is validated whole.
    return LevelSummary.model_validate(
        dict(
            level=level.index,
            load_mode=level.mode.value,
            max_concurrency=level.concurrency,
            request_rate=level.rate,
            burstiness=level.gamma_shape,
            num_requests=len(measured),
            warmup_requests=warmups,
            interrupted=interrupted,
            completed=len(done),
            failed=len(failed),
            cancelled=len(measured) - len(live),
            errors=dict(Counter(str(r.error_kind) for r in failed)),
            error_examples=_first_errors(failed),
            duration=duration_s,
            total_input_tokens=input_tokens,
            total_output_tokens=output_tokens,
            input_token_source=input_source,
            output_tokens_estimated=any(
                r.output_token_source is OutputTokenSource.CHUNKS for r in done
            ),
            chunk_tokens_estimated=any(r.chunk_tokens_estimated for r in done),
            request_throughput=len(done) * per_s,
            input_throughput=input_tokens * per_s,
            output_throughput=output_tokens * per_s,
            total_throughput=(input_tokens + output_tokens) * per_s,
            **latency,
            concurrency=sum(e2e_ms) / MS_PER_S * per_s,
            max_concurrent_requests=_max_in_flight(live),
            max_output_tokens_per_s=_max_tokens_in_a_second(done, live),
            single_stream_tok_s=_single_stream(done, level),
            slo_ms=slo_ms,
            request_goodput=goodput,
            good_fraction=good_fraction,
            client=_client_stats(
                measured,
                workers,
                level,
                _time_scale(
                    [
                        ("ITL", latency["median_itl_ms"]),
                        ("TPOT", latency["median_tpot_ms"]),
                        ("E2E latency", latency["median_e2e_latency_ms"]),
                    ]
                ),
                _time_scale([("E2E latency", latency["median_e2e_latency_ms"])]),
            ),
            notes=list(notes),
        )
    )


def itl_ns(record: RequestRecord) -> list[tuple[float, int]]:
    """Inter-token latency: (gap per token, the tokens it counts for), one pair per gap.

    A gap before a chunk carrying k tokens counts k times as gap/k; the gap before a
    chunk carrying none is carried into the next chunk's gap. Pairs, not k copies: a
    count a server got wrong by orders of magnitude must not become that many floats.
    """
    offsets = record.chunk_offsets_ns
    tokens = record.chunk_tokens
    gaps: list[tuple[float, int]] = []
    carried = 0
    for i in range(1, len(offsets)):
        gap = offsets[i] - offsets[i - 1] + carried
        k = 1 if tokens is None else tokens[i]
        if k <= 0:
            carried = gap
            continue
        carried = 0
        gaps.append((gap / k, k))
    return gaps


def _first_errors(failed: Sequence[RequestRecord]) -> dict[str, str]:
    examples: dict[str, str] = {}
    for r in failed:
        examples.setdefault(str(r.error_kind), r.error or "")
    return examples


def _duration_s(records: Sequence[RequestRecord]) -> float:
    if not records:
        return 0.0
    start = min(r.t_send_ns for r in records)
    end = max(r.t_end_ns for r in records)
    return max(end - start, 0) / NS_PER_S


def _stats(
    name: str, values_ms: list[float], counts: list[int] | None = None
) -> dict[str, float | None]:
    """Mean, median, std and percentiles of values each counted `counts` times (default 1).

    Exactly numpy's definitions (population std, linear-interpolation percentiles) on
    the expanded list, computed without expanding it.
    """
    keys = ("mean", "median", "std", "p90", "p95", "p99")
    if not values_ms:
        return {f"{key}_{name}": None for key in keys}
    values = np.asarray(values_ms, dtype=np.float64)
    weights = np.ones_like(values) if counts is None else np.asarray(counts, dtype=np.float64)
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[order]
    total = weights.sum()
    ends = np.cumsum(weights)  # the expanded list's element j is values[first i: ends[i] > j]

    def percentile(q: float) -> float:
        position = q / 100 * (total - 1)
        below = np.floor(position)
        lo = values[np.searchsorted(ends, below, side="right")]
        hi = values[np.searchsorted(ends, min(below + 1, total - 1), side="right")]
        return float(lo + (position - below) * (hi - lo))

    mean = float(np.dot(values, weights) / total)
    std = float(np.sqrt(np.dot(weights, (values - mean) ** 2) / total))
    stats = (mean, percentile(50), std, percentile(90), percentile(95), percentile(99))
    return {f"{key}_{name}": value for key, value in zip(keys, stats, strict=True)}


def _input_tokens(done: Sequence[RequestRecord]) -> tuple[int, InputTokenSource]:
    from_usage = sum(1 for r in done if r.prompt_tokens is not None)
    total = sum(
        r.prompt_tokens if r.prompt_tokens is not None else (r.input_tokens_target or 0)
        for r in done
    )
    if from_usage == len(done):
        return total, "usage"
    return total, "workload" if from_usage == 0 else "mixed"


def _max_in_flight(records: Sequence[RequestRecord]) -> int:
    """Exact maximum overlap of [t_send, t_end] intervals; an end before a start at a tie."""
    events = sorted([(r.t_send_ns, 1) for r in records] + [(r.t_end_ns, -1) for r in records])
    peak = current = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


def _max_tokens_in_a_second(done: Sequence[RequestRecord], live: Sequence[RequestRecord]) -> float:
    """Output tokens per 1-s bucket, buckets counted from the level's first send."""
    if not done:
        return 0.0
    start = min(r.t_send_ns for r in live)
    buckets: Counter[int] = Counter()
    for r in done:
        if not r.chunk_offsets_ns:
            buckets[(r.t_end_ns - start) // NS_PER_S] += r.output_tokens
            continue
        for i, offset in enumerate(r.chunk_offsets_ns):
            k = 1 if r.chunk_tokens is None else r.chunk_tokens[i]
            buckets[(r.t_send_ns + offset - start) // NS_PER_S] += k
    return float(max(buckets.values()))


def _single_stream(done: Sequence[RequestRecord], level: LevelSpec) -> float | None:
    if level.concurrency != 1 or not done:
        return None
    rates = [r.output_tokens / (r.e2e_ns / NS_PER_S) for r in done if r.e2e_ns > 0]
    return float(np.mean(rates)) if rates else None


def slo_values_ms(record: RequestRecord) -> dict[str, float | None]:
    """A completed request's TTFT, TPOT and E2E in ms, by SLO key; None where undefined
    (TTFT without streaming, TPOT of a one-token reply)."""
    ttft = record.ttft_ns
    e2e = record.e2e_ns
    return {
        "ttft": None if ttft is None else ttft / NS_PER_MS,
        "e2e": e2e / NS_PER_MS,
        "tpot": (e2e - ttft) / NS_PER_MS / (record.output_tokens - 1)
        if ttft is not None and record.output_tokens > 1
        else None,
    }


def _goodput(
    done: Sequence[RequestRecord], attempted: int, duration_s: float, slo_ms: dict | None
) -> tuple[float | None, float | None]:
    """A request is good when it completed and meets every SLO; an unknown value fails."""
    if not slo_ms:
        return None, None
    good = 0
    for r in done:
        observed = slo_values_ms(r)
        if all((value := observed[k]) is not None and value <= v for k, v in slo_ms.items()):
            good += 1
    rate = good / duration_s if duration_s > 0 else 0.0
    return rate, (good / attempted if attempted else None)


def _time_scale(medians_ms: list[tuple[str, float | None]]) -> tuple[str, float] | None:
    """The finest time the level measured: the first non-zero median, finest first.

    ITL is the scale whenever streams carried two chunks apart; a median ITL of 0 (chunks
    read together) or no ITL at all (non-streamed) falls back to TPOT, then E2E.
    """
    for name, median in medians_ms:
        if median:
            return f"median {name}", median
    return None


def _client_stats(
    measured: Sequence[RequestRecord],
    workers: Sequence[WorkerStats],
    level: LevelSpec,
    scale: tuple[str, float] | None,
    cycle: tuple[str, float] | None,
) -> ClientStats:
    # The loop's lag blurs every chunk's stamp: judged against the finest time measured.
    # A send's lag is judged against what it delays: an arrival (open loop: the gap between
    # arrivals), or a closed-loop slot's next request, whose latencies are timed from its
    # send, so that lag costs only offered load, in proportion to the request's own E2E.
    send_scale = ("mean inter-arrival gap", MS_PER_S / level.rate) if level.rate else cycle
    whole = _Lag.of(measured, workers)
    nodes = _nodes(measured, workers, scale, send_scale)
    if nodes:
        reasons = [reason for _, node_reasons in nodes for reason in node_reasons]
    else:
        reasons = whole.reasons(scale, send_scale)
    return ClientStats(
        workers=len(workers),
        p99_schedule_lag_ms=whole.p99_schedule_ms,
        max_schedule_lag_ms=whole.max_schedule_ms,
        p99_loop_lag_ms=whole.p99_loop_ms,
        max_loop_lag_ms=whole.max_loop_ms,
        max_cpu_pct=whole.cpu_pct,
        max_cpu_demand_pct=whole.demand_pct,
        client_bound=bool(reasons),
        client_bound_reason="; ".join(reasons) or None,
        nodes=[node for node, _ in nodes] or None,
        degraded=any(node.lost for node, _ in nodes),
    )


@dataclass(frozen=True, slots=True)
class _Lag:
    """The client's own lag and CPU use over some of its workers, in ms and %."""

    p99_schedule_ms: float
    max_schedule_ms: float
    p99_loop_ms: float
    max_loop_ms: float
    cpu_pct: float
    demand_pct: float

    @classmethod
    def of(cls, records: Sequence[RequestRecord], workers: Sequence[WorkerStats]) -> _Lag:
        lags = np.asarray(
            [max(r.t_send_ns - r.t_scheduled_ns - r.connect_ns, 0) for r in records], dtype=float
        )
        return cls(
            p99_schedule_ms=float(np.percentile(lags, 99)) / NS_PER_MS if lags.size else 0.0,
            max_schedule_ms=float(lags.max()) / NS_PER_MS if lags.size else 0.0,
            p99_loop_ms=max((w.loop_lag_p99_ns for w in workers), default=0) / NS_PER_MS,
            max_loop_ms=max((w.loop_lag_max_ns for w in workers), default=0) / NS_PER_MS,
            cpu_pct=max((100.0 * w.cpu_s / w.wall_s for w in workers if w.wall_s > 0), default=0.0),
            demand_pct=max((w.demand_pct for w in workers), default=0.0),
        )

    def reasons(
        self, scale: tuple[str, float] | None, send_scale: tuple[str, float] | None
    ) -> list[str]:
        lag = {
            "loop": (self.p99_loop_ms, self.max_loop_ms, scale),
            "schedule": (self.p99_schedule_ms, self.max_schedule_ms, send_scale),
        }
        return _client_bound_reasons(lag, self.cpu_pct, self.demand_pct)


def _nodes(
    measured: Sequence[RequestRecord],
    workers: Sequence[WorkerStats],
    scale: tuple[str, float] | None,
    send_scale: tuple[str, float] | None,
) -> list[tuple[ClientNode, list[str]]]:
    """Per cluster node: its lag judged as the whole client's is, and its clock's error
    bound against the same share of the level's finest time; empty on one host."""
    by_node: dict[str, list[WorkerStats]] = {}
    for w in workers:
        if w.node is not None:
            by_node.setdefault(w.node.label, []).append(w)
    nodes = []
    for label, mine in by_node.items():
        clock = mine[0].node
        assert clock is not None
        ids = {w.worker for w in mine}
        records = [r for r in measured if r.worker in ids]
        lag = _Lag.of(records, mine)
        reasons = [f"node {label}: {reason}" for reason in lag.reasons(scale, send_scale)]
        error_ms = clock.error_ns / NS_PER_MS
        if scale is not None and error_ms > CLIENT_BOUND_P99_LAG_SHARE * scale[1]:
            reasons.append(
                f"node {label}: clock offset known to ±{error_ms:.2f} ms >"
                f" {CLIENT_BOUND_P99_LAG_SHARE:.0%} of {scale[0]} {scale[1]:.1f} ms"
            )
        node = ClientNode(
            node=clock.node,
            address=clock.address,
            workers=len(mine),
            requests=len(records),
            clock_offset_ms=clock.offset_ns / NS_PER_MS,
            clock_error_ms=error_ms,
            p99_schedule_lag_ms=lag.p99_schedule_ms,
            p99_loop_lag_ms=lag.p99_loop_ms,
            max_cpu_pct=lag.cpu_pct,
            lost=any(w.node is not None and w.node.lost for w in mine),
        )
        nodes.append((node, reasons))
    return nodes


def _client_bound_reasons(
    lag_ms: dict[str, tuple[float, float, tuple[str, float] | None]],
    cpu_pct: float,
    demand_pct: float,
) -> list[str]:
    """Which rules say the client's own lag was material against what it measured.

    Each kind of lag has its own scale (a name and milliseconds): its p99 is judged
    against a share of it, its largest single lag against the whole of it. A worker is
    at its limit when it wanted over 90% of a core (WorkerStats.demand_pct, never below
    its CPU share), whether or not another program on the machine let it have the core.
    """
    reasons = []
    share = f"{CLIENT_BOUND_P99_LAG_SHARE:.0%}"
    for kind, (p99, most, scale) in lag_ms.items():
        if scale is None:
            continue
        name, ms = scale
        if p99 > CLIENT_BOUND_P99_LAG_SHARE * ms:
            reasons.append(f"p99 {kind} lag {p99:.1f} ms > {share} of {name} {ms:.1f} ms")
        if most > ms:
            reasons.append(f"max {kind} lag {most:.1f} ms > {name} {ms:.1f} ms")
    if demand_pct > CLIENT_BOUND_CPU_PCT:
        reasons.append(
            f"worker CPU {cpu_pct:.0f}% of a core, {demand_pct:.0f}% wanted, "
            f"> {CLIENT_BOUND_CPU_PCT:.0f}% over its busy part"
        )
    return reasons
