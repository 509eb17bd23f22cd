"""Capacity under an SLO: the highest load at which the SLO still holds, found by running
real levels.

The search starts at `start` and doubles the load while each level meets the SLO
(bench.attainment), the last doubling clipped to `max_load`. Once a load fails it bisects
between the highest load that met the SLO below it and the lowest that failed, until the
two lie within `tolerance` of the failing load (1 apart at least, for a concurrency). When
no load has met the SLO it bisects down from the failing one toward nothing, to `min_load`.

The two loads that end the search, its *boundary*, are then checked: where either one's
verdict is within noise (a repeat could reverse it) that load is measured again, up to
`remeasures` times, and judged on all its measurements pooled. A reversed verdict moves
the boundary and the search goes on from there. Every level counts against `max_steps`,
re-measures too; a search that runs out of them answers with the boundary it has.

`give_up_below` ends a search early (a tuning trial far behind the best): once a load at or
under it fails, the capacity is known to lie below it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from servelab.bench.attainment import SloSample, duration_text, judge, request_block, slo_sample
from servelab.bench.capacity_results import (
    CapacityLevel,
    CapacityResult,
    CapacityStatus,
    CapacityStep,
)
from servelab.bench.capacity_text import capacity_sentence, load_text
from servelab.bench.load import LoadMode
from servelab.bench.records import RequestRecord
from servelab.bench.results import LevelSummary, SweepStop
from servelab.core.errors import ConfigError

__all__ = [
    "DEFAULT_ATTAINMENT",
    "DEFAULT_MAX_RATE",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_REMEASURES",
    "DEFAULT_TOLERANCE",
    "CapacityPlan",
    "CapacitySearch",
]

DEFAULT_ATTAINMENT = 0.9
"""The share of requests that must meet every SLO: goodput's, and the sweep's SLO stop."""
DEFAULT_TOLERANCE = 0.05
"""The search ends when the boundary's two loads are within 5% of the failing one."""
DEFAULT_MAX_STEPS = 20
"""Levels in all: doubling from 1 to 1024 is 11, bisecting to 5% about 5, re-measures 4."""
DEFAULT_REMEASURES = 1
"""Extra measurements of a boundary load whose verdict is within noise."""
DEFAULT_MAX_RATE = 1024.0
"""The open-loop search's largest request rate when none is given, in requests/s."""
RATE_FLOOR_HALVINGS = 6
"""An open-loop search whose start rate fails halves it at most this often (to 1/64)."""


@dataclass(frozen=True, kw_only=True)
class CapacityPlan:
    """What the search looks for and how far it may go; loads are a concurrency or a rate."""

    slo_ms: dict[str, float]
    attainment: float = DEFAULT_ATTAINMENT
    mode: LoadMode = LoadMode.CONCURRENCY
    start: float = 1.0
    max_load: float
    max_source: str = "the given maximum"
    """What set max_load, for the explanation."""
    max_steps: int = DEFAULT_MAX_STEPS
    tolerance: float = DEFAULT_TOLERANCE
    remeasures: int = DEFAULT_REMEASURES
    give_up_below: float | None = None

    def __post_init__(self) -> None:
        if not self.slo_ms:
            raise ConfigError("a capacity search needs an SLO, e.g. ttft=2s,tpot=50ms")
        if not 0 < self.attainment <= 1:
            raise ConfigError(f"attainment must be above 0 and at most 1, got {self.attainment:g}")
        if not 0 < self.start <= self.max_load:
            raise ConfigError(
                f"the capacity search's start ({self.start:g}) must be positive and at most "
                f"its largest load ({self.max_load:g})"
            )
        if self.mode is LoadMode.CONCURRENCY and not (
            self.start == int(self.start) and self.max_load == int(self.max_load)
        ):
            raise ConfigError("the capacity search's concurrencies are whole numbers")
        if self.max_steps < 1:
            raise ConfigError("the capacity search needs at least one level (max steps)")
        if not 0 <= self.tolerance < 1 or self.remeasures < 0:
            raise ConfigError("the tolerance is in [0, 1) and re-measures at least 0")

    @property
    def min_load(self) -> float:
        """The lowest load the search tries: concurrency 1, or the start rate halved
        RATE_FLOOR_HALVINGS times."""
        if self.mode is LoadMode.CONCURRENCY:
            return 1.0
        return self.start / 2**RATE_FLOOR_HALVINGS

    def describe(self) -> str:
        """'capacity search: 90.0% of requests within TTFT ≤ 2 s; from 1 concurrent, ...'."""
        slo = " and ".join(f"{k.upper()} ≤ {duration_text(v)}" for k, v in self.slo_ms.items())
        return (
            f"capacity search: {self.attainment:.1%} of requests within {slo}; from "
            f"{load_text(self.mode, self.start)}, x2 until a level fails, then bisection to "
            f"{self.tolerance:.0%}; at most {load_text(self.mode, self.max_load)} "
            f"({self.max_source}), {self.max_steps} levels"
        )


@dataclass
class CapacitySearch:
    """The search's state: ask `next_load`, run that level, give it to `measured`."""

    plan: CapacityPlan
    levels: list[CapacityLevel] = field(default_factory=list, init=False)
    _samples: dict[float, list[SloSample]] = field(default_factory=dict, init=False)
    _verdicts: dict[float, CapacityLevel] = field(default_factory=dict, init=False)
    _pending: CapacityStep = field(default="start", init=False)
    _end: CapacityStatus | None = field(default=None, init=False)

    def next_load(self) -> tuple[float, str] | SweepStop:
        """The next load and why, or the SweepStop that ends the search."""
        if not self.levels:
            return self._choose("start", self.plan.start, "the first level")
        held, failed = self._boundary()
        give_up = self.plan.give_up_below
        if give_up is not None and failed is not None and failed.load <= give_up:
            return self._stop("behind")
        choice = self._after(held, failed)
        if choice is None:
            return self._stop("none" if held is None else "at_max" if failed is None else "found")
        if len(self.levels) >= self.plan.max_steps:
            return self._stop("steps")
        return self._choose(*choice)

    def measured(self, level: LevelSummary, records: Sequence[RequestRecord]) -> CapacityLevel:
        """Judge the level just run from its requests (see `observe`)."""
        sample = slo_sample(records, self.plan.slo_ms, request_block(level))
        return self.observe(level, sample)

    def observe(self, level: LevelSummary, sample: SloSample) -> CapacityLevel:
        """Judge the level's load on every measurement of it so far, this one included."""
        load = self._load_of(level)
        parts = self._samples.setdefault(load, [])
        parts.append(sample)
        judged = judge(parts, self.plan.slo_ms, self.plan.attainment)
        entry = CapacityLevel(
            level=level.level,
            load=load,
            step=self._pending,
            measurements=len(parts),
            judged=judged,
        )
        self.levels.append(entry)
        self._verdicts[load] = entry
        return entry

    def result(self) -> CapacityResult:
        """The answer so far: `searching` until the search has ended."""
        held, failed = self._boundary()
        status: CapacityStatus = self._end or "searching"
        result = CapacityResult(
            mode=self.plan.mode.value,
            slo_ms=self.plan.slo_ms,
            attainment=self.plan.attainment,
            status=status,
            capacity=held.load if held is not None else None,
            held=held,
            failed=failed,
            within_noise=any(lv.judged.within_noise for lv in (held, failed) if lv is not None),
            levels=list(self.levels),
            plan=self.plan.describe(),
            explanation="",
        )
        return result.model_copy(update={"explanation": capacity_sentence(result)})

    def level_text(self, entry: CapacityLevel) -> str:
        """One line on a judged level, for progress displays."""
        j = entry.judged
        verdict = "meets" if j.meets else "fails"
        pooled = f", {entry.measurements} measurements pooled" if entry.measurements > 1 else ""
        return (
            f"capacity: {self._text(entry.load)} {verdict} the SLO: {j.attained:.1%} of "
            f"{j.requests} requests met every SLO (needed {self.plan.attainment:.1%}"
            f"{pooled}); {j.noise}"
        )

    def _after(
        self, held: CapacityLevel | None, failed: CapacityLevel | None
    ) -> tuple[CapacityStep, float, str] | None:
        """The level the boundary calls for next; None when the search has its answer."""
        plan = self.plan
        if failed is None:
            assert held is not None  # a level ran, and it met the SLO
            if held.load < plan.max_load:
                load = self._round(min(held.load * 2, plan.max_load))
                step: CapacityStep = "double" if load < plan.max_load else "max"
                return step, load, f"{self._text(held.load)} met the SLO"
        else:
            low = held.load if held is not None else 0.0
            if not self._converged(low, failed.load):
                middle = self._middle(low, failed.load)
                if held is not None or middle >= self._round(plan.min_load):
                    between = f"between {low:g} and {self._text(failed.load)}"
                    return "bisect", middle, f"bisecting {between}"
        for level in (held, failed):
            if level is None or not level.judged.within_noise:
                continue
            if level.measurements <= plan.remeasures:
                return "remeasure", level.load, f"{self._text(level.load)} is {level.judged.noise}"
        return None

    def _choose(self, step: CapacityStep, load: float, why: str) -> tuple[float, str]:
        self._pending = step
        return load, f"capacity: next {self._text(load)} ({step}: {why})"

    def _stop(self, status: CapacityStatus) -> SweepStop:
        self._end = status
        last = self.levels[-1].level if self.levels else None
        explanation = self.result().explanation
        if status == "behind":
            return SweepStop(reason="behind", level=last, explanation=explanation)
        return SweepStop(reason="capacity", level=last, explanation=explanation)

    def _boundary(self) -> tuple[CapacityLevel | None, CapacityLevel | None]:
        """(the highest load that meets below the lowest that fails, that failing load)."""
        verdicts = self._verdicts.values()
        failed = min((v for v in verdicts if not v.judged.meets), key=_load, default=None)
        below = [v for v in verdicts if v.judged.meets and (failed is None or v.load < failed.load)]
        return max(below, key=_load, default=None), failed

    def _converged(self, low: float, high: float) -> bool:
        step = 1.0 if self.plan.mode is LoadMode.CONCURRENCY else 0.0
        return high - low <= max(step, self.plan.tolerance * high)

    def _middle(self, low: float, high: float) -> float:
        if self.plan.mode is LoadMode.CONCURRENCY:
            return float((int(low) + int(high)) // 2)
        middle = (low + high) / 2
        rounded = self._round(middle)
        return rounded if low < rounded < high else middle

    def _round(self, load: float) -> float:
        """A rate to three significant figures; a concurrency as it is."""
        if self.plan.mode is LoadMode.CONCURRENCY or load <= 0:
            return load
        return round(load, 2 - math.floor(math.log10(load)))

    def _load_of(self, level: LevelSummary) -> float:
        if self.plan.mode is LoadMode.CONCURRENCY:
            return float(level.max_concurrency or 0)
        return float(level.request_rate or 0.0)

    def _text(self, load: float) -> str:
        return load_text(self.plan.mode, load)


def _load(level: CapacityLevel) -> float:
    return level.load
