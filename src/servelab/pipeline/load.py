"""The load `servelab run` drives besides its sweep: which loads it can drive, and the
capacity search in place of the sweep.

The closed-loop capacity search takes the adaptive sweep's ceiling: the user's
`--max-concurrency`, else the model's KV capacity at these lengths where known, else the
sweep's default, once the embedded engine on the CPU has sized its cache for it (and maybe
lowered it: bench.trial.sized_for_load).
"""

from __future__ import annotations

from dataclasses import replace

from servelab.bench.capacity import DEFAULT_MAX_RATE, CapacityPlan
from servelab.bench.load import LoadMode
from servelab.bench.session import BenchConfig
from servelab.bench.sweep import SweepPlan
from servelab.core.errors import ConfigError

__all__ = ["check_load", "with_capacity"]


def check_load(
    *,
    mode: LoadMode,
    fixed: bool,
    capacity: bool,
    slo_ms: dict[str, float] | None,
) -> None:
    """A ConfigError for a load `run` cannot drive: the capacity search without an SLO or
    with fixed levels, an open loop with neither rates nor the search."""
    if capacity and not slo_ms:
        raise ConfigError(
            "--capacity searches the highest load that meets an SLO: give --slo too",
            hint="e.g. --slo ttft=2s,tpot=50ms",
        )
    if capacity and fixed:
        raise ConfigError("--capacity chooses its own levels: give 'auto', not a list")
    if mode is LoadMode.REQUEST_RATE and not (fixed or capacity):
        raise ConfigError(
            "--request-rate auto searches the capacity: add --capacity (and --slo), or give "
            "rates such as 1,2,4"
        )


def with_capacity(
    bench: BenchConfig,
    *,
    attainment: float,
    max_request_rate: float | None,
    max_steps: int,
) -> BenchConfig:
    """`bench` searching its capacity in place of its sweep: closed loop up to the sweep's
    (sized) ceiling, open loop up to `max_request_rate`."""
    if bench.slo_ms is None:
        raise ConfigError("a capacity search needs an SLO")
    if bench.mode is LoadMode.CONCURRENCY:
        ceiling = bench.sweep or SweepPlan()
        top, source = float(ceiling.max_concurrency), ceiling.max_source
    elif max_request_rate is not None:
        top, source = max_request_rate, "--max-request-rate"
    else:
        top, source = DEFAULT_MAX_RATE, "servelab's default"
    plan = CapacityPlan(
        slo_ms=bench.slo_ms,
        attainment=attainment,
        mode=bench.mode,
        start=min(1.0, top),
        max_load=top,
        max_source=source,
        max_steps=max_steps,
    )
    return replace(bench, sweep=None, capacity=plan)
