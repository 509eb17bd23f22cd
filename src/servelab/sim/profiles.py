"""The simulator's named step-cost profiles, as `servelab sim --profile NAME` offers them.

A registry apart from the step costs and the settings: `stepcost` defines the contract,
`model_profile` the model-driven profiles, `config` validates a profile's name here, and
none of them imports another back.
"""

from __future__ import annotations

from servelab.sim.model_profile import model_profiles
from servelab.sim.stepcost import StepCost, StepCostFactory, StepSettings, linear_step_cost

__all__ = ["LINEAR_PROFILE", "PROFILES", "check_step_cost", "step_cost_for"]

LINEAR_PROFILE = "linear"

PROFILES: dict[str, StepCostFactory] = {LINEAR_PROFILE: linear_step_cost, **model_profiles()}
"""Named step-cost profiles. Register one by adding an entry:
`PROFILES["my-gpu"] = lambda settings: MyStepCost(...)`."""


def check_step_cost(settings: StepSettings) -> None:
    """A ConfigError now, in one line, if the profile's deployment cannot be built
    (a layout that does not fit, an unknown GPU), rather than in a worker after start."""
    step_cost_for(settings)


def step_cost_for(settings: StepSettings) -> StepCost | None:
    """The StepCost of the settings' profile; None in fixed-timing mode (no profile)."""
    if settings.profile is None:
        return None
    return PROFILES[settings.profile](settings)
