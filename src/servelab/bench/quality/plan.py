"""What a run's quality probe is asked to do: `--quality`, `--quality-prompts`, `--quality-ref`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servelab.bench.quality.probes import (
    DEFAULT_PROBES,
    DEFAULT_SEED,
    Probe,
    make_probes,
    probe_set_digest,
    read_probes,
)
from servelab.bench.quality.results import PROBES_FILE, QualityResult, load_quality
from servelab.core.errors import ConfigError

__all__ = ["DEFAULT_PROMPTS", "DEFAULT_SEED", "QualityPlan", "load_reference", "quality_plan"]

DEFAULT_PROMPTS = DEFAULT_PROBES
"""--quality-prompts's default: probes.DEFAULT_PROBES, under the option's name."""


@dataclass(frozen=True, slots=True)
class QualityPlan:
    """Three passes of one probe set at temperature 0: before the sweep, mixed into its
    heaviest level, and after it; compared against `reference`'s passes where given."""

    prompts: int = DEFAULT_PROMPTS
    seed: int = DEFAULT_SEED
    reference: Path | None = None
    """A run directory whose quality.json holds the same probe set (`--quality-ref`)."""

    def probes(self, max_context: int | None = None) -> list[Probe]:
        """The reference run's recorded set where there is one (replayed as it was),
        else the seeded set, cut to the engine's context where it is known."""
        if self.reference is not None and (self.reference / PROBES_FILE).is_file():
            return read_probes(self.reference)
        return make_probes(self.prompts, seed=self.seed, max_context=max_context)


def quality_plan(
    *, enabled: bool, prompts: int | None = None, reference: Path | None = None
) -> QualityPlan | None:
    """The plan the three options ask for (either of the last two implies the first), checked.

    Without `prompts`, a reference run's own probe count and seed are used, so that
    `--quality-ref RUN` alone replays RUN's probe set. A ConfigError when RUN has no
    quality.json or probed another set.
    """
    if not (enabled or prompts is not None or reference is not None):
        return None
    if prompts is not None and prompts < 1:
        raise ConfigError(f"--quality-prompts must be at least 1, not {prompts}")
    plan = QualityPlan(prompts=prompts or DEFAULT_PROMPTS, reference=reference)
    if reference is not None and prompts is None:
        ref = _load(reference)
        plan = QualityPlan(prompts=ref.n_probes, seed=ref.seed, reference=reference)
    load_reference(plan)
    return plan


def load_reference(plan: QualityPlan) -> QualityResult | None:
    """The reference run's quality.json, checked to hold this plan's probe set; None
    without a reference."""
    if plan.reference is None:
        return None
    ref = _load(plan.reference)
    same_draw = (plan.prompts, plan.seed) == (ref.n_probes, ref.seed)
    if not same_draw or ref.probe_set_digest != probe_set_digest(plan.probes()):
        raise ConfigError(
            f"--quality-ref {plan.reference}: its probe set ({ref.n_probes} probes, seed "
            f"{ref.seed}) is not this run's ({plan.prompts} probes, seed {plan.seed})",
            hint="leave out --quality-prompts to replay the reference's probe set",
        )
    return ref


def _load(reference: Path) -> QualityResult:
    if not reference.is_dir():
        raise ConfigError(f"--quality-ref {reference}: no such run directory")
    ref = load_quality(reference)
    if ref is None:
        raise ConfigError(
            f"--quality-ref {reference}: the run has no quality.json",
            hint="the reference run must have been run with --quality",
        )
    return ref
