"""What a run's quality probe is asked to do: `--quality`, `--quality-prompts`, `--quality-ref`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULT_PROMPTS", "DEFAULT_SEED", "QualityPlan"]

DEFAULT_PROMPTS = 32
"""Enough probes for the bootstrap to resolve a drift on a few of them, few enough that
three passes cost seconds beside a sweep."""
DEFAULT_SEED = 39


@dataclass(frozen=True, slots=True)
class QualityPlan:
    """Three passes of one probe set at temperature 0: before the sweep, mixed into its
    heaviest level, and after it; compared against `reference`'s passes where given."""

    prompts: int = DEFAULT_PROMPTS
    seed: int = DEFAULT_SEED
    reference: Path | None = None
    """A run directory whose quality.json holds the same probe set (`--quality-ref`)."""
