"""Whether one load meets the SLO, and whether a repeat could say otherwise.

A level's attempted requests (completed or failed; warm-up and requests cancelled by
Ctrl-C left out) are taken in send order. A request is *good* when it completed and each
SLO metric (TTFT, TPOT, E2E, as docs/METRICS.md defines them; an unknown value fails) is at
or under its bound. The level **meets** the SLO when the share of good requests, the
*attained* share, is at least the attainment asked for (goodput's `good_fraction`).

Each SLO metric is also read at the attainment share: the smallest value that at least
that share of the requests stay at or under, a failed request counting as infinitely slow.
For one SLO this quantile is at or under its bound exactly when the level meets the SLO;
with several, the *binding* metric is the one with the largest value / bound.

Bands are bench.noise's: a block bootstrap (blocks of consecutive sends, as many requests
as were in flight together: the concurrency, or in open loop the mean in flight), the
2.5th–97.5th percentiles of the resampled statistic. The share's band is widened by its
drift between the level's halves (`noise.relative_drift`), which a resample cannot see; a
metric's band is not (its quantile jumps between the good and the failed requests' values,
so the ratio of its halves says nothing of a repeat). Measurements of one load pooled after
a re-measure are each resampled within themselves, and their drift is the run-to-run one.

The verdict is **within noise** when a repeat could reverse it: the share's band reaches
both sides of the attainment (lo < attainment <= hi), the binding metric's band both sides
of its bound (lo <= bound < hi), or no band can be drawn (fewer than noise.MIN_BLOCKS
blocks).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servelab.bench.capacity_results import LevelJudgement, SloQuantile
from servelab.bench.metrics import slo_values_ms
from servelab.bench.noise import (
    BOOTSTRAP_RESAMPLES,
    FAMILY_ALPHA,
    MIN_BLOCKS,
    block_resample,
    relative_drift,
)
from servelab.bench.records import ErrorKind, RequestRecord
from servelab.bench.results import LevelSummary

__all__ = [
    "SloSample",
    "duration_text",
    "judge",
    "quantile_label",
    "request_block",
    "slo_sample",
]

_TAIL_PCT = FAMILY_ALPHA / 2 * 100


@dataclass(frozen=True)
class SloSample:
    """One measurement's attempted requests in send order: which were good, and each SLO
    metric's value in ms (infinite where the request failed or lacks it)."""

    good: np.ndarray
    values_ms: dict[str, np.ndarray]
    block: int
    """Requests per resampled block: those in flight together."""

    @property
    def size(self) -> int:
        return len(self.good)

    @property
    def blocks(self) -> int:
        return -(-self.size // self.block)


def slo_sample(records: Sequence[RequestRecord], slo_ms: dict[str, float], block: int) -> SloSample:
    """The level's attempted requests as an SloSample."""
    attempted = sorted(
        (r for r in records if not r.warmup and r.error_kind is not ErrorKind.CANCELLED),
        key=lambda r: r.t_send_ns,
    )
    rows = [slo_values_ms(r) if r.ok else {} for r in attempted]
    values = {
        metric: np.array([_or_inf(row.get(metric)) for row in rows], dtype=float)
        for metric in slo_ms
    }
    good = np.ones(len(rows), dtype=bool)
    for metric, bound in slo_ms.items():
        good &= values[metric] <= bound
    return SloSample(good=good, values_ms=values, block=max(1, block))


def request_block(level: LevelSummary) -> int:
    """Requests in flight together: the concurrency, or in open loop the mean in flight."""
    if level.max_concurrency is not None:
        return level.max_concurrency
    return max(1, round(level.concurrency or 1.0))


def judge(
    parts: Sequence[SloSample], slo_ms: dict[str, float], attainment: float, *, seed: int = 0
) -> LevelJudgement:
    """The verdict on a load from its measurements (`parts`), with its bands."""
    good = np.concatenate([p.good for p in parts])
    values = {m: np.concatenate([p.values_ms[m] for p in parts]) for m in slo_ms}
    n = len(good)
    attained = float(good.mean()) if n else 0.0
    quantile = {m: _quantile(v, attainment) for m, v in values.items()}
    binding = max(slo_ms, key=lambda m: quantile[m] / slo_ms[m])
    blocks = sum(p.blocks for p in parts)
    bands = _bands(parts, values, good, attainment, seed) if blocks >= MIN_BLOCKS else {}
    share_band = bands.get("share")
    if bands:
        reasons = _reversible(share_band, attainment, binding, bands[binding], slo_ms[binding])
        noise = "within noise: " + "; ".join(reasons) if reasons else _STEADY
    else:
        reasons = [f"no band: only {blocks} block{'s' if blocks != 1 else ''} of requests"]
        noise = "within noise: " + reasons[0]
    return LevelJudgement(
        requests=n,
        attained=attained,
        attained_lo=share_band[0] if share_band else None,
        attained_hi=share_band[1] if share_band else None,
        quantiles=[
            SloQuantile(
                metric=m,
                slo_ms=bound,
                value_ms=_finite(quantile[m]),
                band_lo_ms=_finite(bands[m][0]) if m in bands else None,
                band_hi_ms=_finite(bands[m][1]) if m in bands else None,
            )
            for m, bound in slo_ms.items()
        ],
        binding=binding,
        meets=attained >= attainment,
        within_noise=bool(reasons),
        noise=noise,
    )


def quantile_label(attainment: float) -> str:
    """'p90' for 0.9, 'p99.9' for 0.999, 'max' for 1."""
    if attainment >= 1:
        return "max"
    return f"p{round(attainment * 100, 6):g}"


_STEADY = "outside noise: its bands stay on one side of the SLO"


def _reversible(
    share_band: tuple[float, float] | None,
    attainment: float,
    binding: str,
    metric_band: tuple[float, float],
    bound: float,
) -> list[str]:
    """Why a repeat could reverse the verdict: each band that reaches both sides."""
    reasons = []
    if share_band is not None and share_band[0] < attainment <= share_band[1]:
        lo, hi = share_band
        reasons.append(f"the share's band {lo:.1%}–{hi:.1%} holds {attainment:.1%}")
    lo, hi = metric_band
    if lo <= bound < hi:
        reasons.append(
            f"the {binding} band {duration_text(lo)}–{duration_text(hi)} holds its SLO "
            f"{duration_text(bound)}"
        )
    return reasons


def _bands(
    parts: Sequence[SloSample],
    values: dict[str, np.ndarray],
    good: np.ndarray,
    attainment: float,
    seed: int,
) -> dict[str, tuple[float, float]]:
    """Bands of the share ('share') and of each metric's quantile, by block resampling."""
    rng = np.random.default_rng(seed)
    starts = np.cumsum([0] + [p.size for p in parts[:-1]])
    shares = np.empty(BOOTSTRAP_RESAMPLES)
    quantiles = {m: np.empty(BOOTSTRAP_RESAMPLES) for m in values}
    for i in range(BOOTSTRAP_RESAMPLES):
        idx = np.concatenate(
            [s + block_resample(p.size, p.block, rng) for s, p in zip(starts, parts, strict=True)]
        )
        shares[i] = good[idx].mean()
        for m, v in values.items():
            quantiles[m][i] = _quantile(v[idx], attainment)
    half = len(good) // 2
    drift = relative_drift(float(good[:half].mean()), float(good[half:].mean()))
    lo, hi = _percentiles(shares)
    bands = {"share": (max(0.0, lo * (1 - drift)), min(1.0, hi * (1 + drift)))}
    bands.update({m: _percentiles(q) for m, q in quantiles.items()})
    return bands


def _percentiles(values: np.ndarray) -> tuple[float, float]:
    """The band's ends, each an observed resample (never interpolated toward infinity)."""
    lo = np.percentile(values, _TAIL_PCT, method="lower")
    hi = np.percentile(values, 100 - _TAIL_PCT, method="higher")
    return float(lo), float(hi)


def _quantile(values: np.ndarray, share: float) -> float:
    """The smallest value that at least `share` of `values` stay at or under."""
    if not len(values):
        return math.inf
    return float(np.quantile(values, share, method="inverted_cdf"))


def _or_inf(value: float | None) -> float:
    return math.inf if value is None else value


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def duration_text(ms: float) -> str:
    """'1.8 s', '45 ms', '∞': three significant figures."""
    if not math.isfinite(ms):
        return "∞"
    return f"{ms / 1000:.3g} s" if ms >= 1000 else f"{ms:.3g} ms"
