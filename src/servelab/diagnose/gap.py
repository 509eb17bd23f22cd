"""The engine's time beyond the model's, split into a per-step and a per-request part.

At a level with decode batch b the excess is e(b) = TPOT_measured - TPOT_model. Through
this level and its nearest neighbour of another batch, e(b) = a + k b: `a` is paid once
per step whatever the batch (kernel launches, the scheduler, sampling set-up, host
synchronisation), `k b` grows with the requests in the step (per-request Python, attention
kernels slower than the model's bytes say). Two points, not a fit over the whole sweep:
the excess bends at large batches, and the split is asked about one operating point.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.diagnose.facts import LevelFacts, RunFacts

__all__ = ["MIN_BATCH_STEP", "Split", "split_excess"]

MIN_BATCH_STEP = 1.0
"""Neighbours whose batches differ by less than one request cannot separate the parts."""


@dataclass(frozen=True)
class Split:
    """The excess of one level and its two parts (None when no neighbour separates them)."""

    level: LevelFacts
    excess_ms: float
    per_step_ms: float | None
    per_request_ms: float | None
    neighbour: LevelFacts | None


def split_excess(facts: RunFacts, lv: LevelFacts) -> Split | None:
    """The split at `lv`; None without the model or a measured TPOT."""
    excess = _excess(lv)
    if excess is None:
        return None
    neighbour = _neighbour(facts, lv)
    other = _excess(neighbour) if neighbour is not None else None
    if neighbour is None or other is None or excess <= 0:
        return Split(lv, excess, None, None, None)
    slope = (other - excess) / (neighbour.batch - lv.batch)
    per_step = min(max(excess - slope * lv.batch, 0.0), excess)
    return Split(lv, excess, per_step, excess - per_step, neighbour)


def _excess(lv: LevelFacts) -> float | None:
    if lv.model is None or lv.tpot_ms is None:
        return None
    return lv.tpot_ms - lv.model.tpot_ms


def _neighbour(facts: RunFacts, lv: LevelFacts) -> LevelFacts | None:
    """The nearest level below (else above) whose batch differs enough."""
    others = [o for o in facts.closed if abs(o.batch - lv.batch) >= MIN_BATCH_STEP]
    below = [o for o in others if o.batch < lv.batch]
    if below:
        return max(below, key=lambda o: o.batch)
    above = [o for o in others if o.batch > lv.batch]
    return min(above, key=lambda o: o.batch) if above else None
