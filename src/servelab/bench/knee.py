"""The knee of a concurrency sweep: where adding load stops adding throughput.

Between two levels c1 < c2 with total throughputs T1, T2, the growth per doubling of
concurrency is g = (T2 / T1) ** (1 / log2(c2 / c1)). The knee is the lowest level after
which the next level adds less than 10% per doubling (g < 1.10): past it, more
concurrency mostly buys queueing (higher latency) rather than throughput.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from pydantic import BaseModel, Field

from servelab.bench.results import LevelSummary

__all__ = ["KNEE_GROWTH_PER_DOUBLING", "Knee", "find_knee"]

KNEE_GROWTH_PER_DOUBLING = 1.10


class Knee(BaseModel):
    """Where the sweep's throughput curve flattens, or that it has not yet."""

    found: bool = Field(description="False when throughput still grows at the last level.")
    concurrency: int | None = Field(description="Concurrency of the knee level.")
    total_throughput: float | None = Field(description="Total tokens/s at the knee.")
    growth_per_doubling: list[float | None] = Field(
        description="g between each level and the next, in sweep order (None if undefined)."
    )
    explanation: str


def find_knee(levels: Sequence[LevelSummary]) -> Knee:
    """Apply the knee rule to the closed-loop levels of a sweep."""
    points = sorted(
        (s.max_concurrency, s.total_throughput)
        for s in levels
        if s.max_concurrency is not None and s.completed > 0
    )
    growth = [_growth(a, b) for a, b in itertools.pairwise(points)]
    for (c, t), g in zip(points, growth, strict=False):
        if g is not None and g < KNEE_GROWTH_PER_DOUBLING:
            return Knee(
                found=True,
                concurrency=c,
                total_throughput=t,
                growth_per_doubling=growth,
                explanation=(
                    f"the knee is at concurrency {c} ({t:,.0f} tok/s total): the next level "
                    f"adds {100 * (g - 1):+.1f}% per doubling of concurrency, under the "
                    f"{100 * (KNEE_GROWTH_PER_DOUBLING - 1):.0f}% threshold"
                ),
            )
    if len(points) < 2:
        reason = "a knee needs at least two concurrency levels with completed requests"
    else:
        reason = (
            f"no knee up to concurrency {points[-1][0]}: throughput still grows by at "
            f"least {100 * (KNEE_GROWTH_PER_DOUBLING - 1):.0f}% per doubling"
        )
    return Knee(
        found=False,
        concurrency=None,
        total_throughput=None,
        growth_per_doubling=growth,
        explanation=reason,
    )


def _growth(a: tuple[int, float], b: tuple[int, float]) -> float | None:
    (c1, t1), (c2, t2) = a, b
    if c2 <= c1 or t1 <= 0:
        return None
    return (t2 / t1) ** (1 / math.log2(c2 / c1))
