"""Comparisons and the bootstrap verdict (the rule in verdict.py's docstring)."""

from __future__ import annotations

import numpy as np
import pytest

from servelab.bench.quality.compare import compare_passes
from servelab.bench.quality.evaluate import evaluate_quality, reference_label
from servelab.bench.quality.probes import make_probes
from servelab.bench.quality.verdict import (
    EPSILON_MEAN_ABS_DLOGPROB_NATS,
    bootstrap_interval,
    judge,
)
from tests.quality.helpers import N_PROBES, N_TOKENS, make_pass, reference_logprobs

BF16_UNIT_ROUNDOFF = 2.0**-9


def _judge(before, other, **kwargs):
    return judge(
        compare_passes(before, other),
        kind="batch_invariance",
        reference="before",
        candidate=other.name,
        **kwargs,
    )


def test_identical_passes_are_within_floor() -> None:
    lp = reference_logprobs()
    result = _judge(make_pass("before", lp), make_pass("after", lp))
    assert result.verdict == "within_floor"
    assert result.primary_metric == "mean_abs_dlogprob"
    assert result.primary_value == 0.0
    assert result.floor == EPSILON_MEAN_ABS_DLOGPROB_NATS and result.floor_source == "epsilon"
    m = result.metrics
    assert m.probes == N_PROBES and m.forced_tokens == N_PROBES * N_TOKENS
    assert m.exact_match_rate == 1.0 and m.divergence_share == 0.0
    assert m.top1_agreement == 1.0 and m.positional_agreement == 1.0
    assert m.median_first_divergence == N_TOKENS
    assert result.diff == []


def test_bf16_sized_rounding_on_every_probe_is_drift() -> None:
    """Each logprob moved by one bf16 rounding of itself: what a change of dtype does."""
    lp = reference_logprobs()
    rng = np.random.default_rng(2)
    moved = lp * (1 + BF16_UNIT_ROUNDOFF * rng.choice([-1.0, 1.0], size=lp.shape))
    result = _judge(make_pass("before", lp), make_pass("loaded", moved))
    assert result.verdict == "drift", result.reason
    assert result.interval_low > result.floor
    assert "exceeds the floor" in result.reason
    assert result.moved == ["mean_abs_dlogprob"] and not result.answers_moved_alone


def test_float32_sized_noise_is_within_floor() -> None:
    lp = reference_logprobs()
    rng = np.random.default_rng(3)
    moved = lp * (1 + 2.0**-18 * rng.standard_normal(lp.shape))
    assert _judge(make_pass("before", lp), make_pass("after", moved)).verdict == "within_floor"


def test_one_probe_moving_a_lot_is_not_drift() -> None:
    """The bootstrap: a difference carried by one probe of 32 has a lower end near 0."""
    lp = reference_logprobs()
    moved = lp.copy()
    moved[5] += 0.5
    result = _judge(make_pass("before", lp), make_pass("loaded", moved))
    assert result.primary_value > EPSILON_MEAN_ABS_DLOGPROB_NATS
    assert result.verdict == "within_floor", result.reason


def test_measured_self_difference_raises_the_floor() -> None:
    lp = reference_logprobs()
    shifted = lp + 0.01
    before = make_pass("before", lp)
    plain = _judge(before, make_pass("loaded", shifted))
    assert plain.verdict == "drift"
    floored = _judge(
        before, make_pass("loaded", shifted), self_differences=[{"mean_abs_dlogprob": 0.02}]
    )
    assert floored.floor == 0.02 and floored.floor_source == "measured"
    assert floored.verdict == "within_floor"


@pytest.mark.parametrize(
    "kind", ["nan_logprob", "not_greedy", "reasoning_only", "no_finish_reason", "short_stream"]
)
def test_one_output_fault_is_broken_and_named(kind: str) -> None:
    lp = reference_logprobs()
    result = _judge(make_pass("before", lp), make_pass("loaded", lp, error=(7, kind)))
    assert result.verdict == "broken" and result.moved == []
    assert result.errors == {kind: 1}
    assert kind in result.reason
    assert result.metrics.probes == N_PROBES - 1


def _diverging_ids(diverging: set[int], at: int):
    def ids(probe: int) -> list[int]:
        base = [100 + k for k in range(N_TOKENS)]
        if probe in diverging:
            base[at:] = [900 + k for k in range(N_TOKENS - at)]
        return base

    return ids


def test_without_forced_logprobs_first_divergence_decides() -> None:
    lp = reference_logprobs()
    before = make_pass("before", lp, forced_on="elsewhere")
    many = make_pass("after", lp, forced_on="elsewhere", ids=_diverging_ids(set(range(10)), 3))
    result = judge(
        compare_passes(before, many), kind="determinism", reference="before", candidate="after"
    )
    assert result.primary_metric == "divergence_share"
    assert result.moved == ["divergence_share"] and not result.answers_moved_alone
    assert result.divergence_interval_low is None and result.divergence_floor is None
    assert result.metrics.divergence_share == pytest.approx(10 / 32)
    assert result.metrics.exact_match_rate == pytest.approx(22 / 32)
    assert result.verdict == "drift"
    assert len(result.diff) == 5
    first = result.diff[0]
    assert first.position == 3
    assert first.context == [" w100", " w101", " w102"]
    assert first.reference[:2] == [" w103", " w104"] and first.candidate[:2] == [" w900", " w901"]
    # the median of 10 probes diverging at 3 and 22 that never do (16 tokens)
    assert result.metrics.median_first_divergence == 16.0
    one = make_pass("after", lp, forced_on="elsewhere", ids=_diverging_ids({0}, 3))
    lone = judge(
        compare_passes(before, one), kind="determinism", reference="before", candidate="after"
    )
    assert lone.verdict == "within_floor", lone.reason


def test_answers_that_move_while_the_scores_do_not_are_drift() -> None:
    """The second route (rule 4): every forced logprob as the reference's, yet every greedy
    answer departs at token 3, as a decode-only kernel or a sampler fault leaves them."""
    lp = reference_logprobs()
    everyone = _diverging_ids(set(range(N_PROBES)), 3)
    result = _judge(make_pass("before", lp), make_pass("after", lp, ids=everyone))
    assert result.primary_metric == "mean_abs_dlogprob" and result.primary_value == 0.0
    assert result.interval_low <= result.floor  # the scores did not move
    assert result.verdict == "drift" and result.moved == ["divergence_share"]
    assert result.answers_moved_alone
    assert (result.divergence_interval_low, result.divergence_floor) == (1.0, 0.0)
    assert result.reason == (
        "greedy answers moved while teacher-forced scores did not: decode path or sampler; "
        "divergence_share 1 (bootstrap lower end 1) against floor 0; mean_abs_dlogprob 0 "
        "(bootstrap lower end 0) against floor 0.000977 (epsilon): within the floor"
    )
    assert len(result.diff) == 5 and all(d.position == 3 for d in result.diff)


def test_the_divergence_route_has_its_own_floor() -> None:
    """One diverging probe of 32 is a near-tie the lower end does not call; ten are drift,
    unless the runs' measured self-difference of the share is as large."""
    lp = reference_logprobs()
    before = make_pass("before", lp)
    lone = _judge(before, make_pass("loaded", lp, ids=_diverging_ids({0}, 3)))
    assert lone.verdict == "within_floor" and lone.moved == [], lone.reason
    assert lone.divergence_interval_low == 0.0
    ten = make_pass("loaded", lp, ids=_diverging_ids(set(range(10)), 3))
    assert _judge(before, ten).verdict == "drift"
    floored = _judge(before, ten, self_differences=[{"divergence_share": 0.5}])
    assert floored.divergence_floor == 0.5 and floored.floor == EPSILON_MEAN_ABS_DLOGPROB_NATS
    assert floored.verdict == "within_floor", floored.reason


def test_scores_and_answers_moving_together_name_both() -> None:
    lp = reference_logprobs()
    moved = make_pass("loaded", lp + 0.01, ids=_diverging_ids(set(range(N_PROBES)), 3))
    result = _judge(make_pass("before", lp), moved)
    assert result.verdict == "drift" and not result.answers_moved_alone
    assert result.moved == ["mean_abs_dlogprob", "divergence_share"]
    assert "the lower end exceeds the floor" in result.reason
    assert result.reason.endswith(
        "; greedy answers moved too: divergence_share 1 (bootstrap lower end 1) against floor 0"
    )


def test_bootstrap_is_reproducible_and_ordered() -> None:
    lp = reference_logprobs()
    comparison = compare_passes(make_pass("before", lp), make_pass("after", lp + 0.01))
    first = bootstrap_interval(comparison, "mean_abs_dlogprob")
    assert first == bootstrap_interval(comparison, "mean_abs_dlogprob")
    assert first[0] <= 0.01 + 1e-12 <= first[1] + 1e-9


def test_evaluate_makes_the_three_comparisons() -> None:
    probes = make_probes(N_PROBES, seed=5)
    lp = reference_logprobs()
    ref_before = make_pass("before", lp)
    ref_after = make_pass("after", lp)
    reference = evaluate_quality(
        probes=probes,
        seed=5,
        engine="vllm",
        passes=[ref_before, ref_after],
        logprobs_available=True,
        forced_method="prompt_logprobs",
    )
    assert [c.kind for c in reference.comparisons] == ["determinism"]
    label = reference_label("runA")
    before = make_pass("before", lp)
    before.forced.append(make_pass("before", lp + 0.01, forced_on=label).forced[0])
    result = evaluate_quality(
        probes=probes,
        seed=5,
        engine="vllm",
        passes=[before, make_pass("after", lp), make_pass("loaded", lp, error=(2, "nan_logprob"))],
        logprobs_available=True,
        forced_method="prompt_logprobs",
        reference=reference,
        reference_run="runA",
    )
    verdicts = {c.kind: c.verdict for c in result.comparisons}
    assert verdicts == {
        "determinism": "within_floor",
        "batch_invariance": "broken",
        "configuration": "drift",
    }
    config = result.comparisons[2]
    assert config.reference == "runA:before"
    assert config.primary_value == pytest.approx(0.01)
    assert result.errors == {"nan_logprob": 1}
    assert result.probe_s == pytest.approx(4.5)


def test_evaluate_refuses_another_probe_set() -> None:
    from servelab.core.errors import ConfigError

    lp = reference_logprobs()
    reference = evaluate_quality(
        probes=make_probes(N_PROBES, seed=5),
        seed=5,
        engine="vllm",
        passes=[make_pass("before", lp)],
        logprobs_available=True,
    )
    with pytest.raises(ConfigError, match="another probe set"):
        evaluate_quality(
            probes=make_probes(N_PROBES, seed=6),
            seed=6,
            engine="vllm",
            passes=[make_pass("before", lp)],
            logprobs_available=True,
            reference=reference,
            reference_run="runA",
        )
