"""What each token costs, as the CLI and the report say it: the price, the cost at the knee,
at the capacity under the SLO and at the cheapest level that meets the goal, the GPU
energy per token, and a table of every level. Pure formatters over bench.cost's fields.

A run without a price says so ("no price given"), and one without sampled GPU power says
that, never a blank.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from servelab.bench.capacity import DEFAULT_ATTAINMENT
from servelab.bench.cost import NO_PRICE, meets_slo
from servelab.bench.cost_results import Price
from servelab.bench.knee import find_knee
from servelab.bench.results import BenchSummary, LevelSummary

__all__ = [
    "COST_COLUMNS",
    "CostPoint",
    "cost_lines",
    "cost_points",
    "cost_rows",
    "price_text",
    "slo_rule",
    "usd_text",
]

COST_COLUMNS = (
    "$/M total tok",
    "$/M output tok",
    "J/output tok",
    "J/total tok",
    "total tok/s per MW",
)


@dataclass(frozen=True, slots=True)
class CostPoint:
    """A level the cost is said at, and why that one."""

    what: str
    """'the knee', 'the capacity under the SLO', 'the cheapest level meeting the SLOs'."""
    level: LevelSummary


def price_text(price: Price | None) -> str:
    """'$20.00 an hour (8 GPUs x $2.50 per GPU-hour; GPUs: ...; given by ...)'."""
    if price is None:
        return NO_PRICE
    if price.basis == "gpu_hour":
        per = f"{price.gpus} GPU{'s' if price.gpus != 1 else ''} x ${price.usd_per_gpu_hour:,.2f}"
        why = f"{per} per GPU-hour; GPUs: {price.gpus_source}"
    else:
        why = "the whole machine"
    return f"${price.usd_per_hour:,.2f} an hour ({why}; {price.price_source})"


def slo_rule(summary: BenchSummary) -> Callable[[LevelSummary], bool] | None:
    """Whether a level meets its SLOs (the capacity search's attainment, else the default
    share); None for a run without SLOs."""
    if not any(level.slo_ms for level in summary.levels):
        return None
    share = summary.capacity.attainment if summary.capacity is not None else DEFAULT_ATTAINMENT
    return lambda level: meets_slo(level, share)


def cost_points(
    summary: BenchSummary,
    *,
    meets: Callable[[LevelSummary], bool] | None = None,
    goal: str = "the SLOs",
) -> list[CostPoint]:
    """The knee (else the level of most total throughput), the capacity's level, and the
    cheapest level that `meets` the goal (the same level may be more than one of them)."""
    levels = [s for s in summary.levels if s.completed != 0]
    points: list[CostPoint] = []
    knee = find_knee(levels)
    at_knee = next(
        (s for s in levels if knee.found and s.max_concurrency == knee.concurrency), None
    )
    if at_knee is not None:
        points.append(CostPoint("the knee", at_knee))
    elif levels:
        best = max(levels, key=lambda s: s.total_throughput or 0.0)
        points.append(CostPoint("the most total throughput", best))
    held = summary.capacity.held if summary.capacity is not None else None
    if held is not None and held.level < len(summary.levels):
        points.append(CostPoint("the capacity under the SLO", summary.levels[held.level]))
    if meets is not None:
        meeting = [s for s in levels if meets(s) and _usd(s) is not None]
        cheapest = min(meeting, key=lambda s: _usd(s) or 0.0, default=None)
        if cheapest is not None:
            points.append(CostPoint(f"the cheapest level meeting {goal}", cheapest))
    return points


def cost_lines(
    summary: BenchSummary,
    *,
    meets: Callable[[LevelSummary], bool] | None = None,
    goal: str = "the SLOs",
) -> list[str]:
    """The price, then the cost at each point of `cost_points`, then the energy at the first."""
    lines = [f"price: {price_text(summary.price)}"]
    points = cost_points(summary, meets=meets, goal=goal)
    if summary.price is not None:
        for point in points:
            lines.append(f"cost at {point.what} ({_load(point.level)}): {_usd_pair(point.level)}")
        if meets is not None and not any(p.what.startswith("the cheapest") for p in points):
            lines.append(f"cost: no level meets {goal}")
    if points:
        lines.append(_energy_line(points[0]))
    return lines


def cost_rows(levels: Sequence[LevelSummary]) -> list[list[str]]:
    """One row per level under COST_COLUMNS (after a load column): '-' where a level has no
    such number (no price, no sampled power, an old run)."""
    rows = []
    for s in levels:
        c = s.cost
        rows.append(
            [
                _load(s),
                usd_text(c.usd_per_m_total_tokens if c else None),
                usd_text(c.usd_per_m_output_tokens if c else None),
                _num(c.j_per_output_token if c else None, "{:,.4g}"),
                _num(c.j_per_total_token if c else None, "{:,.4g}"),
                _num(c.total_tokens_per_s_per_mw if c else None, "{:,.0f}"),
            ]
        )
    return rows


def usd_text(value: float | None) -> str:
    """Dollars with the digits that matter: $1,234, $12.35, $0.0123; '-' for none."""
    if value is None:
        return "-"
    if value >= 100:
        return f"${value:,.0f}"
    if value >= 1:
        return f"${value:,.2f}"
    return f"${value:.3g}"


def _usd(level: LevelSummary) -> float | None:
    return level.cost.usd_per_m_total_tokens if level.cost is not None else None


def _usd_pair(level: LevelSummary) -> str:
    cost = level.cost
    if cost is None or cost.usd_per_m_total_tokens is None:
        reason = cost.unavailable.get("price") if cost is not None else None
        return f"not priced: {reason or 'the level has no cost fields'}"
    return (
        f"{usd_text(cost.usd_per_m_total_tokens)} per million total tokens, "
        f"{usd_text(cost.usd_per_m_output_tokens)} per million output tokens"
    )


def _energy_line(point: CostPoint) -> str:
    cost = point.level.cost
    where = f"at {point.what} ({_load(point.level)})"
    if cost is None:
        return f"energy {where}: not recorded in this run's summary"
    if cost.j_per_output_token is None:
        return f"energy {where}: not measured: {cost.unavailable.get('energy', 'no energy')}"
    parts = [f"{cost.j_per_output_token:,.4g} J per output token"]
    if cost.j_per_total_token is not None:
        parts.append(f"{cost.j_per_total_token:,.4g} J per total token")
    if cost.total_tokens_per_s_per_mw is not None:
        parts.append(f"{cost.total_tokens_per_s_per_mw:,.0f} total tok/s per MW")
    return f"energy {where}, GPU power only: " + ", ".join(parts)


def _load(level: LevelSummary) -> str:
    if level.max_concurrency is not None:
        return f"concurrency {level.max_concurrency}"
    return f"{level.request_rate:g} req/s" if level.request_rate is not None else "-"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)
