"""The knee of a concurrency sweep: where adding load stops adding throughput.

Between two levels c1 < c2 with total throughputs T1, T2, the growth per doubling of
concurrency is g = (T2 / T1) ** (1 / log2(c2 / c1)). The knee is the lowest level that no
later level beats by 10% or more per doubling (g < 1.10 from the knee to every later
level): past it, more concurrency mostly buys queueing (higher latency), not throughput.

Judging the knee against every later level, not only the next one, is what makes it hold
under noise: one level measured a few percent low no longer makes a knee when a later
level grows again, and one measured high at the end no longer hides a plateau seen over
two doublings. `levels_past` says how many later levels back the knee; the adaptive sweep
stops once two do.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from pydantic import BaseModel, Field

from servelab.bench.results import LevelSummary

__all__ = ["KNEE_GROWTH_PER_DOUBLING", "Knee", "find_knee", "growth_per_doubling"]

KNEE_GROWTH_PER_DOUBLING = 1.10


class Knee(BaseModel):
    """Where the sweep's throughput curve flattens, or that it has not yet."""

    found: bool = Field(description="False when throughput still grows at the last level.")
    concurrency: int | None = Field(description="Concurrency of the knee level.")
    total_throughput: float | None = Field(description="Total tokens/s at the knee.")
    growth_per_doubling: list[float | None] = Field(
        description="g between each level and the next, in sweep order (None if undefined)."
    )
    levels_past: int = Field(
        default=0, description="Later levels that stay under the knee's growth line."
    )
    explanation: str


def find_knee(levels: Sequence[LevelSummary]) -> Knee:
    """Apply the knee rule to the closed-loop levels of a sweep."""
    points = sorted(
        (s.max_concurrency, s.total_throughput)
        for s in levels
        if s.max_concurrency is not None and s.total_throughput is not None and s.completed != 0
    )
    growth = [growth_per_doubling(a, b) for a, b in itertools.pairwise(points)]
    threshold = f"{100 * (KNEE_GROWTH_PER_DOUBLING - 1):.0f}%"
    for i, (c, t) in enumerate(points[:-1]):
        later = [growth_per_doubling((c, t), p) for p in points[i + 1 :]]
        if all(g is not None and g < KNEE_GROWTH_PER_DOUBLING for g in later):
            steps = ", ".join(
                f"{p[0]}: {100 * (g - 1):+.1f}%"
                for p, g in zip(points[i + 1 :], later, strict=True)
                if g is not None
            )
            return Knee(
                found=True,
                concurrency=c,
                total_throughput=t,
                growth_per_doubling=growth,
                levels_past=len(later),
                explanation=(
                    f"the knee is at concurrency {c} ({t:,.0f} tok/s total): no later level "
                    f"adds {threshold} per doubling of concurrency over it ({steps})"
                ),
            )
    if len(points) < 2:
        reason = "a knee needs at least two concurrency levels with completed requests"
    else:
        reason = (
            f"no knee up to concurrency {points[-1][0]}: every level is beaten by {threshold} "
            "or more per doubling at a later one"
        )
    return Knee(
        found=False,
        concurrency=None,
        total_throughput=None,
        growth_per_doubling=growth,
        explanation=reason,
    )


def growth_per_doubling(a: tuple[int, float], b: tuple[int, float]) -> float | None:
    """g from point a to point b, each (concurrency, total tok/s); None where undefined."""
    (c1, t1), (c2, t2) = a, b
    if c2 <= c1 or t1 <= 0:
        return None
    return (t2 / t1) ** (1 / math.log2(c2 / c1))
