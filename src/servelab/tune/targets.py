"""Objectives and constraints: a metric of the sweep, read at one of its load levels.

A metric is a number of a level's summary (`total_throughput`, `output_throughput`,
`request_goodput`, `single_stream_tok_s`, `mean_tpot_ms`, `p99_ttft_ms`, ... every numeric
field of summary.json's levels) or `error_rate`, failed requests over all attempted in
the whole sweep. `metric@128` reads it at concurrency 128 (or request rate 128); without
`@` an objective is read at the highest level, `single_stream_tok_s` at concurrency 1,
and a constraint where the first objective is read. Names ending in `_ms` and
`error_rate` are minimised, the rest maximised.

`capacity` is an objective of its own: each trial searches the highest load that meets the
study's SLO (bench.capacity) and is worth that load, 0 when none met it; a constraint is
then read at that load's level.

`cost` is USD per million total tokens at the trial's price (bench.cost), minimised: the
cheapest level whose requests meet the study's SLO (for `attainment` of them, as capacity
judges a level), or `cost@level` at one level. Without `@` a constraint is then read at that
cheapest level. Its direction is stated here, never inferred from its name.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from servelab.bench.capacity import DEFAULT_ATTAINMENT
from servelab.bench.cost import cheapest_level
from servelab.bench.load import LoadMode
from servelab.bench.results import BenchSummary, LevelSummary
from servelab.core.errors import ConfigError
from servelab.tune.results import ObjectiveSpec

if TYPE_CHECKING:
    from servelab.tune.load import LoadPlan

__all__ = [
    "CAPACITY",
    "COST",
    "ERROR_RATE",
    "Constraint",
    "level_at",
    "metric_names",
    "parse_constraint",
    "parse_objective",
    "read_metric",
]

CAPACITY = "capacity"
COST = "cost"
COST_UNIT = "$/M tokens"
ERROR_RATE = "error_rate"
SINGLE_STREAM = "single_stream_tok_s"
_NOT_METRICS = frozenset(
    {"level", "max_concurrency", "request_rate", "burstiness", "num_requests", "warmup_requests"}
)
_CONSTRAINT = re.compile(
    r"^\s*(?P<metric>[a-z0-9_]+)(@(?P<at>[0-9.]+))?\s*(?P<op><=|>=|<|>)\s*(?P<value>[-+0-9.eE]+)\s*$"
)


class Constraint(BaseModel):
    """`metric OP value` at one level; Optuna's convention: <= 0 is met."""

    model_config = ConfigDict(frozen=True)

    text: str
    metric: str
    at: float | None
    op: Literal["<=", ">=", "<", ">"]
    value: float

    def violation(self, measured: float | None) -> float:
        """How far the measurement is on the wrong side, relative to the bound (<= 0: met).
        Nothing measured violates it by 1 (100%)."""
        if measured is None or not math.isfinite(measured):
            return 1.0
        scale = abs(self.value) or 1.0
        if self.op in ("<=", "<"):
            return (measured - self.value) / scale
        return (self.value - measured) / scale


def metric_names() -> list[str]:
    """Every metric an objective or a constraint may name."""
    numeric = [
        name
        for name, field in LevelSummary.model_fields.items()
        if name not in _NOT_METRICS and _is_number(field.annotation)
    ]
    return [*numeric, ERROR_RATE, CAPACITY, COST]


def parse_objective(given: str | dict[str, Any], load: LoadPlan, *, source: str) -> ObjectiveSpec:
    """`metric`, `metric@level` or {metric, at, direction}."""
    where = f"{source}: objective"
    if isinstance(given, str):
        metric, _, at_text = given.strip().partition("@")
        at = _number(at_text, where) if at_text else None
        direction = None
    elif isinstance(given, dict):
        unknown = set(given) - {"metric", "at", "direction"}
        if unknown or "metric" not in given:
            raise ConfigError(f"{where}: a mapping takes metric, at and direction")
        metric, at, direction = str(given["metric"]), given.get("at"), given.get("direction")
        if at is not None:
            at = _number(str(at), where)
        if direction not in (None, "maximize", "minimize"):
            raise ConfigError(f"{where}: direction is maximize or minimize")
    else:
        raise ConfigError(f"{where}: give a metric name such as total_throughput@64")
    _check_metric(metric, where)
    if metric == ERROR_RATE:
        raise ConfigError(f"{where}: error_rate is a constraint, not an objective")
    if metric == CAPACITY:
        return _capacity_objective(at, direction, load, where)
    if metric == COST:
        return _cost_objective(at, direction, load, where)
    level = _resolve_level(metric, at, load, where, default=max(load.levels))
    return ObjectiveSpec(
        metric=metric,
        at=level,
        direction=direction or _direction(metric),
        unit=_unit(metric),
    )


def parse_constraint(text: str, load: LoadPlan, first: ObjectiveSpec, *, source: str) -> Constraint:
    """`p99_ttft_ms <= 2000`, `single_stream_tok_s >= 100`, `error_rate <= 0.01`."""
    where = f"{source}: constraint {text!r}"
    match = _CONSTRAINT.match(text)
    if match is None:
        raise ConfigError(f"{where}: write it as METRIC[@LEVEL] <= VALUE (or >=, <, >)")
    metric = match["metric"]
    _check_metric(metric, where)
    if metric == CAPACITY:
        raise ConfigError(f"{where}: capacity is an objective, not a constraint")
    value = _number(match["value"], where, positive=False)
    at: float | None = None
    if metric != ERROR_RATE:
        given = _number(match["at"], where) if match["at"] else None
        at = _resolve_level(metric, given, load, where, default=first.at)
    elif match["at"]:
        raise ConfigError(f"{where}: error_rate is over the whole sweep; drop the @level")
    return Constraint(text=text.strip(), metric=metric, at=at, op=match["op"], value=value)  # type: ignore[arg-type]


def level_at(levels: Sequence[LevelSummary], at: float | None) -> LevelSummary | None:
    """The level run at concurrency (or request rate) `at`; None: the last one."""
    if at is None:
        return levels[-1] if levels else None
    for level in levels:
        value = level.max_concurrency if level.load_mode == "concurrency" else level.request_rate
        if value is not None and math.isclose(float(value), at):
            return level
    return None


def read_metric(
    summary: BenchSummary,
    metric: str,
    at: float | None,
    *,
    attainment: float = DEFAULT_ATTAINMENT,
    cost_level: bool = False,
) -> float | None:
    """The metric's value in the sweep; None when the level or the number is missing.

    `at` None reads the capacity's level, else the last; `cost` (outside a capacity
    search), and any metric with `cost_level`, the cheapest level meeting the SLO for
    `attainment` of its requests (objective `cost`)."""
    if metric == ERROR_RATE:
        failed = sum(level.failed or 0 for level in summary.levels)
        attempted = failed + sum(level.completed or 0 for level in summary.levels)
        return failed / attempted if attempted else None
    if metric == CAPACITY:
        return _capacity(summary)
    held = summary.capacity.held if summary.capacity is not None else None
    if at is None and (cost_level or (metric == COST and held is None)):
        level = cheapest_level(summary.levels, attainment=attainment)
    elif at is None and held is not None:
        level = summary.levels[held.level] if held.level < len(summary.levels) else None
    else:
        level = level_at(summary.levels, at)
    if level is None or not level.completed:
        return None  # a level where every request failed measured nothing, not zero
    if metric == COST:
        return level.cost.usd_per_m_total_tokens if level.cost is not None else None
    value = getattr(level, metric, None)
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _capacity_objective(
    at: float | None, direction: str | None, load: LoadPlan, where: str
) -> ObjectiveSpec:
    """`capacity`: the load a trial's search finds, maximised; it is read at no level."""
    if at is not None:
        raise ConfigError(f"{where}: capacity is the load the search finds; drop the @level")
    if direction not in (None, "maximize"):
        raise ConfigError(f"{where}: capacity is maximised")
    unit = "concurrent" if load.mode is LoadMode.CONCURRENCY else "req/s"
    return ObjectiveSpec(metric=CAPACITY, at=None, direction="maximize", unit=unit)


def _cost_objective(
    at: float | None, direction: str | None, load: LoadPlan, where: str
) -> ObjectiveSpec:
    """`cost` or `cost@level`: USD per million total tokens, minimised."""
    if direction not in (None, "minimize"):
        raise ConfigError(f"{where}: cost is minimised")
    level = _resolve_level(COST, at, load, where, default=None)
    return ObjectiveSpec(metric=COST, at=level, direction="minimize", unit=COST_UNIT)


def _capacity(summary: BenchSummary) -> float | None:
    """The load the search found; 0 when no load met the SLO; None when the search did not
    end or no request completed (nothing was measured)."""
    result = summary.capacity
    if result is None or result.status == "searching":
        return None
    if not any(level.completed for level in summary.levels):
        return None
    return result.capacity if result.capacity is not None else 0.0


def _resolve_level(
    metric: str, at: float | None, load: LoadPlan, where: str, *, default: float | None
) -> float | None:
    if metric == SINGLE_STREAM:
        if load.mode is not LoadMode.CONCURRENCY or 1.0 not in load.levels:
            raise ConfigError(f"{where}: single_stream_tok_s needs concurrency 1 among the levels")
        if at not in (None, 1.0):
            raise ConfigError(f"{where}: single_stream_tok_s is measured at concurrency 1 only")
        return 1.0
    if at is None:
        return default
    if at not in load.levels:
        levels = ", ".join(f"{v:g}" for v in load.levels)
        raise ConfigError(f"{where}: level {at:g} is not among the load's levels ({levels})")
    return at


def _check_metric(metric: str, where: str) -> None:
    names = metric_names()
    if metric not in names:
        import difflib

        close = difflib.get_close_matches(metric, names, n=1)
        hint = f"did you mean {close[0]}?" if close else "e.g. total_throughput, p99_ttft_ms"
        raise ConfigError(f"{where}: unknown metric {metric!r}", hint=hint)


def _direction(metric: str) -> Literal["maximize", "minimize"]:
    return "minimize" if metric.endswith("_ms") or metric == ERROR_RATE else "maximize"


def _unit(metric: str) -> str:
    if metric.endswith("_ms"):
        return "ms"
    if metric.startswith("request_"):
        return "req/s"
    if metric in ("good_fraction", ERROR_RATE):
        return ""
    if metric == "duration":
        return "s"
    if metric.endswith("_tokens"):
        return "tokens"
    return "tok/s"


def _number(text: str, where: str, *, positive: bool = True) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{where}: {text!r} is not a number") from None
    if not math.isfinite(value) or (positive and value <= 0):
        raise ConfigError(f"{where}: {text!r} is not a {'positive ' if positive else ''}number")
    return value


def _is_number(annotation: Any) -> bool:
    text = str(annotation)
    return ("float" in text or "int" in text) and "dict" not in text and "list" not in text
