"""The goal's targets (`--target total=1000 --target ttft_p99=2s`), met or not, and where.

A throughput target is met by the level that reaches it with the most of it; a latency
target by the level with the most total throughput among those that keep under it, since
that is the operating point a deployment would choose. `single` is judged at concurrency 1
only. Names and units are in `TARGETS` (and docs/REPORT.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servelab.bench.results import LevelSummary
from servelab.core.errors import ConfigError
from servelab.core.units import MS_PER_S, parse_duration_s

__all__ = [
    "TARGETS",
    "Target",
    "TargetResult",
    "evaluate_targets",
    "level_meets",
    "parse_target",
]


@dataclass(frozen=True)
class _Kind:
    what: str
    unit: str
    higher_is_better: bool
    read: Callable[[LevelSummary], float | None]
    duration: bool = False


def _per_user(s: LevelSummary) -> float | None:
    return 1000 / s.median_tpot_ms if s.median_tpot_ms else None


def _error_pct(s: LevelSummary) -> float | None:
    if s.completed is None or s.failed is None:
        return None
    attempted = s.completed + s.failed
    return 100 * s.failed / attempted if attempted else None


TARGETS: dict[str, _Kind] = {
    "total": _Kind("total tok/s", "tok/s", True, lambda s: s.total_throughput),
    "output": _Kind("output tok/s", "tok/s", True, lambda s: s.output_throughput),
    "single": _Kind("single-stream tok/s", "tok/s", True, lambda s: s.single_stream_tok_s),
    "per_user": _Kind("tok/s per user (1000 / median TPOT)", "tok/s", True, _per_user),
    "goodput": _Kind("goodput", "req/s", True, lambda s: s.request_goodput),
    "ttft_p50": _Kind("TTFT p50", "ms", False, lambda s: s.median_ttft_ms, duration=True),
    "ttft_p99": _Kind("TTFT p99", "ms", False, lambda s: s.p99_ttft_ms, duration=True),
    "tpot_p50": _Kind("TPOT p50", "ms", False, lambda s: s.median_tpot_ms, duration=True),
    "tpot_p99": _Kind("TPOT p99", "ms", False, lambda s: s.p99_tpot_ms, duration=True),
    "itl_p99": _Kind("ITL p99", "ms", False, lambda s: s.p99_itl_ms, duration=True),
    "e2e_p99": _Kind("E2E p99", "ms", False, lambda s: s.p99_e2e_latency_ms, duration=True),
    "errors": _Kind("failed requests", "%", False, _error_pct),
}


class Target(BaseModel):
    """One target as given: `name=value`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    value: float = Field(description="In the target's unit: tok/s, req/s, ms or %.")
    text: str = Field(description="As the user wrote it.")

    @property
    def kind(self) -> _Kind:
        return TARGETS[self.name]

    @property
    def goal(self) -> str:
        sign = ">=" if self.kind.higher_is_better else "<="
        return f"{self.kind.what} {sign} {self.value:,.4g} {self.kind.unit}"


class TargetResult(BaseModel):
    """Whether a target is met, by which level, and the value it reached."""

    model_config = ConfigDict(extra="forbid")

    target: Target
    met: bool
    level: int | None = Field(description="The level that meets it (or comes closest).")
    concurrency: int | None
    measured: float | None
    detail: str
    direction: Literal["higher", "lower"]


def parse_target(text: str) -> Target:
    """'total=1000', 'ttft_p99=2s', 'errors=1%' -> a Target; a ConfigError when not one."""
    name, sep, raw = text.partition("=")
    name = name.strip().lower()
    if not sep or name not in TARGETS:
        raise ConfigError(
            f"target {text.strip()!r} is not understood",
            hint=f"use NAME=VALUE with NAME one of {', '.join(TARGETS)}",
        )
    kind, raw = TARGETS[name], raw.strip()
    if kind.duration:
        value = parse_duration_s(raw, what=f"target {name}") * MS_PER_S
    else:
        number = raw.removesuffix("%") if kind.unit == "%" else raw
        if "%" in number:
            raise ConfigError(f"target {name} is in {kind.unit}, not %: {raw!r}")
        try:
            value = float(number.replace(",", "").replace("_", ""))
        except ValueError:
            raise ConfigError(f"target {name}: {raw!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"target {name}: {raw!r} must be a finite number, 0 or more")
    return Target(name=name, value=value, text=f"{name}={raw}")


def evaluate_targets(
    targets: Sequence[Target], levels: Sequence[LevelSummary]
) -> list[TargetResult]:
    """Each target against the sweep's completed levels."""
    return [_evaluate(t, [s for s in levels if s.completed != 0]) for t in targets]


def level_meets(target: Target, level: LevelSummary) -> bool | None:
    """Whether one level meets the target by itself (a level without the number does not);
    None for `single`, which is judged at concurrency 1 only, not at every level."""
    if target.name == "single":
        return None
    value = target.kind.read(level)
    if value is None:
        return False
    return value >= target.value if target.kind.higher_is_better else value <= target.value


def _evaluate(target: Target, levels: list[LevelSummary]) -> TargetResult:
    kind = target.kind
    direction: Literal["higher", "lower"] = "higher" if kind.higher_is_better else "lower"
    read = [(s, kind.read(s)) for s in levels]
    known = [(s, v) for s, v in read if v is not None]
    if not known:
        return TargetResult(
            target=target,
            met=False,
            level=None,
            concurrency=None,
            measured=None,
            detail=f"not measured: no level has {kind.what}",
            direction=direction,
        )
    if kind.higher_is_better:
        best, value = max(known, key=lambda sv: sv[1])
        met = value >= target.value
    else:
        meeting = [(s, v) for s, v in known if v <= target.value]
        met = bool(meeting)
        pool = meeting or known
        best, value = (
            max(pool, key=lambda sv: sv[0].total_throughput or 0.0)
            if met
            else min(pool, key=lambda sv: sv[1])
        )
    where = f"concurrency {best.max_concurrency}" if best.max_concurrency else f"level {best.level}"
    reached = f"{value:,.4g} {kind.unit} at {where}"
    if met and not kind.higher_is_better:
        detail = f"met: {reached}, the most total throughput under it"
    elif met:
        detail = f"met: {reached}"
    else:
        detail = f"not met: best {reached} ({_shortfall(target, value)})"
    return TargetResult(
        target=target,
        met=met,
        level=best.level,
        concurrency=best.max_concurrency,
        measured=value,
        detail=detail,
        direction=direction,
    )


def _shortfall(target: Target, value: float) -> str:
    if target.kind.higher_is_better:
        return f"{value / target.value:.0%} of the target" if target.value else "no target"
    return f"{value / target.value:.1f}x the limit" if target.value else "over 0"
