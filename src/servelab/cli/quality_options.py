"""`--quality`, `--quality-prompts`, `--quality-ref`: the quality probe's options, declared
once for `bench` and `run` (docs/QUALITY.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from servelab.bench.quality.plan import DEFAULT_PROMPTS, QualityPlan, quality_plan
from servelab.cli.option_groups import OptionGroup

__all__ = ["QualityOptions"]


@dataclass(frozen=True)
class QualityOptions(OptionGroup):
    """Whether the output's quality is probed beside the sweep, on how many prompts, and
    against which earlier run."""

    quality: Annotated[
        bool,
        typer.Option(
            "--quality",
            help="Probe output quality beside speed: a seeded probe set answered greedily"
            " (temperature 0) before the sweep, beside its heaviest level and after it;"
            " verdicts for determinism (before vs after) and batch invariance (before vs"
            " loaded), each against the noise floor of a repeat. Writes quality.json and"
            " quality_probes.jsonl; the loaded pass's requests are in no level's metrics."
            " See docs/QUALITY.md.",
        ),
    ] = False
    quality_prompts: Annotated[
        int | None,
        typer.Option(
            "--quality-prompts",
            metavar="N",
            help=f"Probes in the set (implies --quality). Default {DEFAULT_PROMPTS}, or the"
            " --quality-ref run's own count. Fewer probes are quicker but resolve less: without"
            " logprobs, about four of 32 must diverge for a drift verdict.",
        ),
    ] = None
    quality_ref: Annotated[
        Path | None,
        typer.Option(
            "--quality-ref",
            metavar="RUN",
            help="Also compare with that run directory's before pass (implies --quality): the"
            " configuration verdict, e.g. another dtype or flag against a known-good launch."
            " RUN must have quality.json from the same probe set.",
        ),
    ] = None

    def plan(self) -> QualityPlan | None:
        """The plan asked for, the reference checked; None without any of the options."""
        return quality_plan(
            enabled=self.quality, prompts=self.quality_prompts, reference=self.quality_ref
        )
