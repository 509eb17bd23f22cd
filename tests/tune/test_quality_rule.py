"""A study's quality tolerance: the rule (tune.quality's docstring, docs/TUNE.md "Only right
answers") on passes built by hand, the space file's `quality` block, and where a judged
trial shows."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from servelab.bench.quality.evaluate import evaluate_quality, reference_label
from servelab.bench.quality.probes import make_probes
from servelab.bench.quality.results import QualityPass, QualityResult
from servelab.core.errors import ConfigError
from servelab.report.document import Table
from servelab.report.sections.tuning import tuning_section
from servelab.tune.quality import judge_default, judge_trial
from servelab.tune.results import ObjectiveSpec, StudyResult, TrialRow
from servelab.tune.space import parse_space, with_quality_tolerance
from tests.conftest import SERVELAB
from tests.quality.helpers import N_PROBES, N_TOKENS, make_pass, reference_logprobs
from tests.tune.test_study import STORY

PROBES = make_probes(N_PROBES, seed=5)
RUN = "trials/000"


def _result(
    passes: list[QualityPass], reference: QualityResult | None = None, *, logprobs: bool = True
) -> QualityResult:
    return evaluate_quality(
        probes=PROBES,
        seed=5,
        engine="vllm",
        passes=passes,
        logprobs_available=logprobs,
        forced_method="prompt_logprobs" if logprobs else None,
        reference=reference,
        reference_run=RUN if reference is not None else None,
    )


def _default(*, forced_on: str = "before") -> QualityResult:
    lp = reference_logprobs()
    return _result(
        [make_pass("before", lp, forced_on=forced_on), make_pass("after", lp, forced_on=forced_on)]
    )


def _trial(
    reference: QualityResult,
    *,
    forced: np.ndarray | None = None,
    ids: Callable[[int], list[int]] | None = None,
    error: tuple[int, str] | None = None,
) -> QualityResult:
    """A trial's passes: its greedy `ids`, the default's answers scored as `forced`
    (None: no teacher forcing, as without logprobs)."""
    lp = reference_logprobs()
    own = "before" if forced is not None else "elsewhere"
    before = make_pass("before", lp, ids=ids, error=error, forced_on=own)
    if forced is not None:
        before.forced.append(make_pass("before", forced, forced_on=reference_label(RUN)).forced[0])
    after = make_pass("after", lp, ids=ids, forced_on=own)
    return _result([before, after], reference, logprobs=forced is not None)


def _diverging(probes: set[int], at: int = 3) -> Callable[[int], list[int]]:
    def ids(probe: int) -> list[int]:
        tokens = [100 + k for k in range(N_TOKENS)]
        if probe in probes:
            tokens[at:] = [900 + k for k in range(N_TOKENS - at)]
        return tokens

    return ids


def test_the_default_is_the_reference_unless_its_own_answers_are_broken() -> None:
    judged = judge_default(_default())
    assert judged.accepted and judged.reference_trial is None and judged.cell() == "reference"
    lp = reference_logprobs()
    broken = _result([make_pass("before", lp, error=(3, "nan_logprob")), make_pass("after", lp)])
    bad = judge_default(broken)
    assert not bad.accepted and bad.verdict == "broken"
    assert bad.reason == "quality broken: nan_logprob x1 (the reference pass itself)"
    missing = judge_default(None)
    assert not missing.accepted
    assert missing.reason == "quality not judged: the quality probe wrote no quality.json"


def test_the_same_answers_are_within_any_tolerance() -> None:
    reference = _default()
    judged = judge_trial(
        _trial(reference, forced=reference_logprobs()),
        reference,
        tolerance=0.0,
        reference_trial=0,
    )
    assert judged.accepted, judged.reason
    assert judged.verdict == "within_floor" and judged.primary_value == 0.0
    assert judged.reason.startswith("within tolerance 0 against trial 0: mean_abs_dlogprob 0 nats")
    assert judged.cell() == "within_floor 0 nats"


def test_drift_is_judged_by_its_lower_end_against_the_tolerance() -> None:
    """Every forced logprob moved by 0.01 nats: drift (the floor is 2^-10); a tolerance
    under 0.01 rejects it, one over it accepts it."""
    reference = _default()
    trial = _trial(reference, forced=reference_logprobs() + 0.01)
    tight = judge_trial(trial, reference, tolerance=0.005, reference_trial=0)
    assert tight.verdict == "drift" and not tight.accepted
    assert tight.interval_low is not None and tight.interval_low > 0.005
    assert tight.reason.startswith(
        "quality drift beyond tolerance 0.005 against trial 0: mean_abs_dlogprob 0.01 nats"
    )
    assert tight.cell() == "drift 0.01 nats"
    loose = judge_trial(trial, reference, tolerance=0.02, reference_trial=0)
    assert loose.verdict == "drift" and loose.accepted, loose.reason


def test_broken_is_infeasible_whatever_the_tolerance() -> None:
    reference = _default()
    trial = _trial(reference, forced=reference_logprobs(), error=(7, "reasoning_only"))
    judged = judge_trial(trial, reference, tolerance=1e9, reference_trial=0)
    assert not judged.accepted and judged.verdict == "broken"
    assert judged.reason == "quality broken against trial 0: reasoning_only x1 (its before pass)"
    assert judged.errors == {"reasoning_only": 1}


def test_answers_that_move_while_the_logprobs_do_not_are_rejected() -> None:
    """Rule 2: the default's answers scored exactly as the default scores them, yet every
    greedy answer departs at token 3 (a decode path or sampler that emits another token
    without reporting it): the library's verdict is drift by the greedy answers alone, and
    no tolerance in nats allows it."""
    reference = _default()
    trial = _trial(reference, forced=reference_logprobs(), ids=_diverging(set(range(N_PROBES))))
    judged = judge_trial(trial, reference, tolerance=1e9, reference_trial=0)
    assert judged.verdict == "drift" and judged.primary_value == 0.0
    assert judged.moved == ["divergence_share"] and judged.divergence_share == 1.0
    assert not judged.accepted and judged.cell() == "greedy drift 1 share"
    assert judged.reason.startswith(
        f"greedy answers drift against trial 0: {N_PROBES} of {N_PROBES} probes answer "
        "otherwise (divergence_share 1, lower end 1 over its floor 0): a decode path or "
        "sampler; its logprobs stay within the floor: mean_abs_dlogprob 0 nats"
    ), judged.reason
    # one probe of 32 departing is a near-tie the bootstrap's lower end does not call
    lone = _trial(reference, forced=reference_logprobs(), ids=_diverging({4}))
    assert judge_trial(lone, reference, tolerance=1.0, reference_trial=0).accepted


def test_numerics_within_the_tolerance_may_move_the_answers() -> None:
    """Rule 3 reads the primary: a logprob drift within the tolerance is accepted even where
    the greedy answers moved with it (a numerics change flips near-ties)."""
    reference = _default()
    trial = _trial(
        reference, forced=reference_logprobs() + 0.01, ids=_diverging(set(range(N_PROBES)))
    )
    judged = judge_trial(trial, reference, tolerance=0.02, reference_trial=0)
    assert judged.moved == ["mean_abs_dlogprob", "divergence_share"]
    assert judged.accepted and judged.cell() == "drift 0.01 nats", judged.reason
    assert not judge_trial(trial, reference, tolerance=0.005, reference_trial=0).accepted


def test_without_logprobs_the_tolerance_is_a_share_of_diverging_probes() -> None:
    reference = _default(forced_on="elsewhere")
    trial = _trial(reference, ids=_diverging(set(range(10))))
    tight = judge_trial(trial, reference, tolerance=0.05, reference_trial=0)
    assert tight.primary_metric == "divergence_share" and tight.verdict == "drift"
    assert not tight.accepted and "beyond tolerance 0.05" in tight.reason
    assert tight.cell() == "drift 0.312 share"
    loose = judge_trial(trial, reference, tolerance=0.5, reference_trial=0)
    assert loose.accepted, loose.reason


def test_a_trial_that_could_not_be_compared_is_not_accepted() -> None:
    reference = _default()
    alone = _result([make_pass("before", reference_logprobs())])  # no reference given
    judged = judge_trial(alone, reference, tolerance=1.0, reference_trial=0)
    assert not judged.accepted and judged.cell() == "not judged"
    assert judged.reason == "quality not judged: its answers were not compared with trial 0's"
    assert not judge_trial(None, reference, tolerance=1.0, reference_trial=0).accepted


DOCUMENT: dict[str, Any] = {
    "base": {"engine": "sim", "options": {"itl_ms": 4}},
    "space": {"options.itl_ms": [1]},
    "load": {"concurrency": [2]},
}


def test_the_space_file_quality_block() -> None:
    space = parse_space(
        {**DOCUMENT, "quality": {"tolerance": 0.01, "prompts": 8}},
        source="s.yaml",
        text="",
        default_name="q",
    )
    assert space.quality is not None
    assert (space.quality.tolerance, space.quality.prompts, space.quality.seed) == (0.01, 8, 39)
    assert parse_space(DOCUMENT, source="s.yaml", text="", default_name="q").quality is None


@pytest.mark.parametrize(
    ("block", "line"),
    [
        (
            {"tolerance": -0.1},
            "s.yaml: quality.tolerance: a number from 0, in nats of mean |Δlogprob| (a share "
            "of probes where the engine gives no logprobs)",
        ),
        (
            {"tolerance": float("inf")},
            "s.yaml: quality.tolerance: a number from 0, in nats of mean |Δlogprob| (a share "
            "of probes where the engine gives no logprobs)",
        ),
        ({"prompts": 8}, "s.yaml: quality needs a tolerance"),
        (0.01, "s.yaml: quality needs a tolerance"),
        (
            {"tolerance": 0.01, "prompts": 2},
            "s.yaml: quality.prompts: Input should be greater than or equal to 3",
        ),
        ({"tolerance": 0.01, "prompt": 8}, "s.yaml: unknown key 'prompt' in quality"),
    ],
)
def test_a_bad_quality_block_is_one_line(block: Any, line: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_space({**DOCUMENT, "quality": block}, source="s.yaml", text="", default_name="q")
    assert str(caught.value).splitlines() == [str(caught.value)]
    assert str(caught.value).startswith(line)


def test_the_flag_sets_the_tolerance_in_the_stored_question() -> None:
    space = parse_space(
        {**DOCUMENT, "quality": {"tolerance": 0.01, "prompts": 8}},
        source="s.yaml",
        text="",
        default_name="q",
    )
    flagged = with_quality_tolerance(space, 0.25)
    assert flagged.quality is not None and flagged.quality.tolerance == 0.25
    assert flagged.quality.prompts == 8
    assert flagged.document["quality"] == {"tolerance": 0.25, "prompts": 8}
    with pytest.raises(ConfigError, match=r"^--quality-tolerance: a number from 0"):
        with_quality_tolerance(space, float("nan"))


def test_a_negative_tolerance_flag_is_one_line_and_exit_2(tmp_path: Path) -> None:
    space = tmp_path / "story.yaml"
    space.write_text(yaml.safe_dump(STORY))
    out = tmp_path / "study"
    result = subprocess.run(
        [*SERVELAB, "tune", "run", str(space), "--quality-tolerance", "-1", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --quality-tolerance: a number from 0, in nats of mean |Δlogprob| (a share of "
        "probes where the engine gives no logprobs)"
    ]
    assert not (out / "trials").exists()


def test_the_report_shows_each_trials_drift_beside_its_speed() -> None:
    reference = _default()
    drifted = judge_trial(
        _trial(reference, forced=reference_logprobs() + 0.01),
        reference,
        tolerance=0.005,
        reference_trial=0,
    )
    study = StudyResult(
        name="q",
        storage="sqlite:///study.db",
        engine="sim",
        workload="random 32 in / 16 out",
        objectives=[
            ObjectiveSpec(metric="output_throughput", at=2, direction="maximize", unit="tok/s")
        ],
        quality_tolerance=0.005,
        sampler="grid",
        trials=[
            TrialRow(
                number=0,
                state="complete",
                role="default",
                params={"options.itl_ms": 4},
                values=[100.0],
                feasible=True,
                quality=judge_default(reference),
            ),
            TrialRow(
                number=1,
                state="complete",
                role="search",
                params={"options.itl_ms": 1},
                values=[400.0],
                feasible=False,
                reason=drifted.reason,
                quality=drifted,
            ),
        ],
        best=[0],
        default_trial=0,
    )
    section = tuning_section(study)
    trials = next(s for s in section.subsections if s.key == "tuning-trials")
    table = next(b for b in trials.blocks if isinstance(b, Table))
    column = table.header.index("quality vs default")
    assert table.header[column - 1] == "output_throughput at 2 (tok/s)"
    assert [row[column] for row in table.rows] == ["reference", "drift 0.01 nats"]
    question = next(s for s in section.subsections if s.key == "tuning-question")
    assert any("tolerance of 0.005" in getattr(b, "text", "") for b in question.blocks)


def test_an_output_fault_in_any_pass_is_infeasible() -> None:
    """The configuration comparison holds only the before pass; a fault in the after pass
    still rejects the trial, and the default's own after pass rejects the default."""
    reference = _default()
    trial = _trial(reference, forced=reference_logprobs())
    after = next(p for p in trial.passes if p.name == "after")
    after.errors = {"not_greedy": 2}
    trial.errors = {"not_greedy": 2}
    assert next(c for c in trial.comparisons if c.kind == "configuration").verdict != "broken"
    judged = judge_trial(trial, reference, tolerance=1e9, reference_trial=0)
    assert not judged.accepted and judged.verdict == "broken" and judged.cell() == "broken"
    assert judged.reason == "quality broken against trial 0: not_greedy x2 (its after pass)"
    lp = reference_logprobs()
    default = _result([make_pass("before", lp), make_pass("after", lp, error=(1, "short_stream"))])
    bad = judge_default(default)
    assert not bad.accepted
    assert bad.reason == "quality broken: short_stream x1 (the reference trial's after pass)"


def test_request_failures_alone_do_not_reject_a_trial() -> None:
    reference = _default()
    trial = _trial(reference, forced=reference_logprobs(), error=(7, "http"))
    judged = judge_trial(trial, reference, tolerance=0.0, reference_trial=0)
    assert judged.accepted, judged.reason
    assert judged.verdict == "within_floor" and judged.errors == {"http": 1}
    assert judged.reason.endswith(
        "; 1 of 32 probes' requests failed in its passes (http x1): left out of the comparisons"
    )
    lp = reference_logprobs()
    default = judge_default(
        _result([make_pass("before", lp, error=(2, "transport")), make_pass("after", lp)])
    )
    assert default.accepted and "transport x1" in default.reason


def test_a_default_whose_every_request_failed_is_not_judged() -> None:
    lp = reference_logprobs(n_probes=1)
    result = evaluate_quality(
        probes=make_probes(1, seed=5),
        seed=5,
        engine="vllm",
        passes=[make_pass("before", lp, error=(0, "http"))],
        logprobs_available=True,
        forced_method="prompt_logprobs",
    )
    judged = judge_default(result)
    assert not judged.accepted
    assert judged.reason == "quality not judged: every request of its before pass failed (http x1)"
