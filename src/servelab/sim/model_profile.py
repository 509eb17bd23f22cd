"""Step costs from `servelab model`: the simulator as a running copy of the analytic model.

`model` builds the deployment from the simulator's settings (`--model`, `--gpu`, `--tp`,
...); `glm5-rtxpro6000-tp8` is the deployment of DESIGN.md's story: GLM-5 NVFP4 on eight
RTX PRO 6000 with tensor parallelism 8, running requests capped at 64 by the server, and
a per-step overhead fitted to the story's measurements (see `STORY_STEP_OVERHEAD_MS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from servelab.core.units import US_PER_MS
from servelab.model.deployment import DEFAULT_STEP_OVERHEAD_US
from servelab.sim.stepcost import StepCost, StepCostFactory, StepSettings

if TYPE_CHECKING:
    from servelab.model import Deployment

__all__ = [
    "CALIBRATED_PROFILES",
    "MODEL_PROFILE",
    "PROFILE_DEFAULTS",
    "STORY_PROFILE",
    "STORY_STEP_OVERHEAD_MS",
    "ModelStepCost",
    "model_profiles",
]

MODEL_PROFILE = "model"
STORY_PROFILE = "glm5-rtxpro6000-tp8"
CALIBRATED_PROFILES = frozenset({MODEL_PROFILE, STORY_PROFILE})
"""The profiles timed by the model, which a probe's measurements can calibrate."""
STORY_STEP_OVERHEAD_MS = 84.0
"""What the story's deployment spent per step beyond the model's bound. A line through its
measured TPOTs (114.6 ms at 32 concurrent, 131.2 ms at 64) gives 98 ms + 0.52 ms per
request; the model's own step is 29.6 ms and 39.7 ms there, so about 84 ms per step went
elsewhere (all-reduces staged through the host without P2P, no CUDA graphs, the
scheduler). With it the model's single stream is 7.7 + 84 ms per token, about 11 tok/s:
what was measured."""

PROFILE_DEFAULTS: dict[str, dict[str, Any]] = {
    MODEL_PROFILE: {"step_overhead_ms": DEFAULT_STEP_OVERHEAD_US / US_PER_MS},
    STORY_PROFILE: {"max_running_requests": 64, "step_overhead_ms": STORY_STEP_OVERHEAD_MS},
}
"""Settings a profile brings unless they are given: the model's own per-step overhead, and
the story's server ran with `--max-running-requests 64`."""


@dataclass(frozen=True, slots=True)
class ModelStepCost:
    """A StepCost answered by the analytic model of one deployment."""

    deployment: Deployment

    @property
    def kv_capacity_tokens(self) -> int | None:
        from servelab.model import kv_capacity_tokens

        return kv_capacity_tokens(self.deployment)

    def step_s(self, decode_batch: int, decode_context_tokens: int, prefill_tokens: int) -> float:
        from servelab.model import step_s

        context = decode_context_tokens / decode_batch if decode_batch else 0.0
        return step_s(
            self.deployment,
            decode_batch=decode_batch,
            context_tokens=context,
            prefill_tokens=prefill_tokens,
        )


def _from_settings(config: StepSettings) -> StepCost:
    from servelab.core.errors import ConfigError
    from servelab.model import deploy

    if config.perf_model is None:
        raise ConfigError("the model profile needs --model (a preset or a config.json)")
    return ModelStepCost(
        deploy(
            config.perf_model,
            gpu=config.gpu,
            gpus=config.gpus,
            tp=config.tp,
            pp=config.pp,
            ep=config.ep,
            dp=config.dp,
            weights=config.weights,
            kv_dtype=config.kv_dtype,
            step_overhead_us=0.0,
            calibration=config.calibrate,
        )
    )


def _story(config: StepSettings) -> StepCost:
    from servelab.model import deploy

    return ModelStepCost(
        deploy(
            "glm-5-nvfp4",
            gpu="rtx-pro-6000",
            tp=8,
            weights="nvfp4",
            step_overhead_us=0.0,
            calibration=config.calibrate,
        )
    )


def model_profiles() -> dict[str, StepCostFactory]:
    """The model-driven profiles, for `servelab.sim.profiles.PROFILES`."""
    return {MODEL_PROFILE: _from_settings, STORY_PROFILE: _story}
