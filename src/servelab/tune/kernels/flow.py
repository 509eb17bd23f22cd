"""Tune, stage, measure, keep or drop: the run-and-accept half of `servelab tune kernels`.

Under `out`: `tuner/` (the tuner's folder, its log and the file it wrote), `candidate/`
(the folder the engine's user-folder variable points at in the B run), and the A and B
run directories. A config that the A/B run does not accept has its candidate folder
removed; the tuner's own output stays for the record.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from servelab.bench.events import BenchEvent, Notice
from servelab.bench.session import BenchConfig
from servelab.engines.base import EngineSpec
from servelab.tune.kernels.accept import AbResult, ab_test
from servelab.tune.kernels.plan import KernelPlan
from servelab.tune.kernels.run import DEFAULT_TUNER_TIMEOUT_S, TunerRun, run_tuner, stage_config

__all__ = ["KernelTuneResult", "WithConfig", "tune_kernels"]

WithConfig = Callable[[EngineSpec, Path], EngineSpec]
"""The spec of the B run, from the A spec and the staged folder (default:
`KernelPlan.with_config`, which sets the engine's user-folder variable)."""


class KernelTuneResult(BaseModel):
    """What `tune_kernels` did and decided."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan: KernelPlan
    tuner: TunerRun
    ab: AbResult | None = Field(description="None when the tuner produced nothing to test.")
    kept: bool
    folder: str | None = Field(description="The kept folder, for the user-folder variable.")
    env: dict[str, str] = Field(description="What to add to the spec's env to use it.")
    reason: str


def tune_kernels(
    plan: KernelPlan,
    spec: EngineSpec,
    bench: BenchConfig,
    *,
    out: Path,
    tuner_timeout_s: float = DEFAULT_TUNER_TIMEOUT_S,
    tuner_env: Mapping[str, str] | None = None,
    with_config: WithConfig | None = None,
    on_event: Callable[[BenchEvent], None] = lambda _e: None,
) -> KernelTuneResult:
    """Run the plan's tuner, then A/B `spec` without and with its file; keep it only if B
    is faster beyond the noise band. `tuner_env` goes over the spec's env for the tuner."""
    on_event(Notice(f"tuning {plan.file_name}"))
    tuned = run_tuner(
        plan,
        work_dir=out / "tuner",
        timeout_s=tuner_timeout_s,
        env={**spec.env, **(tuner_env or {})},
    )
    if not tuned.ok or tuned.file is None:
        return KernelTuneResult(
            plan=plan,
            tuner=tuned,
            ab=None,
            kept=False,
            folder=None,
            env={},
            reason=tuned.message or f"the tuner ended {tuned.status}",
        )
    root = stage_config(plan, Path(tuned.file), out / "candidate")
    transform = with_config or plan.with_config
    on_event(Notice(f"A/B: {spec.engine} without, then with {root}"))
    ab = ab_test(spec, bench, with_config=lambda s: transform(s, root), out=out, on_event=on_event)
    if not ab.decision.keep:
        shutil.rmtree(root)
        return KernelTuneResult(
            plan=plan,
            tuner=tuned,
            ab=ab,
            kept=False,
            folder=None,
            env={},
            reason=ab.decision.reason,
        )
    return KernelTuneResult(
        plan=plan,
        tuner=tuned,
        ab=ab,
        kept=True,
        folder=str(root),
        env={plan.user_folder_env: str(root)},
        reason=ab.decision.reason,
    )
