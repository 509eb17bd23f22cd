"""Whether a tuned config is worth keeping: an A/B run of the engine without and with it.

A launches the spec as it is, B the same spec with the user-folder variable pointing at
the staged config (`KernelPlan.with_config`); both run the same sweep. At every load both
runs share, B's total throughput over A's is compared with the noise band of
`servelab.bench.noise` (a block bootstrap over each run's own requests, widened by its
drift): the config is kept only when, at every shared load, the band's low end is above
1 and the gain is at least MIN_GAIN. A load with too few blocks of requests for a band
(bench.noise.MIN_BLOCKS: e.g. no more requests than its concurrency) is "no band", and
the config is not kept on it. A config the band cannot tell from noise is not
kept: it would be a change to the deployment that nobody measured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from servelab.bench.events import BenchEvent
from servelab.bench.noise import level_sample, rate_statistic, ratio_band
from servelab.bench.results import BenchSummary, LevelSummary
from servelab.bench.session import BenchConfig
from servelab.bench.trial import bench_engine
from servelab.core.errors import ConfigError
from servelab.engines.base import EngineSpec
from servelab.store import RunDir
from servelab.store.rundir import REQUESTS_FILE

__all__ = [
    "COMPARED_METRIC",
    "MIN_GAIN",
    "AbDecision",
    "AbResult",
    "LevelVerdict",
    "ab_test",
    "decide",
    "decide_runs",
]

MIN_GAIN = 0.05
"""The smallest gain kept, as the report's MIN_EFFECT (report.compare.verdicts) counts one."""
COMPARED_METRIC = "total_throughput"


class LevelVerdict(BaseModel):
    """B against A at one load."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    load: str = Field(description="'concurrency 8' or 'rate 4/s'.")
    a_total_tok_s: float
    b_total_tok_s: float
    ratio: float = Field(description="B / A total throughput.")
    band_lo: float | None = Field(description="The noise band's low end; None without one.")
    band_hi: float | None
    passed: bool
    reason: str


class AbDecision(BaseModel):
    """Keep the config or not, and why, load by load."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    keep: bool
    reason: str
    levels: list[LevelVerdict]


class AbResult(BaseModel):
    """The two runs and the decision."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    a_run_dir: str = Field(description="Without the config.")
    b_run_dir: str = Field(description="With the config.")
    decision: AbDecision


Records = Sequence[dict[str, Any]]


def decide(
    a_levels: Sequence[LevelSummary],
    a_records: Records,
    b_levels: Sequence[LevelSummary],
    b_records: Records,
) -> AbDecision:
    """The verdict on B against A, at the loads both ran."""
    b_by_load = {_load(level): level for level in b_levels}
    verdicts = [
        _verdict(a, a_records, b_by_load[_load(a)], b_records)
        for a in a_levels
        if _load(a) in b_by_load and not a.interrupted and not b_by_load[_load(a)].interrupted
    ]
    if not verdicts:
        return AbDecision(keep=False, reason="A and B share no finished load level", levels=[])
    failed = [v for v in verdicts if not v.passed]
    if failed:
        return AbDecision(
            keep=False, reason=f"{failed[0].load}: {failed[0].reason}", levels=verdicts
        )
    low = min(v.ratio for v in verdicts)
    return AbDecision(
        keep=True,
        reason=f"faster beyond the noise band at every load (at least {100 * (low - 1):.1f}%)",
        levels=verdicts,
    )


def decide_runs(a_dir: Path, b_dir: Path) -> AbDecision:
    """`decide` on two run directories (summary.json and requests.jsonl)."""
    a_summary, a_records = _read_run(a_dir)
    b_summary, b_records = _read_run(b_dir)
    return decide(a_summary.levels, a_records, b_summary.levels, b_records)


def ab_test(
    spec: EngineSpec,
    config: BenchConfig,
    *,
    with_config: Callable[[EngineSpec], EngineSpec],
    out: Path,
    on_event: Callable[[BenchEvent], None] = lambda _e: None,
) -> AbResult:
    """Launch and sweep `spec` (A), then `with_config(spec)` (B), each into its own run
    directory under `out`; then decide."""
    a = bench_engine(
        spec, replace(config, out=out / "a-default", name="kernels-a"), on_event=on_event
    )
    b = bench_engine(
        with_config(spec), replace(config, out=out / "b-tuned", name="kernels-b"), on_event=on_event
    )
    return AbResult(
        a_run_dir=str(a.run_dir),
        b_run_dir=str(b.run_dir),
        decision=decide_runs(a.run_dir, b.run_dir),
    )


def _verdict(
    a: LevelSummary, a_records: Records, b: LevelSummary, b_records: Records
) -> LevelVerdict:
    load = _load_text(a)
    va, vb = a.total_throughput or 0.0, b.total_throughput or 0.0
    ratio = vb / va if va > 0 else 0.0

    def verdict(
        passed: bool, reason: str, lo: float | None = None, hi: float | None = None
    ) -> LevelVerdict:
        return LevelVerdict(
            load=load,
            a_total_tok_s=va,
            b_total_tok_s=vb,
            ratio=ratio,
            band_lo=lo,
            band_hi=hi,
            passed=passed,
            reason=reason,
        )

    sample_a, sample_b = level_sample(a, a_records), level_sample(b, b_records)
    if va <= 0 or vb <= 0 or sample_a is None or sample_b is None:
        return verdict(False, "no completed requests to compare")
    band = ratio_band(sample_a, sample_b, rate_statistic(COMPARED_METRIC))
    if not band.drawn:  # one block, a few, or no finite resample: no band, never a narrow one
        return verdict(False, band.why_none or "no band: too few requests")
    gain = f"{100 * (ratio - 1):+.1f}%, band {band.lo:.3f}-{band.hi:.3f}"
    if band.lo <= 1:
        return verdict(False, f"{gain}: not beyond the noise band", band.lo, band.hi)
    if ratio - 1 < MIN_GAIN:
        return verdict(False, f"{gain}: under the {MIN_GAIN:.0%} worth keeping", band.lo, band.hi)
    return verdict(True, gain, band.lo, band.hi)


def _load(level: LevelSummary) -> tuple[int, float]:
    if level.max_concurrency is not None:
        return (0, float(level.max_concurrency))
    return (1, float(level.request_rate or 0))


def _load_text(level: LevelSummary) -> str:
    if level.max_concurrency is not None:
        return f"concurrency {level.max_concurrency}"
    return f"rate {level.request_rate:g}/s"


def _read_run(path: Path) -> tuple[BenchSummary, list[dict[str, Any]]]:
    run = RunDir(path)
    summary = run.load_summary(BenchSummary)
    if summary is None:
        raise ConfigError(f"{path} has no summary.json")
    return summary, list(run.iter_jsonl(REQUESTS_FILE))
