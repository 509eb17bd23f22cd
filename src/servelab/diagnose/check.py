"""Predictions checked: a run that applies a finding of an earlier run, against its gain.

A run made to try one finding's action (`servelab bench --applies RUN_A:KIND`, or a tune
trial seeded from a diagnose action) names that finding. Its measured factor is read at
the operating point the expected gain names (a level of the same concurrency or rate in
both runs), for the gain's metric, B over A (or A over B for a time, where less is more),
with the noise band of the two levels' own requests where both runs kept them. The verdict
says whether the measured factor lies in the predicted interval.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servelab.bench.noise import Band, Statistic, level_sample, metric_statistic, ratio_band
from servelab.bench.results import BenchSummary, LevelSummary
from servelab.core.errors import ConfigError, ServelabError
from servelab.diagnose.findings import ExpectedGain, Finding, FindingKind
from servelab.store import REQUESTS_FILE, SUMMARY_FILE, RunDir

__all__ = [
    "Applies",
    "PredictionCheck",
    "check_applied",
    "check_applied_all",
    "check_prediction",
    "check_predictions",
    "factor_band",
    "level_label",
    "parse_applies",
    "predicted_finding",
]

Verdict = Literal["inside", "within noise", "outside", "no interval", "not measured"]
"""inside: the measured factor lies in the predicted interval; within noise: it does not,
but its noise band reaches into the interval (the two cannot be told apart); outside: the
band too lies outside (or there is no band and the factor is outside)."""


@dataclass(frozen=True)
class Applies:
    """The finding a run applies: the run it was found in and its kind."""

    run: Path
    kind: FindingKind

    @property
    def label(self) -> str:
        return f"{self.run}:{self.kind.value}"


def parse_applies(text: str) -> Applies:
    """`RUN_DIR:KIND`; the run must hold a summary and the kind must be one diagnose has."""
    run, sep, kind = text.rpartition(":")
    if not sep or not run or not kind:
        raise ConfigError(
            f"--applies {text!r}: expected RUN_DIR:KIND, e.g. servelab-runs/a:kv_capacity"
        )
    try:
        which = FindingKind(kind)
    except ValueError:
        known = ", ".join(k.value for k in FindingKind)
        raise ConfigError(f"--applies: no finding kind {kind!r}", hint=f"one of: {known}") from None
    path = Path(run)
    if not (path / SUMMARY_FILE).is_file():
        raise ConfigError(f"--applies: {path} is not a run directory (no {SUMMARY_FILE})")
    return Applies(run=path, kind=which)


class PredictionCheck(BaseModel):
    """One finding's expected gain against what the run that applied its action measured."""

    model_config = ConfigDict(extra="forbid")

    applies: str = Field(description="RUN_A:KIND, the finding that was applied.")
    metric: str
    at: str | None
    predicted: float | None = Field(description="The point estimate, new / old.")
    low: float | None = None
    high: float | None = None
    measured: float | None = Field(description="The factor this run measured, new / old.")
    band_lo: float | None = Field(default=None, description="The measured factor's noise band.")
    band_hi: float | None = None
    band_note: str | None = Field(default=None, description="Why there is no band.")
    verdict: Verdict
    text: str


def predicted_finding(run: Path, kind: FindingKind) -> Finding | None:
    """The finding of `kind` in the run's diagnosis (diagnosis.json, else diagnosed now)."""
    from servelab.diagnose.document import Diagnosis
    from servelab.diagnose.run import diagnose_run

    diagnosis = RunDir(run).load_diagnosis(Diagnosis) or diagnose_run(run, write=False)
    return next((f for f in diagnosis.findings if f.kind is kind), None)


def check_applied(applies: str, run_b: Path) -> PredictionCheck:
    """The check of a run's recorded `applies` text; a finding that cannot be read back
    (the run gone, a kind unknown) is a check that was not measured, with the reason."""
    try:
        return check_prediction(parse_applies(applies), run_b)
    except ServelabError as exc:
        return _not_checked(applies, None, "not measured", f"{applies}: {exc}")


def check_applied_all(applies: str, run_b: Path) -> list[PredictionCheck]:
    """Every stated gain of the applied finding checked, the headline first."""
    try:
        return check_predictions(parse_applies(applies), run_b)
    except ServelabError as exc:
        return [_not_checked(applies, None, "not measured", f"{applies}: {exc}")]


def check_prediction(applies: Applies, run_b: Path) -> PredictionCheck:
    """Measure B against A where the finding's headline gain says, and judge it."""
    return check_predictions(applies, run_b)[0]


def check_predictions(applies: Applies, run_b: Path) -> list[PredictionCheck]:
    """Measure B against A for every metric the finding stated a gain for."""
    summary_b = RunDir(run_b).load_summary(BenchSummary)
    summary_a = RunDir(applies.run).load_summary(BenchSummary)
    finding = predicted_finding(applies.run, applies.kind)
    gains = finding.expected_gains if finding is not None else []
    if summary_a is None or summary_b is None or not gains:
        said = "no such finding" if finding is None else "no expected gain"
        return [
            _not_checked(applies.label, None, "no interval", f"{applies.label}: {said} to check")
        ]
    return [_check_gain(applies, run_b, summary_a, summary_b, gain) for gain in gains]


def _check_gain(
    applies: Applies,
    run_b: Path,
    summary_a: BenchSummary,
    summary_b: BenchSummary,
    gain: ExpectedGain,
) -> PredictionCheck:
    level_a, level_b = _level(summary_a, gain.at), _level(summary_b, gain.at)
    reading = _reading(gain.metric)
    if level_a is None or level_b is None or reading is None:
        return _unmeasured(applies, gain, "no level at that point in both runs or no such metric")
    field, inverse = reading
    a_value, b_value = getattr(level_a, field), getattr(level_b, field)
    if not a_value or not b_value:
        return _unmeasured(applies, gain, f"{field} missing at {gain.at}")
    measured = (a_value / b_value) if inverse else (b_value / a_value)
    band = factor_band(applies.run, run_b, level_a, level_b, field, inverse)
    verdict = _verdict(gain, measured, band)
    return PredictionCheck(
        applies=applies.label,
        **_stated(gain),
        measured=round(measured, 3),
        band_lo=round(band[0], 3) if band else None,
        band_hi=round(band[1], 3) if band else None,
        band_note=None if band else _why_no_band(applies.run, run_b),
        verdict=verdict,
        text=_text(applies, gain, measured, band, verdict),
    )


def _verdict(gain: ExpectedGain, measured: float, band: tuple[float, float] | None) -> Verdict:
    holds = gain.holds(measured)
    if holds is None:
        return "no interval"
    if holds:
        return "inside"
    assert gain.low is not None and gain.high is not None
    if band is not None and band[0] <= gain.high and band[1] >= gain.low:
        return "within noise"
    return "outside"


_READINGS = {
    "total throughput": ("total_throughput", False),
    "output throughput": ("output_throughput", False),
    "median TTFT": ("median_ttft_ms", True),
    "median TPOT": ("median_tpot_ms", True),
    "median E2E": ("median_e2e_latency_ms", True),
    "single-stream tok/s": ("mean_tpot_ms", True),
}
"""Which level field each gain metric reads, and whether less of it is more (a time)."""


def _reading(metric: str) -> tuple[str, bool] | None:
    if metric.startswith("decode speed"):
        return "mean_tpot_ms", True
    return _READINGS.get(metric)


def _level(summary: BenchSummary, at: str | None) -> LevelSummary | None:
    """The level the gain is stated at: 'concurrency N' or 'R req/s'."""
    if at is None:
        return None
    for level in summary.levels:
        if level.completed and level_label(level) == at:
            return level
    return None


def level_label(level: LevelSummary) -> str | None:
    """The level's operating point as the rules name it (LevelFacts.label)."""
    if level.max_concurrency is not None:
        return f"concurrency {level.max_concurrency}"
    return f"{level.request_rate:g} req/s" if level.request_rate is not None else None


def factor_band(
    run_a: Path, run_b: Path, a: LevelSummary, b: LevelSummary, field: str, inverse: bool
) -> tuple[float, float] | None:
    """The 95% band of the measured factor from both levels' requests; None without them."""
    statistic: Statistic | None = metric_statistic(field)
    records = [_records(run_a), _records(run_b)]
    if statistic is None or records[0] is None or records[1] is None:
        return None
    sample_a, sample_b = level_sample(a, records[0]), level_sample(b, records[1])
    if sample_a is None or sample_b is None:
        return None
    band: Band = ratio_band(sample_a, sample_b, statistic)
    if not band.drawn:
        return None
    return (1 / band.hi, 1 / band.lo) if inverse else (band.lo, band.hi)


def _records(run: Path) -> list[dict[str, Any]] | None:
    if not (run / REQUESTS_FILE).is_file():
        return None
    try:
        return list(RunDir(run).iter_jsonl(REQUESTS_FILE))
    except (ServelabError, OSError, ValueError):
        return None


def _why_no_band(run_a: Path, run_b: Path) -> str:
    kept = [run for run in (run_a, run_b) if not (run / REQUESTS_FILE).is_file()]
    if kept:
        return f"no band: {', '.join(str(r) for r in kept)} kept no {REQUESTS_FILE}"
    return "no band: too few requests at that level in one of the runs"


def _stated(gain: ExpectedGain) -> dict[str, Any]:
    """What the finding predicted, as a check's fields."""
    return {
        "metric": gain.metric,
        "at": gain.at,
        "predicted": gain.factor,
        "low": gain.low,
        "high": gain.high,
    }


def _unmeasured(applies: Applies, gain: ExpectedGain, why: str) -> PredictionCheck:
    return _not_checked(
        applies.label,
        gain,
        "not measured",
        f"{applies.label}: predicted {gain.factor:g}x {gain.metric}; not measured here: {why}",
    )


def _not_checked(
    label: str, gain: ExpectedGain | None, verdict: Verdict, text: str
) -> PredictionCheck:
    """A check with nothing measured: what was predicted where there was a gain."""
    stated = _stated(gain) if gain else {"metric": "-", "at": None, "predicted": None}
    return PredictionCheck(applies=label, **stated, measured=None, verdict=verdict, text=text)


def _text(
    applies: Applies,
    gain: ExpectedGain,
    measured: float,
    band: tuple[float, float] | None,
    verdict: Verdict,
) -> str:
    interval = f" ({gain.low:g}-{gain.high:g})" if gain.low is not None else ""
    noise = f", band {band[0]:.3g}-{band[1]:.3g}" if band else ""
    return (
        f"{applies.label}: predicted {gain.factor:g}x{interval} {gain.metric} at {gain.at}; "
        f"measured {measured:.3g}x{noise}: {verdict}"
    )
