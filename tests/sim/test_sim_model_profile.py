"""Model-driven profiles: step times from `servelab model`, and the story's defaults."""

from __future__ import annotations

import subprocess
import sys

import pytest

from servelab.model import decode_step_s, deploy, kv_capacity_tokens, prefill_s
from servelab.sim import SimConfig
from servelab.sim.model_profile import STORY_STEP_OVERHEAD_MS, ModelStepCost
from servelab.sim.stepcost import ScaledStepCost, step_cost_for


def test_model_step_cost_asks_the_model_with_the_mean_context():
    dep = deploy("llama-3.1-8b", gpu="h100", tp=1, step_overhead_us=0)
    cost = ModelStepCost(dep)
    assert cost.step_s(8, 8 * 500, 0) == pytest.approx(decode_step_s(dep, 8, 500))
    assert cost.step_s(0, 0, 1024) == pytest.approx(prefill_s(dep, 1024))
    assert cost.step_s(8, 8 * 500, 512) > cost.step_s(8, 8 * 500, 0)
    assert cost.kv_capacity_tokens == kv_capacity_tokens(dep)


def test_the_model_profile_is_built_from_the_settings():
    config = SimConfig(profile="model", perf_model="llama-3.1-8b", gpu="h200", tp=1)
    cost = step_cost_for(config)
    assert isinstance(cost, ModelStepCost)
    assert cost.deployment.gpu.slug == "h200"
    assert config.step_overhead_ms == pytest.approx(0.1)


def test_the_story_profile_brings_its_cap_and_overhead_unless_given():
    story = SimConfig(profile="glm5-rtxpro6000-tp8")
    assert (story.max_running_requests, story.step_overhead_ms) == (64, STORY_STEP_OVERHEAD_MS)
    raised = SimConfig(profile="glm5-rtxpro6000-tp8", max_running_requests=256)
    assert raised.max_running_requests == 256
    cost = step_cost_for(story)
    assert cost is not None
    single_stream_ms = cost.step_s(1, 320, 0) * 1e3 + story.step_overhead_ms
    assert 80 < single_stream_ms < 100  # DESIGN.md: about 11 tok/s single stream


def test_time_scale_divides_every_step():
    inner = ModelStepCost(deploy("llama-3.1-8b", gpu="h100", tp=1))
    scaled = ScaledStepCost(inner, 10.0)
    assert scaled.step_s(4, 400, 0) == pytest.approx(inner.step_s(4, 400, 0) / 10)
    assert scaled.kv_capacity_tokens == inner.kv_capacity_tokens


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "glm-5-nvfp4", "--tp", "3"], "do not divide by tp=3"),
        (["--model", "nope"], "unknown model 'nope'"),
        (["--gpu", "h200"], "describe --model's deployment"),
        (["--model", "llama-3.1-8b", "--gpu", "h100", "--profile", "linear"], "--model"),
        (["--profile", "glm5-rtxpro6000-tp8", "--time-scale", "0"], "--time-scale"),
    ],
)
def test_bad_model_profiles_are_one_line_errors(args, message):
    result = subprocess.run(
        [sys.executable, "-m", "servelab", "sim", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
