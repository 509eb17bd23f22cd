"""Rules that turn runs into findings."""

from servelab.diagnose.knee import KNEE_GROWTH_PER_DOUBLING, Knee, find_knee

__all__ = ["KNEE_GROWTH_PER_DOUBLING", "Knee", "find_knee"]
