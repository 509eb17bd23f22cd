"""The quality probe in diagnose: accuracy_warning cites the measured drift, and the probe's
verdicts are findings with the engine's own remedy (rules/quality.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servelab.bench.quality.evaluate import evaluate_quality, reference_label
from servelab.bench.quality.probes import make_probes
from servelab.bench.quality.results import QualityResult, write_quality
from servelab.diagnose.findings import ActionTarget, Finding, FindingKind, Severity
from servelab.diagnose.rules.quality import (
    SGLANG_DETERMINISTIC_FLAG,
    VLLM_BATCH_INVARIANT_ENV,
)
from tests.diagnose.builders import diagnose, level, scan, summary, write_run
from tests.diagnose.quality_runs import REFERENCE_RUN, quality_result
from tests.quality.helpers import make_pass, reference_logprobs

DEEPGEMM = (
    "[2026-01-05 10:00:00] DeepGemm is enabled but the scale_fmt of checkpoint is not ue8m0. "
    "This might cause accuracy degradation on Blackwell."
)


def _run(
    folder: Path,
    quality: QualityResult | None,
    *,
    engine: str = "vllm",
    warned: bool = False,
    launched: dict[str, Any] | None = None,
) -> Path:
    run = summary(
        [level(0, 1, total_tps=100, tpot_ms=10, ttft_ms=20)],
        target_engine=engine,
        engine=launched,
    )
    events = scan("sglang", [DEEPGEMM]) if warned else None
    write_run(folder, run, events=events)
    if quality is not None:
        write_quality(folder, quality)
    return folder


def _one(findings: list[Finding], kind: FindingKind) -> Finding:
    found = [f for f in findings if f.kind is kind]
    assert len(found) == 1, [f.kind for f in findings]
    return found[0]


# --- accuracy_warning -------------------------------------------------------------------


def test_without_the_probe_the_warning_says_quality_was_not_measured(tmp_path: Path):
    found = _one(diagnose(_run(tmp_path, None, warned=True)).findings, FindingKind.ACCURACY_WARNING)
    assert found.title == "the engine warns about its output: deepgemm scale format"
    assert found.missing == ["output quality was not measured (the run was made without --quality)"]
    assert any("servelab bench --quality" in a.text for a in found.actions)


def test_the_warning_cites_the_drift_against_the_reference(tmp_path: Path):
    result = quality_result(moved={"configuration"}, reference=True)
    found = _one(
        diagnose(_run(tmp_path, result, warned=True)).findings, FindingKind.ACCURACY_WARNING
    )
    config = next(c for c in result.comparisons if c.kind == "configuration")
    assert found.title.startswith(
        "the engine warns about its output: deepgemm scale format, and against the reference "
        f"run {REFERENCE_RUN}, the outputs moved by mean |Δlogprob| {config.primary_value:.3g}"
    )
    assert found.title.endswith(": drift")
    assert found.severity is Severity.WARNING
    assert not found.missing
    sources = {e.source for e in found.evidence if e.supports}
    assert f"quality.json configuration ({REFERENCE_RUN}:before vs before)" in sources
    floor = next(e for e in found.evidence if e.what.startswith("floor"))
    assert floor.value == pytest.approx(config.floor, rel=1e-3)
    assert config.reason in found.explanation


def test_a_warning_whose_outputs_did_not_move_is_information(tmp_path: Path):
    result = quality_result(reference=True)
    found = _one(
        diagnose(_run(tmp_path, result, warned=True)).findings, FindingKind.ACCURACY_WARNING
    )
    assert "the outputs did not move beyond the floor" in found.title
    assert found.title.endswith(": within_floor")
    assert found.severity is Severity.INFO
    quality = [e for e in found.evidence if e.source.startswith("quality.json")]
    assert quality and not any(e.supports for e in quality)


def test_without_a_reference_the_warning_cites_the_run_own_comparison_and_asks_for_one(
    tmp_path: Path,
):
    result = quality_result(moved={"batch_invariance"})
    found = _one(
        diagnose(_run(tmp_path, result, warned=True)).findings, FindingKind.ACCURACY_WARNING
    )
    assert "in the batch invariance comparison, the outputs moved by" in found.title
    assert found.severity is Severity.WARNING
    assert any("--quality-ref" in m for m in found.missing)
    assert any("--quality-ref RUN" in a.text for a in found.actions)


def test_a_warning_with_broken_outputs_is_critical(tmp_path: Path):
    result = quality_result(error=("after", "nan_logprob"))
    found = _one(
        diagnose(_run(tmp_path, result, warned=True)).findings, FindingKind.ACCURACY_WARNING
    )
    assert "the outputs broke (nan_logprob x1): broken" in found.title
    assert found.severity is Severity.CRITICAL


# --- the probe's own findings -----------------------------------------------------------


def test_outputs_within_the_floor_are_no_finding_and_the_source_is_listed(tmp_path: Path):
    diagnosis = diagnose(_run(tmp_path / "probed", quality_result(reference=True)))
    quality_kinds = {
        FindingKind.BROKEN_OUTPUT,
        FindingKind.NOT_DETERMINISTIC,
        FindingKind.NOT_BATCH_INVARIANT,
        FindingKind.QUALITY_DRIFT,
    }
    assert not quality_kinds & {f.kind for f in diagnosis.findings}
    assert diagnosis.sources["quality probe"].available
    bare = diagnose(_run(tmp_path / "bare", None)).sources["quality probe"]
    assert not bare.available and "--quality" in bare.detail


def test_a_non_deterministic_vllm_gets_its_batch_invariant_mode(tmp_path: Path):
    result = quality_result(moved={"determinism"})
    found = _one(diagnose(_run(tmp_path, result)).findings, FindingKind.NOT_DETERMINISTIC)
    assert found.severity is Severity.WARNING and found.confidence == 0.95
    assert "not deterministic" in found.title
    (action,) = found.actions
    assert action.target is ActionTarget.ENGINE and action.engine == "vllm"
    assert action.knob == f"env.{VLLM_BATCH_INVARIANT_ENV}" and action.value == "1"
    assert action.flags == ["VLLM_BATCH_INVARIANT=1"]
    whats = [e.what for e in found.evidence]
    assert "mean |Δlogprob| (drift)" in whats and "floor (epsilon)" in whats
    assert any(w.startswith("bootstrap interval") for w in whats)


def test_a_loaded_pass_partly_unloaded_is_said_to_understate(tmp_path: Path):
    result = quality_result(moved={"batch_invariance"}).model_copy(
        update={"loaded_level": 2, "loaded_beside": "level", "loaded_overlap_share": 0.75}
    )
    found = _one(diagnose(_run(tmp_path, result)).findings, FindingKind.NOT_BATCH_INVARIANT)
    assert "beside level 2 answered otherwise" in found.explanation
    assert found.missing == [
        "only 75% of the loaded pass ran beside the load: the rest answered unloaded, so "
        "the drift under load is if anything understated"
    ]


def test_vllm_batch_invariance_is_not_offered_on_the_cpu(tmp_path: Path):
    launched = {"engine": "vllm", "spec": "engine: vllm\nmodel: tiny\ndevice: cpu\n"}
    result = quality_result(moved={"batch_invariance"})
    found = _one(
        diagnose(_run(tmp_path, result, launched=launched)).findings,
        FindingKind.NOT_BATCH_INVARIANT,
    )
    (action,) = found.actions
    assert not action.available and "not possible on the CPU" in action.text


def test_a_vllm_already_batch_invariant_is_told_so(tmp_path: Path):
    spec = f"engine: vllm\nmodel: tiny\nenv:\n  {VLLM_BATCH_INVARIANT_ENV}: '1'\n"
    result = quality_result(moved={"batch_invariance"})
    found = _one(
        diagnose(_run(tmp_path, result, launched={"engine": "vllm", "spec": spec})).findings,
        FindingKind.NOT_BATCH_INVARIANT,
    )
    (action,) = found.actions
    assert "deterministic mode was on (VLLM_BATCH_INVARIANT=1)" in action.text
    assert action.knob is None


def test_sglang_gets_its_deterministic_flag_and_a_backend_it_accepts(tmp_path: Path):
    command = ["python", "-m", "sglang.launch_server", "--attention-backend", "trtllm_mha"]
    launched = {"engine": "sglang", "command": command}
    result = quality_result(moved={"batch_invariance"})
    found = _one(
        diagnose(_run(tmp_path, result, engine="sglang", launched=launched)).findings,
        FindingKind.NOT_BATCH_INVARIANT,
    )
    (action,) = found.actions
    assert action.engine == "sglang"
    assert action.flags == [SGLANG_DETERMINISTIC_FLAG, "--attention-backend", "triton"]
    assert "trtllm_mha is refused" in action.text


def test_sglang_with_a_deterministic_backend_needs_only_the_flag(tmp_path: Path):
    launched = {"engine": "sglang", "command": ["sglang", "--attention-backend", "fa3"]}
    found = _one(
        diagnose(
            _run(
                tmp_path, quality_result(moved={"determinism"}), engine="sglang", launched=launched
            )
        ).findings,
        FindingKind.NOT_DETERMINISTIC,
    )
    assert found.actions[0].flags == [SGLANG_DETERMINISTIC_FLAG]


def test_sglang_already_deterministic_is_told_so(tmp_path: Path):
    launched = {"engine": "sglang", "command": ["sglang", SGLANG_DETERMINISTIC_FLAG]}
    found = _one(
        diagnose(
            _run(
                tmp_path, quality_result(moved={"determinism"}), engine="sglang", launched=launched
            )
        ).findings,
        FindingKind.NOT_DETERMINISTIC,
    )
    assert "was on (--enable-deterministic-inference)" in found.actions[0].text


def test_an_engine_without_such_a_mode_says_so(tmp_path: Path):
    found = _one(
        diagnose(_run(tmp_path, quality_result(moved={"determinism"}), engine="embedded")).findings,
        FindingKind.NOT_DETERMINISTIC,
    )
    (action,) = found.actions
    assert not action.available
    assert VLLM_BATCH_INVARIANT_ENV in action.text and SGLANG_DETERMINISTIC_FLAG in action.text


def test_drift_from_the_reference_run_is_quality_drift(tmp_path: Path):
    result = quality_result(moved={"configuration"}, reference=True, diverge=True)
    found = _one(diagnose(_run(tmp_path, result)).findings, FindingKind.QUALITY_DRIFT)
    assert found.title == f"the outputs drifted from the reference run {REFERENCE_RUN}"
    diff = next(e for e in found.evidence if e.what.startswith("first divergence"))
    worst = next(c for c in result.comparisons if c.kind == "configuration").diff[0]
    assert diff.what == f"first divergence of {worst.probe_id} at token 3"
    assert diff.value == "' w103 w104 w105 w106 w107 w108 w109 w110' -> " + (
        "' w900 w901 w902 w903 w904 w905 w906 w907'"
    )


def test_without_logprobs_the_verdict_rests_on_divergence_and_says_so(tmp_path: Path):
    result = quality_result(moved={"batch_invariance"}, logprobs=False, diverge=True)
    found = _one(diagnose(_run(tmp_path, result)).findings, FindingKind.NOT_BATCH_INVARIANT)
    assert found.evidence[0].what == "share of probes whose answer diverged (drift)"
    assert found.evidence[0].value == pytest.approx(10 / 32)
    assert found.missing and "no logprobs from the engine (HTTP 400" in found.missing[0]


def test_outputs_that_are_not_answers_are_critical_and_named_by_kind(tmp_path: Path):
    result = quality_result(error=("loaded", "reasoning_only"))
    diagnosis = diagnose(_run(tmp_path, result))
    found = _one(diagnosis.findings, FindingKind.BROKEN_OUTPUT)
    assert found.severity is Severity.CRITICAL
    assert found.title == "outputs that are not answers: reasoning_only x1"
    counted = next(e for e in found.evidence if e.what.startswith("quality errors"))
    assert counted.what == "quality errors reasoning_only in pass loaded" and counted.value == 1
    assert "reasoning_content" in found.actions[0].text
    assert diagnosis.findings[0].kind is FindingKind.BROKEN_OUTPUT


def test_request_failures_are_a_warning_not_broken_output(tmp_path: Path):
    result = quality_result(error=("loaded", "http"))
    assert {c.kind: c.verdict for c in result.comparisons}["batch_invariance"] == "within_floor"
    findings = diagnose(_run(tmp_path, result)).findings
    assert not [f for f in findings if f.kind is FindingKind.BROKEN_OUTPUT]
    found = _one(findings, FindingKind.QUALITY_REQUESTS_FAILED)
    assert found.severity is Severity.WARNING
    assert found.title == "quality probe requests failed: http x1"
    left = next(e for e in found.evidence if e.what == "probes left out of the comparison")
    assert left.value == 1 and "batch_invariance" in left.source


def test_an_unknown_error_kind_is_broken_with_generic_advice(tmp_path: Path):
    result = quality_result(error=("after", "reasoning_only"))
    after = next(p for p in result.passes if p.name == "after")
    after.errors = {"kind_from_the_future": 1}
    result.errors = {"kind_from_the_future": 1}
    found = _one(diagnose(_run(tmp_path, result)).findings, FindingKind.BROKEN_OUTPUT)
    assert found.title == "outputs that are not answers: kind_from_the_future x1"
    assert "does not know" in found.actions[0].text


def test_faults_of_the_reference_run_are_named_as_its_own(tmp_path: Path):
    """A configuration comparison counts the reference run's errors too: this run's
    answers are fine, so the finding names the reference run and is not critical."""
    lp = reference_logprobs()
    probes = make_probes(32, seed=39)
    theirs = evaluate_quality(
        probes=probes,
        seed=39,
        engine="vllm",
        passes=[make_pass("before", lp, error=(3, "nan_logprob")), make_pass("after", lp)],
        logprobs_available=True,
        forced_method="prompt_logprobs",
    )
    before = make_pass("before", lp)
    before.forced.append(
        make_pass("before", lp, forced_on=reference_label(REFERENCE_RUN)).forced[0]
    )
    result = evaluate_quality(
        probes=probes,
        seed=39,
        engine="vllm",
        passes=[before, make_pass("after", lp)],
        logprobs_available=True,
        forced_method="prompt_logprobs",
        reference=theirs,
        reference_run=REFERENCE_RUN,
    )
    assert {c.kind: c.verdict for c in result.comparisons} == {
        "determinism": "within_floor",
        "configuration": "broken",
    }
    found = _one(diagnose(_run(tmp_path, result)).findings, FindingKind.BROKEN_OUTPUT)
    assert found.severity is Severity.WARNING
    assert found.title == (
        f"the configuration comparison is broken by the reference run {REFERENCE_RUN}'s "
        "outputs: nan_logprob x1"
    )
    assert REFERENCE_RUN in found.actions[0].text
