"""Model-driven profiles: step times from `servelab model`, and the story's defaults."""

from __future__ import annotations

import subprocess
import sys

import pytest

import servelab.model
from servelab.model import deploy
from servelab.sim import SimConfig
from servelab.sim.model_profile import STORY_STEP_OVERHEAD_MS, ModelStepCost
from servelab.sim.profiles import step_cost_for
from servelab.sim.stepcost import LinearStepCost, ScaledStepCost


def test_model_step_cost_asks_the_model_with_the_mean_context(monkeypatch):
    asked: list[dict[str, object]] = []

    def recording_step_s(deployment: object, **work: float) -> float:
        asked.append({"deployment": deployment, **work})
        return 0.25

    dep = deploy("llama-3.1-8b", gpu="h100", tp=1, step_overhead_us=0)
    monkeypatch.setattr(servelab.model, "step_s", recording_step_s)
    cost = ModelStepCost(dep)
    assert cost.step_s(8, 8 * 500, 0) == 0.25
    assert cost.step_s(0, 0, 1024) == 0.25
    assert asked == [
        {"deployment": dep, "decode_batch": 8, "context_tokens": 500, "prefill_tokens": 0},
        {"deployment": dep, "decode_batch": 0, "context_tokens": 0, "prefill_tokens": 1024},
    ]


def test_model_step_cost_of_llama_8b_on_one_h100():
    cost = ModelStepCost(deploy("llama-3.1-8b", gpu="h100", tp=1, step_overhead_us=0))
    # One stream, no context: every bf16 weight but the embedding table is read once,
    # (8,030,261,248 - 128,256 x 4,096) x 2 B = 15,009,849,344 B at 3.35 TB/s = 4.4806 ms.
    assert cost.step_s(1, 0, 0) == pytest.approx(4.4806e-3, rel=1e-4)
    assert cost.step_s(8, 8 * 500, 512) > cost.step_s(8, 8 * 500, 0) > cost.step_s(1, 0, 0)
    # 0.9 x 80 GiB - 8,030,261,248 x 2 B of weights - 2 GiB reserve = 59,101,405,184 B of KV;
    # a token holds 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072 B: 450,907.
    assert cost.kv_capacity_tokens == 450_907


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
    inner = LinearStepCost(base_ms=10, per_seq_ms=0.5, kv_capacity_tokens=4_096)
    scaled = ScaledStepCost(inner, 10.0)
    assert scaled.step_s(4, 400, 0) == pytest.approx(1.2e-3)  # (10 + 4 x 0.5) ms / 10
    assert scaled.kv_capacity_tokens == 4_096


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
