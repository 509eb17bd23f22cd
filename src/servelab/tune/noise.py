"""Whether the best trial's lead is more than noise: its band against the runner-up and
the default, from the requests of their own run directories.

Each trial is one measurement, and the best of several noisy measurements is biased up
(the more trials, the more one of them is lucky). The band is bench.noise's: a block
bootstrap of best / other on the objective's level, widened by each level's drift, the
family of bands read together at 95% (Bonferroni). A best within noise of the runner-up
is not shown to be better; `tune run --confirm N` measures the run-to-run band that a
within-run band cannot see.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servelab.bench.noise import LevelSample, level_sample, metric_statistic, ratio_band
from servelab.bench.results import BenchSummary
from servelab.core.errors import ServelabError
from servelab.store import RunDir
from servelab.store.rundir import REQUESTS_FILE
from servelab.tune.results import NoiseCheck, ObjectiveSpec, TrialRow
from servelab.tune.targets import level_at

__all__ = ["best_noise"]


def best_noise(
    best: TrialRow,
    others: list[tuple[TrialRow, str]],
    objective: ObjectiveSpec,
    study_dir: Path | None,
) -> list[NoiseCheck]:
    """The best against each (trial, role) in `others`, on `objective` at its level."""
    statistic = metric_statistic(objective.metric)
    best_sample, why_best = _sample(best, objective, study_dir)
    checks = []
    for other, role in others:
        ratio = _ratio(best, other)
        head = f"trial {other.number} ({role})"
        change = f"{ratio - 1:+.1%}" if ratio is not None else "no ratio"
        sample, why = _sample(other, objective, study_dir)
        reason = why_best or why
        if statistic is None:
            reason = f"no band: {objective.metric} has no per-request resample"
        band = None
        if reason is None and best_sample is not None and sample is not None and statistic:
            band = ratio_band(sample, best_sample, statistic, comparisons=len(others))
            reason = None if band.drawn else band.why_none
        if band is None or not band.drawn:
            checks.append(
                NoiseCheck(
                    trial=other.number,
                    role=role,
                    ratio=ratio,
                    within_noise=None,
                    text=f"{head}: best is {change}; {reason or 'no band'}",
                )
            )
            continue
        within = not band.excludes_one()
        verdict = "within noise" if within else "beyond noise"
        checks.append(
            NoiseCheck(
                trial=other.number,
                role=role,
                ratio=ratio,
                band_lo=band.lo,
                band_hi=band.hi,
                within_noise=within,
                text=f"{head}: best is {change}, band {band.lo - 1:+.1%} to "
                f"{band.hi - 1:+.1%} of their own requests: {verdict}",
            )
        )
    return checks


def _ratio(best: TrialRow, other: TrialRow) -> float | None:
    if not best.values or not other.values or other.values[0] == 0:
        return None
    return best.values[0] / other.values[0]


def _sample(
    row: TrialRow, objective: ObjectiveSpec, study_dir: Path | None
) -> tuple[LevelSample | None, str | None]:
    """The trial's requests at the objective's level, or why there are none here."""
    if study_dir is None or row.run_dir is None:
        return None, f"no band: trial {row.number}'s requests are not in this study folder"
    path = study_dir / row.run_dir
    if not (path / REQUESTS_FILE).is_file():
        where = f" (it ran on {row.host})" if row.host else ""
        return None, f"no band: trial {row.number}'s run directory is not here{where}"
    try:
        run = RunDir(path)
        summary = run.load_summary(BenchSummary)
        records: list[dict[str, Any]] = list(run.iter_jsonl(REQUESTS_FILE))
    except (ServelabError, OSError, ValueError):
        return None, f"no band: trial {row.number}'s run directory cannot be read"
    level = level_at(summary.levels, objective.at) if summary is not None else None
    if level is None:
        return None, f"no band: trial {row.number} has no level at {objective.label}"
    sample = level_sample(level, records)
    if sample is None:
        return None, f"no band: trial {row.number} has fewer than two measured requests there"
    return sample, None
