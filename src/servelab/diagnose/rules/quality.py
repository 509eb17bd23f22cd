"""The quality probe's verdicts as findings: outputs that are not answers, an engine that
is not deterministic or not batch-invariant, outputs that drifted from a reference run.

Every finding rests on the probe's own verdict (quality.json; the floor and the bootstrap
rule in `servelab.bench.quality.verdict`): a comparison `drift` is a finding; output
faults (results.OUTPUT_FAULTS) in this run's passes, or a comparison `broken` (a
configuration comparison counts the reference run's faults too), are one broken_output
finding, critical where the faults are this run's; request failures (http, transport,
malformed: no answer came) are a warning of their own, their probes left out of the
comparisons; `within_floor` is none. No threshold is added here.

The remedies are the engines' own, read from their sources:

- vLLM: the environment variable `VLLM_BATCH_INVARIANT=1` (vllm/envs.py; applied by
  `init_batch_invariance` in vllm/model_executor/layers/batch_invariant.py). Per
  docs/features/batch_invariance.md it is supported on NVIDIA GPUs of compute capability
  8.0 or higher and on Intel XPUs with the Triton attention backend
  (`--attention-config.backend TRITON_ATTN`), and costs speed. It is vLLM's answer to
  determinism too: docs/usage/reproducibility.md says an online server's scheduling
  cannot be made deterministic otherwise (`VLLM_ENABLE_V1_MULTIPROCESSING=0` is for
  offline use only).
- SGLang: `--enable-deterministic-inference` (python/sglang/srt/server_args.py), with an
  attention backend in `DETERMINISTIC_ATTENTION_BACKEND_CHOICES` = flashinfer, fa3,
  triton; another backend given explicitly is refused at start-up, and a backend outside
  `RADIX_SUPPORTED_DETERMINISTIC_ATTENTION_BACKEND` (fa3, triton) turns the radix cache
  off (docs/advanced_features/deterministic_inference.md). One switch makes it both
  deterministic and batch-invariant.
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Callable, Mapping

from servelab.bench.quality.results import (
    QualityComparison,
    QualityResult,
    errors_text,
    output_faults,
    request_failures,
)
from servelab.bench.quality.verdict import BOOTSTRAP_QUANTILE
from servelab.diagnose.actions import text_action
from servelab.diagnose.deployment import launched_spec
from servelab.diagnose.engineconf import knob_engine
from servelab.diagnose.facts import RunFacts
from servelab.diagnose.findings import (
    Action,
    ActionTarget,
    Evidence,
    Finding,
    FindingKind,
    Severity,
    Tally,
)
from servelab.diagnose.quality_evidence import comparison_evidence, comparison_source, measured
from servelab.diagnose.signals import engine_on_cpu

__all__ = [
    "SGLANG_DETERMINISTIC_BACKENDS",
    "SGLANG_DETERMINISTIC_FLAG",
    "VLLM_BATCH_INVARIANT_ENV",
    "rule",
]

VLLM_BATCH_INVARIANT_ENV = "VLLM_BATCH_INVARIANT"
"""vLLM's batch-invariant (and so deterministic) mode: vllm/envs.py reads it as an int."""
SGLANG_DETERMINISTIC_FLAG = "--enable-deterministic-inference"
"""SGLang's deterministic (batch-invariant) mode: python/sglang/srt/server_args.py."""
SGLANG_DETERMINISTIC_BACKENDS = ("flashinfer", "fa3", "triton")
"""server_args.py's DETERMINISTIC_ATTENTION_BACKEND_CHOICES: any other is refused."""
_SGLANG_SETTING = "enable_deterministic_inference"
"""Its name in SGLang's server_args (the log and /server_info)."""

_VERDICT_WEIGHT = 1 - BOOTSTRAP_QUANTILE
"""A drift verdict is the probe's one-sided 97.5% bootstrap statement: as sure as that."""
_COUNTED_WEIGHT = 1.0
"""Quality errors are counted answers, not an inference."""

_KINDS = {
    "determinism": FindingKind.NOT_DETERMINISTIC,
    "batch_invariance": FindingKind.NOT_BATCH_INVARIANT,
    "configuration": FindingKind.QUALITY_DRIFT,
}

_ERROR_ADVICE: dict[str, str] = {
    "nan_logprob": "NaN or infinite logprobs: the engine computed non-finite values; read "
    "engine.log for NaN and check the dtype, quantization and kernels it runs",
    "reasoning_only": "the whole answer came as reasoning_content with content empty: the "
    "reasoning parser (--reasoning-parser) took it all, or max_tokens ended the answer "
    "inside its reasoning",
    "no_finish_reason": "streams ended without a finish_reason: the engine cut them; read "
    "engine.log around the probe's requests",
    "short_stream": "fewer tokens streamed than usage.completion_tokens says: the engine "
    "dropped tokens from the stream",
    "http": "probe requests answered with HTTP errors: see the errors in quality.json and "
    "engine.log",
    "transport": "probe requests lost their connection or timed out: the engine stalled or "
    "died during the probe",
    "malformed": "answers not in the format the wire promises: check that --engine names "
    "the engine that served the run",
    "not_greedy": "at temperature 0 the engine emitted tokens below the best of its own top "
    "logprobs: its sampler or decode path did not take the argmax; check sampling defaults "
    "the server adds (generation_config, penalties) and speculative decoding",
}


_GENERIC_ADVICE = "quality errors of a kind this servelab does not know: read quality.json"
_FAILED_ADVICE = (
    "read the failed probes' errors in quality.json and engine.log, and run the probe again "
    "(a context overflow: fewer --quality-prompts or a larger max_model_len)"
)


def rule(facts: RunFacts) -> list[Finding]:
    quality = facts.quality
    if quality is None:
        return []
    broken = _broken(quality)
    failed = _request_failures(quality)
    return [f for f in (broken, failed) if f is not None] + [
        _drift(facts, quality, comparison)
        for comparison in quality.comparisons
        if comparison.verdict == "drift"
    ]


def _advice(kind: str) -> str:
    return _ERROR_ADVICE.get(kind, _GENERIC_ADVICE)


def _broken(quality: QualityResult) -> Finding | None:
    """Outputs that are not answers, by kind and by the run they came from: one finding for
    the whole probe, critical where this run's passes hold them; None without output
    faults or a broken comparison."""
    mine: Counter[str] = Counter()
    for run in quality.passes:
        mine.update(output_faults(run.errors))
    broken = [c for c in quality.comparisons if c.verdict == "broken"]
    theirs = _reference_faults(quality, broken)
    if not mine and not broken:
        return None
    tally = Tally()
    evidence = _per_pass(quality, output_faults, "quality errors", "answers")
    reference = quality.reference_run or "the reference run"
    evidence += [
        Evidence(
            what=f"quality errors {kind} in the reference run {reference}'s passes",
            value=count,
            unit="answers",
            source=f"{reference}/quality.json",
        )
        for kind, count in theirs.items()
    ]
    evidence += [
        Evidence(what="verdict", value="broken", source=comparison_source(c)) for c in broken
    ]
    tally.add("quality probe", _COUNTED_WEIGHT, evidence)
    _note_first_errors(tally, quality, output_faults)
    if mine:
        title = f"outputs that are not answers: {errors_text(mine)}"
        explanation = (
            "The quality probe's greedy answers include outputs that are not answers "
            "(docs/QUALITY.md, quality errors). They are counted, never averaged away: a "
            "configuration that produces them is wrong however fast it is, and every "
            "comparison that holds them is broken."
        )
        kinds = list(mine) + [k for k in theirs if k not in mine]
        severity = Severity.CRITICAL
    elif theirs:
        title = (
            f"the configuration comparison is broken by the reference run {reference}'s "
            f"outputs: {errors_text(theirs)}"
        )
        explanation = (
            "This run's own answers hold no output fault; the reference run's do, and a "
            "configuration comparison counts both runs' errors. Compare with a reference "
            "run whose answers are answers."
        )
        kinds = list(theirs)
        severity = Severity.WARNING
    else:
        title = "the quality probe compared nothing: " + "; ".join(
            f"{c.kind}: {c.reason}" for c in broken
        )
        explanation = (
            "Every probe of a comparison lost its request (http, transport, malformed), so "
            "nothing was left to compare: the outputs were not judged."
        )
        kinds = list(request_failures(quality.errors))
        severity = Severity.WARNING
    actions = [text_action(_advice(kind)) for kind in kinds]
    if not mine and theirs:
        actions.insert(
            0,
            text_action(
                f"run the reference again (--quality-ref): {reference}'s own passes hold "
                "output faults"
            ),
        )
    return Finding(
        kind=FindingKind.BROKEN_OUTPUT,
        title=title,
        severity=severity,
        confidence=tally.confidence,
        evidence=tally.evidence,
        explanation=explanation,
        actions=actions or [text_action(_GENERIC_ADVICE)],
    )


def _note_first_errors(
    tally: Tally, quality: QualityResult, kinds: Callable[[dict[str, int]], dict[str, int]]
) -> None:
    """Each pass's first reading whose error `kinds` keeps, quoted as a note."""
    for run in quality.passes:
        example = next(
            (r for r in run.readings if r.error_kind is not None and kinds({r.error_kind: 1})),
            None,
        )
        if example is not None:
            tally.note(
                Evidence(
                    what=f"{example.error_kind} on {example.probe_id} (pass {run.name})",
                    value=(example.error or "")[:240],
                    source=f"quality.json pass {run.name}",
                )
            )


def _reference_faults(quality: QualityResult, broken: list[QualityComparison]) -> dict[str, int]:
    """Output faults a broken configuration comparison counts beyond this run's own pass:
    the reference run's."""
    faults: Counter[str] = Counter()
    by_name = {p.name: p for p in quality.passes}
    for c in broken:
        if c.kind != "configuration":
            continue
        own = by_name.get(c.candidate)
        for kind, count in output_faults(c.errors).items():
            extra = count - (own.errors.get(kind, 0) if own is not None else 0)
            if extra > 0:
                faults[kind] = max(faults[kind], extra)
    return dict(sorted(faults.items()))


def _request_failures(quality: QualityResult) -> Finding | None:
    """Probe requests that got no answer: their probes were left out of the comparisons."""
    failures = request_failures(quality.errors)
    if not failures:
        return None
    tally = Tally()
    evidence = _per_pass(quality, request_failures, "failed probe requests", "requests")
    evidence += [
        Evidence(
            what="probes left out of the comparison",
            value=len(c.left_out),
            unit="probes",
            source=comparison_source(c),
        )
        for c in quality.comparisons
        if c.verdict != "broken" and c.left_out
    ]
    tally.add("quality probe", _COUNTED_WEIGHT, evidence)
    _note_first_errors(tally, quality, request_failures)
    return Finding(
        kind=FindingKind.QUALITY_REQUESTS_FAILED,
        title=f"quality probe requests failed: {errors_text(failures)}",
        severity=Severity.WARNING,
        confidence=tally.confidence,
        evidence=tally.evidence,
        explanation="Some of the quality probe's requests got no answer (an HTTP error, a "
        "lost connection, a body not in the wire format). That is not a wrong answer: those "
        "probes were left out of the comparisons, which were judged on the rest, with less "
        "power to see a drift.",
        actions=[text_action(_advice(kind)) for kind in failures] + [text_action(_FAILED_ADVICE)],
    )


def _drift(facts: RunFacts, quality: QualityResult, comparison: QualityComparison) -> Finding:
    tally = Tally()
    tally.add("quality probe", _VERDICT_WEIGHT, comparison_evidence(comparison))
    missing = []
    if not quality.logprobs_available:
        why = f" ({quality.logprobs_reason})" if quality.logprobs_reason else ""
        missing.append(
            f"no logprobs from the engine{why}: the verdict rests on greedy divergence, "
            "which sees only changes large enough to flip a token"
        )
    if comparison.left_out:
        missing.append(
            f"{len(comparison.left_out)} probes left out for request failures "
            f"({', '.join(comparison.left_out[:5])}"
            f"{', ...' if len(comparison.left_out) > 5 else ''}): the verdict rests on the rest"
        )
    share = quality.loaded_overlap_share
    if comparison.kind == "batch_invariance" and share is not None and share < 1:
        missing.append(
            f"only {share:.0%} of the loaded pass ran beside the load: the rest answered "
            "unloaded, so the drift under load is if anything understated"
        )
    if comparison.kind == "configuration":
        reference = quality.reference_run or comparison.reference
        title = f"the outputs drifted from the reference run {reference}"
        explanation = (
            f"This run's answers to the probe set left the reference run's by "
            f"{measured(comparison)}: beyond both runs' own repeat noise. The settings "
            "that differ between the two runs change the numerics (dtype, quantization, "
            "KV-cache dtype, attention or MoE kernels, CUDA graphs): a faster "
            "configuration that answers otherwise is a different model."
        )
        actions = [
            text_action(
                "compare this run's settings with the reference run's and revert the one "
                "that changes numerics, or accept the drift explicitly (a tune study's "
                "quality tolerance)",
                ActionTarget.ENGINE,
            )
        ]
    else:
        loaded = comparison.kind == "batch_invariance"
        title = (
            "the engine is not batch-invariant: answers moved when they shared batches "
            "with the heaviest load"
            if loaded
            else "the engine is not deterministic: the same prompts, alone, answered "
            "differently before and after the sweep"
        )
        level = quality.loaded_level
        beside = f"beside level {level}" if level is not None else "beside the heaviest level"
        when = beside if loaded else "after the sweep"
        explanation = (
            f"The probe set at temperature 0 {when} answered otherwise than before the "
            f"sweep: {measured(comparison)}. "
            + (
                "Kernels reduce in an order that depends on the batch (split-K matmuls, "
                "attention split over the sequence, chunked prefill), so one prompt's "
                "answer depends on what else is running."
                if loaded
                else "Nothing but time separated the two passes: the numerics depend on "
                "state other than the input (the probe's own requests batched otherwise, "
                "kernel choices made at run time, the prefix cache)."
            )
        )
        actions = _mode_actions(facts, quality, tally)
    return Finding(
        kind=_KINDS[comparison.kind],
        title=title,
        severity=Severity.WARNING,
        confidence=tally.confidence,
        evidence=tally.evidence,
        explanation=explanation,
        actions=actions,
        missing=missing,
    )


def _mode_actions(facts: RunFacts, quality: QualityResult, tally: Tally) -> list[Action]:
    """The engine's own deterministic mode, or why it does not apply."""
    engine = knob_engine(facts.engine.name) or (
        quality.engine if quality.engine in ("vllm", "sglang") else None
    )
    if engine == "vllm":
        return [_vllm(facts, tally)]
    if engine == "sglang":
        return [_sglang(facts, tally)]
    both = (
        f"vLLM: env {VLLM_BATCH_INVARIANT_ENV}=1; SGLang: {SGLANG_DETERMINISTIC_FLAG} "
        f"with --attention-backend one of {', '.join(SGLANG_DETERMINISTIC_BACKENDS)}"
    )
    if engine is None:
        return [
            text_action(
                f"turn on the engine's deterministic mode ({both}); give --engine for its "
                "own flags",
                ActionTarget.ENGINE,
            )
        ]
    return [
        Action(
            target=ActionTarget.ENGINE,
            text=f"not possible on {facts.engine.name}, which has no batch-invariant mode ({both})",
            available=False,
        )
    ]


def _vllm(facts: RunFacts, tally: Tally) -> Action:
    env = (launched_spec(facts.summary) or {}).get("env")
    value = env.get(VLLM_BATCH_INVARIANT_ENV) if isinstance(env, dict) else None
    if value is not None and str(value).strip() not in ("", "0"):
        tally.note(
            Evidence(
                what=f"env {VLLM_BATCH_INVARIANT_ENV}",
                value=str(value),
                source="summary.json engine spec",
            )
        )
        return _already_on(f"{VLLM_BATCH_INVARIANT_ENV}={value}")
    cpu = engine_on_cpu(facts.summary, facts.probe)
    if cpu is not None:
        tally.note(cpu)
        return Action(
            target=ActionTarget.ENGINE,
            text=f"not possible on the CPU: vLLM's {VLLM_BATCH_INVARIANT_ENV}=1 runs on NVIDIA "
            "GPUs of compute capability 8.0 or higher and Intel XPUs only",
            knob=f"env.{VLLM_BATCH_INVARIANT_ENV}",
            value="1",
            engine="vllm",
            available=False,
        )
    return Action(
        target=ActionTarget.ENGINE,
        text=f"run vLLM batch-invariant: env: {{{VLLM_BATCH_INVARIANT_ENV}: 1}} in its spec "
        "(NVIDIA compute capability 8.0 or higher; on Intel XPUs with "
        "--attention-config.backend TRITON_ATTN); it costs speed by design",
        knob=f"env.{VLLM_BATCH_INVARIANT_ENV}",
        value="1",
        engine="vllm",
        flags=[f"{VLLM_BATCH_INVARIANT_ENV}=1"],
    )


def _sglang(facts: RunFacts, tally: Tally) -> Action:
    conf = facts.engine
    logged = conf.resolved.get(_SGLANG_SETTING)
    if SGLANG_DETERMINISTIC_FLAG in conf.command or (logged is not None and logged.value is True):
        source = logged.source if logged is not None else "engine command"
        tally.note(Evidence(what=_SGLANG_SETTING, value=True, source=source))
        return _already_on(SGLANG_DETERMINISTIC_FLAG)
    flags = [SGLANG_DETERMINISTIC_FLAG]
    backend = conf.resolved.get("attention_backend")
    note = f"its attention backend must be one of {', '.join(SGLANG_DETERMINISTIC_BACKENDS)}"
    if backend is not None and backend.value is not None:
        tally.note(
            Evidence(what="attention backend", value=str(backend.value), source=backend.source)
        )
        if str(backend.value) not in SGLANG_DETERMINISTIC_BACKENDS:
            flags += ["--attention-backend", "triton"]
            note = (
                f"the attention backend {backend.value} is refused with it; triton keeps "
                "the radix cache on, as fa3 does, where flashinfer turns it off"
            )
    return Action(
        target=ActionTarget.ENGINE,
        text=f"run SGLang deterministic: {shlex.join(flags)} ({note}); it costs speed by design",
        engine="sglang",
        flags=flags,
    )


def _already_on(setting: str) -> Action:
    return text_action(
        f"the engine's deterministic mode was on ({setting}) and its answers still moved: "
        "report it to the engine with quality.json's diff, and check the mode's "
        "requirements (GPU, attention backend, tensor-parallel all-reduce)",
    )


def _per_pass(
    quality: QualityResult,
    counted: Callable[[Mapping[str, int]], dict[str, int]],
    what: str,
    unit: str,
) -> list[Evidence]:
    """One piece of evidence per pass and kind that `counted` keeps of its errors."""
    return [
        Evidence(
            what=f"{what} {kind} in pass {run.name}",
            value=count,
            unit=unit,
            source=f"quality.json pass {run.name}",
        )
        for run in quality.passes
        for kind, count in counted(run.errors).items()
    ]
