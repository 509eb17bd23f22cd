"""A capacity search in words: its answer in one sentence, a load as text. Pure."""

from __future__ import annotations

import math

from servelab.bench.attainment import duration_text, quantile_label
from servelab.bench.capacity_results import CapacityResult, LevelJudgement, SloQuantile
from servelab.bench.load import LoadMode

__all__ = ["capacity_sentence", "load_text"]


def load_text(mode: LoadMode | str, load: float) -> str:
    """'48 concurrent' or '12.5 req/s'."""
    if LoadMode(mode) is LoadMode.CONCURRENCY:
        return f"{load:g} concurrent"
    return f"{load:g} req/s"


def capacity_sentence(result: CapacityResult) -> str:
    """The answer in one sentence: 'capacity: 48 concurrent at TTFT p99 1.8 s ≤ 2 s; 56
    fails (TTFT p99 2.4 s, 97.0% met every SLO)'."""
    held, failed = result.held, result.failed
    if held is None and failed is None:
        return "capacity: no level measured yet"
    label = quantile_label(result.attainment)
    if held is not None:
        at_least = "at least " if result.status == "at_max" else ""
        head = (
            f"capacity: {at_least}{load_text(result.mode, held.load)} at "
            f"{_metric_text(held.judged, label)}"
        )
    else:
        slo = " and ".join(f"{k.upper()} ≤ {duration_text(v)}" for k, v in result.slo_ms.items())
        head = f"capacity: no load tried kept {slo} for {result.attainment:.1%} of requests"
    parts = [head]
    if failed is not None:
        load = (
            f"{failed.load:g}"
            if result.mode == "concurrency"
            else load_text(result.mode, failed.load)
        )
        q = _binding(failed.judged)
        parts.append(
            f"{load} fails ({q.metric.upper()} {label} {_value(q.value_ms)}, "
            f"{failed.judged.attained:.1%} met every SLO)"
        )
    return "; ".join(parts) + _ENDINGS.get(result.status, "")


_ENDINGS: dict[str, str] = {
    "searching": " (search not finished)",
    "at_max": ", the largest load allowed",
    "steps": " (the level budget ran out before the boundary narrowed)",
    "behind": " (stopped early: behind the best trial)",
}


def _metric_text(judged: LevelJudgement, label: str) -> str:
    """'TTFT p99 1.8 s ≤ 2 s': the binding SLO metric at a level that meets the SLO."""
    q = _binding(judged)
    return f"{q.metric.upper()} {label} {_value(q.value_ms)} ≤ {duration_text(q.slo_ms)}"


def _binding(judged: LevelJudgement) -> SloQuantile:
    return next(q for q in judged.quantiles if q.metric == judged.binding)


def _value(ms: float | None) -> str:
    return duration_text(math.inf if ms is None else ms)
