"""`servelab diagnose RUN --what-if KNOB=VALUE`: the run's twin replayed at the values asked
about, every level and metric with its interval, and whether it extrapolates."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from servelab.core.errors import ConfigError
from servelab.diagnose.collect import collect_facts
from servelab.diagnose.inputs import load_run
from servelab.diagnose.options import DiagnoseOptions
from servelab.diagnose.twin_run import run_twin
from servelab.twin import Twin
from servelab.twin.lifting import metric_name
from servelab.twin.whatif import LIMIT_NAMES, what_if

__all__ = [
    "KNOB_LIMITS",
    "WhatIfResult",
    "WhatIfRow",
    "fitted_twin",
    "parse_changes",
    "what_if_run",
]

KNOB_LIMITS = {
    "max_running_requests": "running_cap",
    "kv_cache_tokens": "kv_capacity_tokens",
    "max_batch_tokens": "batch_tokens",
    "chunked_prefill_size": "batch_tokens",
}
"""servelab's knobs (an engine spec's names) that set a limit the twin replays."""

_ALIASES = {
    "running_cap": "running_cap",
    "max_running_requests": "running_cap",
    "kv_capacity_tokens": "kv_capacity_tokens",
    "kv_cache_tokens": "kv_capacity_tokens",
    "batch_tokens": "batch_tokens",
    "max_batch_tokens": "batch_tokens",
    "chunked_prefill_size": "batch_tokens",
}
"""The knobs (servelab's names, as in an engine spec) and the twin's limits they set."""


class WhatIfRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    load: str
    metric: str
    measured: float | None
    predicted: float | None
    factor: float | None = Field(description="New / old.")
    low: float | None
    high: float | None


class WhatIfResult(BaseModel):
    """What the replay says the changes would do to each level of the run."""

    model_config = ConfigDict(extra="forbid")

    run_dir: str
    changes: dict[str, int | None]
    fitted_from: str
    rows: list[WhatIfRow]
    extrapolated: list[str]
    refused: int = Field(description="Requests the new limits could not take at all.")
    notes: list[str]


def parse_changes(texts: Sequence[str]) -> dict[str, int | None]:
    """KNOB=VALUE pairs: a knob or limit name, and a whole number or 'none'."""
    changes: dict[str, int | None] = {}
    known = ", ".join(sorted(_ALIASES))
    for text in texts:
        name, sep, raw = text.partition("=")
        limit = _ALIASES.get(name.strip().replace("-", "_"))
        if not sep or limit is None:
            raise ConfigError(f"--what-if {text!r}: expected KNOB=VALUE with KNOB one of {known}")
        value = raw.strip().lower()
        if value == "none":
            changes[limit] = None
            continue
        try:
            number = int(value.replace(",", "").replace("_", ""))
        except ValueError:
            raise ConfigError(
                f"--what-if {text!r}: the value must be a whole number or 'none'"
            ) from None
        if number < 1:
            raise ConfigError(f"--what-if {text!r}: the value must be at least 1")
        changes[limit] = number
    assert set(changes) <= set(LIMIT_NAMES)
    return changes


def fitted_twin(run_dir: Path, options: DiagnoseOptions) -> tuple[Twin, str]:
    """The run's twin as diagnose fits it (its limits read from the run), and what it was
    fitted from; ConfigError where the run gives none."""
    files = load_run(run_dir, engine=options.engine, probe=options.probe)
    facts = collect_facts(files, options)
    twin, detail = run_twin(files, facts.engine, facts.model)
    if twin is None:
        raise ConfigError(f"{run_dir}: {detail}")
    return twin, detail


def what_if_run(
    run_dir: Path, changes: dict[str, int | None], options: DiagnoseOptions
) -> WhatIfResult:
    """The run's twin, fitted as diagnose fits it, replayed with `changes`."""
    twin, detail = fitted_twin(run_dir, options)
    result = what_if(twin, changes)
    notes = [*result.notes, *twin.result.fit.notes]
    unknown = [name for name in LIMIT_NAMES if getattr(twin.limits, name) is None]
    if unknown:
        notes.append(
            f"not known from the run, so not limited in either replay: {', '.join(unknown)}"
        )
    return WhatIfResult(
        run_dir=str(run_dir),
        changes=dict(changes),
        fitted_from=detail,
        rows=[
            WhatIfRow(
                load=f.load,
                metric=metric_name(f.metric),
                measured=f.measured,
                predicted=f.predicted,
                factor=f.factor,
                low=f.low,
                high=f.high,
            )
            for f in result.forecasts
        ],
        extrapolated=result.extrapolated,
        refused=result.refused,
        notes=notes,
    )
