"""`objective: capacity`: each trial's sweep is a capacity search (bench.capacity) under the
study's SLO, from its load's start level up to `load.max`.

Its early stop compares loads: a trial whose search has seen a load at or under
`early_stop` x the best feasible trial's capacity fail cannot reach that bar (its
capacity lies below the failing load), so the search ends there and the trial is pruned;
the load it had already shown to hold is in the stop's explanation.
"""

from __future__ import annotations

from servelab.bench.capacity import DEFAULT_MAX_RATE, CapacityPlan
from servelab.bench.load import LoadMode
from servelab.bench.sweep import DEFAULT_MAX_CONCURRENCY
from servelab.tune.space import SearchSpace
from servelab.tune.targets import CAPACITY

__all__ = ["capacity_plan", "give_up_below"]


def capacity_plan(space: SearchSpace, *, give_up: float | None = None) -> CapacityPlan | None:
    """The search every trial of a capacity study runs; None for other objectives."""
    if space.objectives[0].metric != CAPACITY or space.slo_ms is None:
        return None
    load = space.load
    default = DEFAULT_MAX_CONCURRENCY if load.mode is LoadMode.CONCURRENCY else DEFAULT_MAX_RATE
    top = load.max_load if load.max_load is not None else float(default)
    return CapacityPlan(
        slo_ms=space.slo_ms,
        attainment=space.attainment,
        mode=load.mode,
        start=load.levels[0],
        max_load=top,
        max_source="load.max" if load.max_load is not None else "servelab's default",
        give_up_below=give_up,
    )


def give_up_below(space: SearchSpace, best: float | None) -> float | None:
    """The load at or under which a failure ends a trial's search: early_stop x the best
    feasible trial's capacity; None with no best yet or early stop off."""
    if best is None or best <= 0 or space.early_stop <= 0:
        return None
    return space.early_stop * best
