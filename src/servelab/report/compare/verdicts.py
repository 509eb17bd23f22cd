"""Run B against run A, metric by metric at every load both ran: the change, its noise
band, and a verdict a person can repeat ("+56% total tok/s at concurrency 64, outside
noise").

A change is *outside noise* when its bootstrap band (bench.noise) leaves 1 out and it
is at least MIN_EFFECT. The band is drawn within each run and cannot see the machine
wander between runs: on a 2-core machine six identical demo-sized runs read 22 of their
135 banded changes "outside noise", up to 21% (benchmarks/README.md), so a verdict
between single runs is a within-run verdict, and a repeat is what measures the rest.
Where a run has only level summaries (an import of a peer's file), the change is shown
and no band is drawn, and the verdict says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from servelab.bench.noise import (
    Band,
    LevelSample,
    level_sample,
    no_band_reason,
    rate_statistic,
    ratio_band,
)
from servelab.bench.results import LevelSummary
from servelab.report.inputs import ReportRun
from servelab.report.sections._common import load_text

__all__ = [
    "METRICS",
    "MIN_EFFECT",
    "CompareMetric",
    "MetricDelta",
    "compare_all",
    "compare_runs",
]

MIN_EFFECT = 0.05

Verdict = Literal["better", "worse", "within noise", "no band"]


def _tpot_ms(s: LevelSample, idx: np.ndarray) -> np.ndarray:
    out = s.output_tokens[idx]
    keep = out > 1
    return ((s.e2e_ms[idx] - s.ttft_ms[idx])[keep]) / (out[keep] - 1)


def _single(s: LevelSample, idx: np.ndarray) -> float:
    return float(np.mean(s.output_tokens[idx] / (s.e2e_ms[idx] / 1000)))


def _percentile(what: str, q: float) -> Callable[[LevelSample, np.ndarray], float]:
    def statistic(s: LevelSample, idx: np.ndarray) -> float:
        values = s.ttft_ms[idx] if what == "ttft" else _tpot_ms(s, idx)
        return float(np.percentile(values, q)) if len(values) else float("nan")

    return statistic


@dataclass(frozen=True)
class CompareMetric:
    name: str
    unit: str
    higher_is_better: bool
    read: Callable[[LevelSummary], float | None]
    statistic: Callable[[LevelSample, np.ndarray], float]
    single_only: bool = False
    min_requests: int = 2
    """Below this many requests per run no band is drawn: a p99 of fewer than 100 requests
    is their largest value, and resampling a maximum says nothing about its noise."""


METRICS = (
    CompareMetric(
        "total tok/s",
        "tok/s",
        True,
        lambda s: s.total_throughput,
        rate_statistic("total_throughput"),
    ),
    CompareMetric(
        "output tok/s",
        "tok/s",
        True,
        lambda s: s.output_throughput,
        rate_statistic("output_throughput"),
    ),
    CompareMetric(
        "single-stream tok/s",
        "tok/s",
        True,
        lambda s: s.single_stream_tok_s,
        _single,
        single_only=True,
    ),
    CompareMetric("TTFT p50", "ms", False, lambda s: s.median_ttft_ms, _percentile("ttft", 50)),
    CompareMetric(
        "TTFT p99", "ms", False, lambda s: s.p99_ttft_ms, _percentile("ttft", 99), min_requests=100
    ),
    CompareMetric("TPOT p50", "ms", False, lambda s: s.median_tpot_ms, _percentile("tpot", 50)),
    CompareMetric(
        "TPOT p99", "ms", False, lambda s: s.p99_tpot_ms, _percentile("tpot", 99), min_requests=100
    ),
)


@dataclass(frozen=True)
class MetricDelta:
    """One metric at one load, B against A."""

    metric: CompareMetric
    load: str
    a: float
    b: float
    band: Band | None
    verdict: Verdict
    why_no_band: str | None = None
    family: int = 1
    """The bands the whole comparison draws (every banded metric x load x pair of runs);
    this one covers 1 - 0.05 / family, so all of them together cover 95%."""

    @property
    def change(self) -> float:
        return self.b / self.a - 1 if self.a else float("nan")

    @property
    def text(self) -> str:
        head = f"{self.change:+.1%} {self.metric.name} at {self.load}"
        if self.band is None:
            return f"{head} (no noise band: {self.why_no_band})"
        band = f"band {self.band.lo - 1:+.1%} to {self.band.hi - 1:+.1%}"
        if self.verdict == "within noise":
            return f"{head}: within noise ({band})"
        return f"{head}: {self.verdict}, outside noise ({band})"


def compare_all(runs: Sequence[ReportRun], labels: Sequence[str]) -> dict[str, list[MetricDelta]]:
    """Every later run against runs[0] (labelled by `labels`, in order), its bands one family.

    The report reads every band of every pair at once, so they share one Bonferroni budget:
    with N bands drawn in all, each covers 1 - 0.05 / N, and the N together miss at most
    5% of the time. Per pair, a report of three runs would call a change "outside noise"
    about twice as often as it says.
    """
    base, base_label = runs[0], labels[0]
    pairs = {
        label: _pairs(base, run, (base_label, label))
        for label, run in zip(labels[1:], runs[1:], strict=True)
    }
    family = sum(pair.banded for changes in pairs.values() for pair in changes)
    return {
        label: [pair.delta(family=family) for pair in changes] for label, changes in pairs.items()
    }


def compare_runs(
    a: ReportRun, b: ReportRun, *, labels: tuple[str, str] = ("A", "B")
) -> list[MetricDelta]:
    """Every metric at every load both runs measured, in load order: a report of two runs."""
    return compare_all([a, b], labels)[labels[1]]


def _pairs(a: ReportRun, b: ReportRun, labels: tuple[str, str]) -> list[_Pair]:
    """Every metric at every load both runs measured, before the bands are drawn."""
    by_load = {_load_key(s): s for s in a.summary.levels if s.completed != 0}
    pairs: list[_Pair] = []
    for level_b in sorted(
        (s for s in b.summary.levels if s.completed != 0 and _load_key(s) in by_load),
        key=_load_key,
    ):
        level_a = by_load[_load_key(level_b)]
        sample_a, sample_b = level_sample(level_a, a.records), level_sample(level_b, b.records)
        why = _why_no_band(labels, sample_a, sample_b)
        for metric in METRICS:
            if metric.single_only and level_a.max_concurrency != 1:
                continue
            va, vb = metric.read(level_a), metric.read(level_b)
            if va is not None and vb is not None and va > 0:
                pairs.append(_Pair(level_b, sample_a, sample_b, why, metric, va, vb))
    return pairs


@dataclass(frozen=True)
class _Pair:
    """One metric at one load of both runs, before its band is drawn."""

    level: LevelSummary
    a: LevelSample | None
    b: LevelSample | None
    why: str
    metric: CompareMetric
    va: float
    vb: float

    @property
    def fewest(self) -> int | None:
        return None if self.a is None or self.b is None else min(self.a.size, self.b.size)

    @property
    def banded(self) -> bool:
        """A band will be drawn: both runs have records, enough of them for the metric, in
        enough blocks (a band that cannot be drawn does not widen the others)."""
        if self.a is None or self.b is None or self.fewest is None:
            return False
        return self.fewest >= self.metric.min_requests and no_band_reason(self.a, self.b) is None

    def delta(self, *, family: int) -> MetricDelta:
        """The change and its verdict, the band one of a family of `family`."""
        band, why = None, self.why
        if self.a is not None and self.b is not None and self.fewest is not None:
            blocks = no_band_reason(self.a, self.b)
            if self.fewest < self.metric.min_requests:
                why = f"{self.fewest} requests, under the {self.metric.min_requests} it needs"
            elif blocks is not None:
                why = blocks
            else:
                drawn = ratio_band(self.a, self.b, self.metric.statistic, comparisons=family)
                if np.isfinite(drawn.lo):
                    band = drawn
                else:
                    why = drawn.why_none or "too few requests with that statistic"
        return MetricDelta(
            metric=self.metric,
            load=load_text(self.level),
            a=self.va,
            b=self.vb,
            band=band,
            verdict=_verdict(self.metric, self.vb / self.va, band),
            why_no_band=why if band is None else None,
            family=family,
        )


def _verdict(metric: CompareMetric, ratio: float, band: Band | None) -> Verdict:
    if band is None:
        return "no band"
    if not band.excludes_one() or abs(ratio - 1) < MIN_EFFECT:
        return "within noise"
    return "better" if (ratio > 1) == metric.higher_is_better else "worse"


def _why_no_band(
    labels: tuple[str, str], sample_a: LevelSample | None, sample_b: LevelSample | None
) -> str:
    missing = [label for label, s in zip(labels, (sample_a, sample_b), strict=True) if s is None]
    if not missing:
        return ""
    return (
        f"{' and '.join(missing)} {'has' if len(missing) == 1 else 'have'} no per-request records"
    )


def _load_key(level: LevelSummary) -> tuple[int, float]:
    if level.max_concurrency is not None:
        return (0, float(level.max_concurrency))
    return (1, float(level.request_rate or 0))
