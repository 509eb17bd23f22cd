"""How much of a difference between two runs is noise: a bootstrap over their requests.

Each compared statistic of a level (throughput, single-stream tok/s, TTFT and TPOT
percentiles) is recomputed on resamples of the level's own requests, for each run apart,
and the band is the 2.5th–97.5th percentile of the ratio B / A over the resamples.

Requests are resampled in blocks of consecutive sends, one block per `concurrency`
requests, because requests that ran together share a batch and are not independent; a
slow moment then moves a whole block, as it moved the run. Throughput of a closed loop is
the concurrency over the mean latency (Little's law), so a resample moves it by
mean E2E / resampled mean E2E; an open loop's throughput is the arrivals', and a resample
moves it by its share of the tokens.

A resample cannot see a level that drifts while it runs (an engine thrashing past its
knee, a neighbour taking the CPU), and a repeat of such a level lands elsewhere: the band
is therefore widened by the level's own drift, how far the statistic on its second half of
requests lies from that on its first half, the larger of the two runs'. A steady level
keeps a narrow band; an unsteady one cannot be compared precisely, and its band says so.
A verdict also asks for a minimum effect (verdicts.MIN_EFFECT).

A level needs MIN_BLOCKS blocks for a band: with one block (no more requests than its
concurrency, as in every file imported as "all at once") each resample is the whole level
and the band would be the drift alone, which looks precise and is not. Such a level has no
band (`Band.why_none` says why), never a narrow one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servelab.bench.results import LevelSummary

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "FAMILY_ALPHA",
    "MIN_BLOCKS",
    "Band",
    "LevelSample",
    "Statistic",
    "block_resample",
    "level_sample",
    "metric_statistic",
    "no_band_reason",
    "rate_statistic",
    "ratio_band",
    "relative_drift",
]

BOOTSTRAP_RESAMPLES = 1000
MIN_BLOCKS = 5
"""Fewer blocks than this per level and no band is drawn: resampling 4 blocks with
replacement gives 35 distinct resamples, too few for a 95% band."""
FAMILY_ALPHA = 0.05
"""A family of bands read together misses its true ratio at most this often, all at once."""
MAX_DRIFT = 0.9
"""A drift is counted up to this much: past it the halves share nothing to compare."""
_NS_PER_MS = 1e6
_NAN = float("nan")


@dataclass(frozen=True)
class LevelSample:
    """One level's measured requests, as arrays in send order."""

    level: LevelSummary
    ttft_ms: np.ndarray
    e2e_ms: np.ndarray
    output_tokens: np.ndarray
    total_tokens: np.ndarray

    @property
    def size(self) -> int:
        return len(self.e2e_ms)

    @property
    def block(self) -> int:
        return max(1, min(self.level.max_concurrency or 1, self.size))

    @property
    def blocks(self) -> int:
        """How many blocks the level's requests make (the last one may be short)."""
        return -(-self.size // self.block)


@dataclass(frozen=True)
class Band:
    """The bootstrap band of B / A: `lo` and `hi` around the measured `ratio`."""

    ratio: float
    lo: float
    hi: float
    drift: float
    """The larger of the two levels' drift between their halves, which widened the band."""
    why_none: str | None = None
    """Why there is no band (`lo` and `hi` are NaN then): "no band: one block of 64
    requests"; None when there is one."""

    @property
    def drawn(self) -> bool:
        return self.why_none is None and bool(np.isfinite(self.lo) and np.isfinite(self.hi))

    def excludes_one(self) -> bool:
        return self.lo > 1 or self.hi < 1


Statistic = Callable[[LevelSample, np.ndarray], float]
"""A statistic of a level on the requests at the given indices."""


def level_sample(level: LevelSummary, records: Sequence[dict[str, Any]]) -> LevelSample | None:
    """The level's completed, measured requests, or None where there are fewer than two.

    A streamed request is timed by its text chunks; one sent without streaming (no chunks)
    by its whole response, which is then its first byte too."""
    rows = sorted(
        (
            r
            for r in records
            if r.get("level") == level.level
            and r.get("ok")
            and not r.get("warmup")
            and (r.get("chunk_offsets_ns") or r.get("t_end_ns", 0) > r.get("t_send_ns", 0))
        ),
        key=lambda r: r["t_send_ns"],
    )
    if len(rows) < 2:
        return None
    return LevelSample(
        level=level,
        ttft_ms=np.array([_first_ns(r) / _NS_PER_MS for r in rows]),
        e2e_ms=np.array([_last_ns(r) / _NS_PER_MS for r in rows]),
        output_tokens=np.array([float(r.get("output_tokens") or 0) for r in rows]),
        total_tokens=np.array(
            [float((r.get("output_tokens") or 0) + (r.get("prompt_tokens") or 0)) for r in rows]
        ),
    )


def _first_ns(record: dict[str, Any]) -> int:
    chunks = record.get("chunk_offsets_ns")
    return int(chunks[0]) if chunks else _last_ns(record)


def _last_ns(record: dict[str, Any]) -> int:
    chunks = record.get("chunk_offsets_ns")
    return int(chunks[-1]) if chunks else int(record["t_end_ns"] - record["t_send_ns"])


def ratio_band(
    a: LevelSample,
    b: LevelSample,
    statistic: Statistic,
    *,
    seed: int = 0,
    comparisons: int = 1,
) -> Band:
    """The band of statistic(B) / statistic(A) over block resamples of each.

    Its coverage is 95% for the whole family of `comparisons` bands read together
    (Bonferroni: each covers 1 - 0.05 / comparisons), so a report of ten metrics does not
    call one of two identical runs "outside noise" one time in three. Where either level
    has fewer than MIN_BLOCKS blocks the band is NaN and `why_none` says why.
    """
    measured = _quotient(statistic(b, np.arange(b.size)), statistic(a, np.arange(a.size)))
    why = no_band_reason(a, b)
    if why is not None:
        return Band(ratio=float(measured), lo=_NAN, hi=_NAN, drift=0.0, why_none=why)
    rng = np.random.default_rng(seed)
    ratios = np.array(
        [
            _quotient(
                statistic(b, block_resample(b.size, b.block, rng)),
                statistic(a, block_resample(a.size, a.block, rng)),
            )
            for _ in range(BOOTSTRAP_RESAMPLES)
        ]
    )
    ratios = ratios[np.isfinite(ratios)]
    if not len(ratios):
        why = "no band: too few requests with that statistic"
        return Band(ratio=float(measured), lo=_NAN, hi=_NAN, drift=0.0, why_none=why)
    tail = FAMILY_ALPHA / max(comparisons, 1) / 2 * 100
    lo, hi = np.percentile(ratios, [tail, 100 - tail])
    drift = max(_drift(a, statistic), _drift(b, statistic))
    return Band(
        ratio=float(measured), lo=float(lo) * (1 - drift), hi=float(hi) * (1 + drift), drift=drift
    )


def _quotient(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN where a resample's statistic is 0 (a level whose TPOTs
    are mostly 0, as when answers arrive in one chunk): such a draw has no ratio to give."""
    return numerator / denominator if denominator else _NAN


def no_band_reason(*samples: LevelSample) -> str | None:
    """Why these levels cannot have a band (the first with fewer than MIN_BLOCKS blocks),
    or None when every one has enough."""
    for sample in samples:
        if sample.blocks == 1:
            return f"no band: one block of {sample.size} requests"
        if sample.blocks < MIN_BLOCKS:
            return f"no band: only {sample.blocks} blocks of {sample.block} requests"
    return None


def _drift(sample: LevelSample, statistic: Statistic) -> float:
    """The drift of the statistic between the level's halves (`relative_drift`)."""
    half = sample.size // 2
    if half < 2:
        return 0.0
    first = statistic(sample, np.arange(half))
    second = statistic(sample, np.arange(half, sample.size))
    return relative_drift(first, second)


def relative_drift(first: float, second: float) -> float:
    """|second / first - 1| of a statistic on a level's first and second halves, at most
    MAX_DRIFT; 0 where it is undefined."""
    drift = abs(second / first - 1) if first else 0.0
    return float(min(drift, MAX_DRIFT)) if np.isfinite(drift) else 0.0


def block_resample(size: int, block: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of a resample of `size` requests in send order: whole blocks of `block`
    consecutive sends, drawn with replacement."""
    starts = np.arange(0, size, block)
    chosen = rng.choice(starts, size=len(starts), replace=True)
    indices = (chosen[:, None] + np.arange(block)[None, :]).ravel()
    return indices[indices < size]  # the last block may be short


def rate_statistic(field: str) -> Statistic:
    """A throughput of the level (`total_throughput`, `output_throughput`) moved as a
    resample moves it: by mean E2E in a closed loop, by its share of tokens in an open one."""

    def statistic(s: LevelSample, idx: np.ndarray) -> float:
        value = float(getattr(s.level, field))
        if s.level.max_concurrency is not None:
            return value * float(np.mean(s.e2e_ms) / np.mean(s.e2e_ms[idx]))
        tokens = s.total_tokens if field == "total_throughput" else s.output_tokens
        return value * float(np.mean(tokens[idx]) / np.mean(tokens))

    return statistic


SINGLE_STREAM = "single_stream_tok_s"
_PERCENTILES = {"mean": None, "median": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}
_MIN_P99_REQUESTS = 100
"""A p99 of fewer requests is their largest value; resampling a maximum says nothing."""


def metric_statistic(metric: str) -> Statistic | None:
    """The statistic that resamples a level summary's `metric` (a throughput,
    `single_stream_tok_s`, or a mean or percentile of TTFT, TPOT or E2E latency); None for a
    metric no resample can move (goodput, ITL, counts)."""
    if metric in ("total_throughput", "output_throughput"):
        return rate_statistic(metric)
    if metric == "request_throughput":
        return _request_rate
    if metric == SINGLE_STREAM:
        return _single_stream
    head, _, rest = metric.partition("_")
    what = rest.removesuffix("_ms")
    if head not in _PERCENTILES or not rest.endswith("_ms") or what not in _VALUES:
        return None
    return _summary_statistic(what, _PERCENTILES[head])


def _request_rate(s: LevelSample, idx: np.ndarray) -> float:
    """A closed loop's requests/s move with mean E2E (Little's law); an open loop's are the
    arrivals'."""
    value = float(s.level.request_throughput or 0.0)
    if s.level.max_concurrency is None:
        return value
    return value * float(np.mean(s.e2e_ms) / np.mean(s.e2e_ms[idx]))


def _single_stream(s: LevelSample, idx: np.ndarray) -> float:
    return float(np.mean(s.output_tokens[idx] / (s.e2e_ms[idx] / 1000)))


def _tpot_ms(s: LevelSample, idx: np.ndarray) -> np.ndarray:
    out = s.output_tokens[idx]
    keep = out > 1
    return ((s.e2e_ms[idx] - s.ttft_ms[idx])[keep]) / (out[keep] - 1)


_VALUES: dict[str, Callable[[LevelSample, np.ndarray], np.ndarray]] = {
    "ttft": lambda s, idx: s.ttft_ms[idx],
    "e2e_latency": lambda s, idx: s.e2e_ms[idx],
    "tpot": _tpot_ms,
}


def _summary_statistic(what: str, q: float | None) -> Statistic:
    values_of = _VALUES[what]

    def statistic(s: LevelSample, idx: np.ndarray) -> float:
        if q == 99.0 and s.size < _MIN_P99_REQUESTS:
            return float("nan")
        values = values_of(s, idx)
        if not len(values):
            return float("nan")
        return float(np.mean(values) if q is None else np.percentile(values, q))

    return statistic
