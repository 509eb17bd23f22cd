"""The quality probe on the real vLLM: the same configuration twice is within its floor,
with logprobs and teacher forcing through `prompt_logprobs`. The other numerics (the same
weights in bfloat16) are checked by tests/vllm/test_teardown.py's launch, against the
first run here, so the probe adds no launch."""

from __future__ import annotations

from servelab.bench.quality.results import QualityResult, load_quality
from servelab.bench.session import BenchOutcome


def _quality(outcome: BenchOutcome) -> QualityResult:
    result = load_quality(outcome.run_dir)
    assert result is not None, f"no quality.json in {outcome.run_dir}"
    return result


def test_the_same_configuration_twice_is_within_its_floor(
    vllm_probed_twice: tuple[BenchOutcome, BenchOutcome],
):
    first, second = (_quality(outcome) for outcome in vllm_probed_twice)
    assert first.logprobs_available and second.logprobs_available, second.logprobs_reason
    assert second.forced_method == "prompt_logprobs", second.forced_method
    assert second.errors == {}, second.errors
    verdicts = {c.kind: c for c in second.comparisons}
    configuration = verdicts["configuration"]
    assert configuration.primary_metric == "mean_abs_dlogprob", configuration
    assert configuration.verdict == "within_floor", configuration.reason
    assert second.reference_run == str(vllm_probed_twice[0].run_dir)
    summary = vllm_probed_twice[1].summary
    assert summary.quality is not None and summary.quality.verdicts["configuration"] == (
        "within_floor"
    )


def test_the_loaded_pass_ran_beside_the_level_and_outside_its_metrics(
    vllm_probed_twice: tuple[BenchOutcome, BenchOutcome],
):
    outcome = vllm_probed_twice[0]
    result = _quality(outcome)
    level = outcome.summary.levels[-1]
    assert result.loaded_level is not None
    assert level.quality_probes == len(result.passes[0].readings)
    assert level.completed == 6, level.completed
