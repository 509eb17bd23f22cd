"""Step markers by the names vLLM and SGLang give their step annotations."""

from __future__ import annotations

import pytest

from servelab.core.errors import ConfigError
from servelab.trace.steps import StepCounter


def _count(names, custom=None):
    counter = StepCounter(custom)
    for name in names:
        counter.see(name, 10.0)
    return counter.result()


def test_vllm_context_and_generation_requests():
    # vllm/v1/worker/gpu_worker.py, Worker.annotate_profile (the default annotation).
    steps = _count(
        [
            "execute_context_2(64)_generation_0(0)",
            "execute_context_0(0)_generation_2(2)",
            "execute_context_0(0)_generation_2(2)",
            "execute_context_1(16)_generation_1(1)",
            "execute_context_0(0)_generation_0(0)",
            "gpu_model_runner: forward",
        ]
    )
    assert steps is not None
    assert (steps.source, steps.count) == ("vllm", 5)
    assert (steps.prefill, steps.decode, steps.mixed, steps.other) == (1, 2, 1, 1)
    assert steps.mean_us == 10.0 and steps.decode_mean_us == 10.0


def test_vllm_detailed_annotation():
    # With profiler_config.detailed_trace_annotation: total tokens first, roofline terms.
    steps = _count(
        [
            "execute_66_context_2(sq64sk64sqsq2048sqsk2048)_generation_2(sq2sk70sqsq2sqsk70)",
            "execute_2_context_0(sq0sk0sqsq0sqsk0)_generation_2(sq2sk72sqsq2sqsk72)",
        ]
    )
    assert steps is not None
    assert (steps.mixed, steps.decode) == (1, 1)


def test_sglang_forward_modes_and_draft_steps():
    # python/sglang/srt/utils/profile_utils.py, build_step_span_name.
    steps = _count(
        [
            "step[EXTEND bs=4 toks=512]",
            "step[DECODE bs=4]",
            "step[DECODE bs=4 g_sq=4 g_sqsq=4 g_sqsk=900 g_sk=900]",
            "step[TARGET_VERIFY bs=4]",
            "step[MIXED bs=5]",
            "step[IDLE bs=0]",
            "draft step[DECODE bs=4]",
        ]
    )
    assert steps is not None
    assert (steps.source, steps.count) == ("sglang", 6)
    assert (steps.prefill, steps.decode, steps.mixed, steps.other) == (1, 3, 1, 1)


def test_engine_markers_are_preferred_to_profiler_steps():
    names = ["ProfilerStep#3", "execute_context_0(0)_generation_1(1)", "ProfilerStep#4"]
    steps = _count(names)
    assert steps is not None and (steps.source, steps.count) == ("vllm", 1)
    steps = _count(["ProfilerStep#3", "ProfilerStep#4"])
    assert steps is not None and (steps.source, steps.count, steps.other) == ("profiler", 2, 2)


def test_a_custom_marker_comes_first_and_its_name_tells_the_kind():
    steps = _count(
        ["decode_step", "decode_step", "prefill_step", "ProfilerStep#1"], custom=r"_step$"
    )
    assert steps is not None
    assert (steps.source, steps.count, steps.decode, steps.prefill) == ("custom", 3, 2, 1)


def test_no_marker_and_a_bad_pattern():
    assert _count(["aten::mm", "execute_model", "step"]) is None
    with pytest.raises(ConfigError, match="not a regular expression"):
        StepCounter("(")
