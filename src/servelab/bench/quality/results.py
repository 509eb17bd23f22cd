"""Typed results of the quality probe: passes, comparisons, verdicts, and quality.json.

A pass is what one run of the probe set observed; a comparison is two passes on the same
probe set, reduced to metrics and one verdict. Every field's definition is in its
description and in docs/QUALITY.md. Logprobs are natural logarithms (nats).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servelab.store.rundir import RunDir

__all__ = [
    "OUTPUT_FAULTS",
    "PROBES_FILE",
    "QUALITY_FILE",
    "REQUEST_FAILURES",
    "SCHEMA",
    "ComparisonKind",
    "DiffEntry",
    "EngineName",
    "ForcedMethod",
    "ForcedReading",
    "ForcedSet",
    "LoadedBeside",
    "PrimaryMetric",
    "ProbeReading",
    "QualityBlock",
    "QualityComparison",
    "QualityErrorKind",
    "QualityMetrics",
    "QualityPass",
    "QualityResult",
    "TokenSource",
    "Verdict",
    "answers_moved_alone",
    "errors_text",
    "load_quality",
    "output_faults",
    "quality_block",
    "request_failures",
    "write_quality",
]

SCHEMA = "servelab.quality/1"
QUALITY_FILE = "quality.json"
"""QualityResult of the run."""
PROBES_FILE = "quality_probes.jsonl"
"""The probe set, one Probe per line (quality.probes), so a later run replays it exactly."""

EngineName = Literal["vllm", "sglang", "openai", "transformers"]
QualityErrorKind = Literal[
    "nan_logprob",
    "not_greedy",
    "reasoning_only",
    "no_finish_reason",
    "short_stream",
    "http",
    "transport",
    "malformed",
]
"""Outputs that are not answers (docs/QUALITY.md "Quality errors"):
nan_logprob: a NaN or ±inf logprob; not_greedy: at temperature 0, a token emitted below
its position's best top logprob (bench.quality.greedy); reasoning_only: empty `content` with text in
`reasoning_content`; no_finish_reason: a stream that ended without one; short_stream:
fewer tokens streamed than `usage.completion_tokens`; http: a 4xx/5xx answer; transport:
no connection, a cut connection or a timeout; malformed: a body that is not the JSON
the wire format promises."""
OUTPUT_FAULTS: frozenset[str] = frozenset(
    ("nan_logprob", "not_greedy", "reasoning_only", "no_finish_reason", "short_stream")
)
"""Quality errors that are the engine's answer itself: an output that is not an answer.
Any of them in either pass of a comparison makes it `broken`."""
REQUEST_FAILURES: frozenset[str] = frozenset(("http", "transport", "malformed"))
"""Quality errors where no answer came (an HTTP error, a lost connection, a body not in
the wire format): the probe is left out of the comparison, counted and named, and the
comparison is `broken` only when they leave no probe to compare."""
TokenSource = Literal["ids", "logprobs", "chunks"]
ForcedMethod = Literal["prompt_logprobs", "sglang_generate", "echo"]
ComparisonKind = Literal["determinism", "batch_invariance", "configuration"]
PrimaryMetric = Literal["mean_abs_dlogprob", "divergence_share"]
Verdict = Literal["within_floor", "drift", "broken"]
LoadedBeside = Literal["level", "replay"]

_NAN = "NaN and ±inf are written as the strings 'NaN', 'Infinity', '-Infinity'."


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


class ProbeReading(_Model):
    """The free-running (greedy) answer to one probe."""

    probe_id: str = Field(description="The probe's id in the probe set.")
    ok: bool = Field(description="True when the answer is usable: no quality error.")
    error_kind: QualityErrorKind | None = Field(
        default=None, description="The quality error of this answer; None when ok."
    )
    error: str | None = Field(default=None, description="The error in one line, with numbers.")
    text: str = Field(default="", description="The generated text (`content` on chat).")
    reasoning_chars: int = Field(
        default=0, description="Characters the server sent as `reasoning_content`."
    )
    token_ids: list[int] | None = Field(
        default=None,
        description="The generated tokens as ids, where the engine gave them "
        "(vLLM's return_tokens_as_token_ids); None otherwise.",
    )
    tokens: list[str] = Field(
        default_factory=list,
        description="The generated tokens as text pieces (with ids: each chunk's text on "
        "its first token, '' on the others), for diffs and for comparing without ids.",
    )
    token_source: TokenSource = Field(
        default="chunks",
        description="What `tokens` are: ids (exact), logprobs (the engine's token strings) "
        "or chunks (streamed text pieces, where no token-level answer came).",
    )
    logprobs: list[float] | None = Field(
        default=None,
        description="Logprob of each generated token, in nats; None where the engine gave "
        "none. " + _NAN,
    )
    finish_reason: str | None = Field(default=None, description="As the server sent it.")
    completion_tokens: int | None = Field(
        default=None, description="The server's usage.completion_tokens; None when absent."
    )
    latency_ms: float = Field(description="Send to last byte of this request, in ms.")


class ForcedReading(_Model):
    """One probe's reference continuation scored by this engine (teacher forcing)."""

    probe_id: str = Field(description="The probe's id in the probe set.")
    ok: bool = Field(description="True when every forced token got a finite logprob.")
    error_kind: QualityErrorKind | None = Field(default=None, description="None when ok.")
    error: str | None = Field(default=None, description="The error in one line.")
    note: str | None = Field(
        default=None,
        description="Why the reading is empty without an error (no reference tokens, or "
        "the continuation re-tokenized to other tokens).",
    )
    logprobs: list[float] = Field(
        default_factory=list,
        description="Logprob this engine gives each token of the reference's greedy "
        "continuation, given the prompt and the tokens before it, in nats. " + _NAN,
    )
    top1: list[bool] | None = Field(
        default=None,
        description="Per forced token: True when it is this engine's own most likely "
        "token at that position; None where the engine gave no rank or top token.",
    )


class ForcedSet(_Model):
    """A pass's teacher-forced readings on one reference pass's continuations."""

    on: str = Field(
        description="The pass whose continuations were forced: 'before', or "
        "'<run>:before' for a reference run's pass."
    )
    method: ForcedMethod = Field(
        description="How: vLLM prompt_logprobs, SGLang /generate, or echo with logprobs."
    )
    readings: list[ForcedReading] = Field(description="One per probe, in probe-set order.")
    wall_s: float = Field(description="Wall time of the forced requests, in s.")


class QualityPass(_Model):
    """One pass over the probe set at temperature 0."""

    name: str = Field(description="'before', 'after' or 'loaded' (mixed into a load level).")
    concurrency: int = Field(description="Probe requests the pass kept in flight at most.")
    loaded: bool = Field(
        description="True when the pass ran beside a load level (its requests excluded "
        "from that level's metrics)."
    )
    wall_s: float = Field(
        description="First send to last answer of the pass, forced readings included, in s."
    )
    readings: list[ProbeReading] = Field(description="One per probe, in probe-set order.")
    forced: list[ForcedSet] = Field(
        default_factory=list, description="Teacher-forced readings, one set per reference."
    )
    errors: dict[str, int] = Field(
        default_factory=dict,
        description="Quality errors of the pass by kind, free-running and forced together.",
    )


class QualityMetrics(_Model):
    """Two passes on the same probe set, reduced (docs/QUALITY.md "Metrics")."""

    probes: int = Field(description="Probes both passes answered without a quality error.")
    forced_tokens: int = Field(
        description="Teacher-forced tokens compared (both passes scored the same tokens)."
    )
    mean_abs_dlogprob: float | None = Field(
        description="Mean over forced tokens of |logprob_b - logprob_a|, in nats; None "
        "without forced logprobs on both sides."
    )
    p99_abs_dlogprob: float | None = Field(
        description="99th percentile of the same per-token |Δlogprob|, in nats."
    )
    top1_agreement: float | None = Field(
        description="Share of forced tokens that are pass b's own most likely token there "
        "(same context on both sides); None without ranks."
    )
    positional_agreement: float | None = Field(
        description="Share of positions, over the longer of each probe's two greedy "
        "continuations, where both hold the same token; None when the passes' tokens "
        "cannot be compared (ids on one side, text on the other)."
    )
    exact_match_rate: float = Field(
        description="Share of probes whose greedy continuations are identical."
    )
    divergence_share: float = Field(
        description="1 - exact_match_rate: share of probes whose greedy continuations differ."
    )
    median_first_divergence: float | None = Field(
        description="Median over probes of the index of the first differing token (a probe "
        "that never diverges counts as its length); None without probes."
    )


class DiffEntry(_Model):
    """Where one probe's greedy continuation first left the reference's."""

    probe_id: str = Field(description="The probe's id.")
    position: int = Field(description="Index of the first differing token.")
    context: list[str] = Field(description="A few shared tokens before it.")
    reference: list[str] = Field(description="The reference's tokens from there.")
    candidate: list[str] = Field(description="This pass's tokens from there.")
    mean_abs_dlogprob: float | None = Field(
        default=None, description="The probe's own mean forced |Δlogprob|, in nats."
    )


class QualityComparison(_Model):
    """Two passes on one probe set, one verdict."""

    kind: ComparisonKind = Field(
        description="determinism (before vs after), batch_invariance (before vs loaded), "
        "configuration (a reference run's pass vs this run's)."
    )
    reference: str = Field(description="The reference pass ('before', '<run>:before').")
    candidate: str = Field(description="The pass compared with it.")
    metrics: QualityMetrics
    primary_metric: PrimaryMetric = Field(
        description="The metric that decides: mean_abs_dlogprob where both sides have "
        "forced logprobs, else divergence_share."
    )
    primary_value: float = Field(description="Its value (larger = worse).")
    interval_low: float = Field(
        description="Lower end of the bootstrap interval of the primary metric "
        "(resampling probes, one-sided 97.5%)."
    )
    interval_high: float = Field(description="Upper end (97.5th percentile).")
    floor: float = Field(
        description="The larger of the measured self-difference and the metric's epsilon."
    )
    floor_source: Literal["measured", "epsilon"] = Field(description="Which one set the floor.")
    verdict: Verdict = Field(
        description="broken on an output fault in either pass (OUTPUT_FAULTS), or when "
        "request failures left no probe to compare; else drift when "
        "interval_low > floor, or (primary mean_abs_dlogprob) when "
        "divergence_interval_low > divergence_floor; else within_floor."
    )
    moved: list[PrimaryMetric] = Field(
        default_factory=list,
        description="The metrics whose bootstrap lower end exceeds their floor, the "
        "primary first: what made the verdict drift. ['divergence_share'] where the "
        "primary is mean_abs_dlogprob: greedy answers moved while the teacher-forced "
        "scores did not (a decode path or sampler). Empty on within_floor and broken.",
    )
    divergence_interval_low: float | None = Field(
        default=None,
        description="Where the primary is mean_abs_dlogprob: the lower end of the "
        "bootstrap interval of divergence_share (one-sided 97.5%); None where "
        "divergence_share is the primary (interval_low).",
    )
    divergence_floor: float | None = Field(
        default=None,
        description="Its floor: the larger of divergence_share's epsilon and the measured "
        "self-difference of it; None where divergence_share is the primary (floor).",
    )
    reason: str = Field(description="The verdict in one line, with its numbers.")
    errors: dict[str, int] = Field(
        default_factory=dict, description="Quality errors of the two passes, by kind."
    )
    left_out: list[str] = Field(
        default_factory=list,
        description="Probes left out of the comparison, a quality error on either side: "
        "where the verdict is not broken, a request failure (http, transport, malformed); "
        "the comparison is judged on the others.",
    )
    diff: list[DiffEntry] = Field(
        default_factory=list, description="First divergences of the worst probes."
    )

    @property
    def answers_moved_alone(self) -> bool:
        """Drift by the greedy answers while the teacher-forced scores stayed within their
        floor: a decode path or a sampler, which no tolerance in nats can measure."""
        return answers_moved_alone(self.moved, self.primary_metric)


class QualityResult(_Model):
    """The document written to quality.json."""

    schema_: str = Field(default=SCHEMA, alias="schema")
    probes_file: str = Field(default=PROBES_FILE, description="The probe set, in the run dir.")
    probe_set_digest: str = Field(
        description="sha256 of the probe set's JSONL: a reference run must share it."
    )
    seed: int = Field(description="Seed the probe set was generated from.")
    n_probes: int = Field(description="Probes in the set (--quality-prompts).")
    engine: EngineName = Field(description="Wire dialect used for logprobs.")
    logprobs_available: bool = Field(description="True when the engine gave per-token logprobs.")
    logprobs_reason: str | None = Field(
        default=None, description="Why not, where logprobs_available is false."
    )
    forced_method: ForcedMethod | None = Field(
        default=None, description="How teacher-forced logprobs were read; None without."
    )
    forced_reason: str | None = Field(
        default=None,
        description="Why there was no teacher forcing, where forced_method is None (the "
        "engine has no method, chat probes off vLLM, or the engine refused it).",
    )
    reference_run: str | None = Field(
        default=None, description="--quality-ref: the run whose pass was the reference."
    )
    passes: list[QualityPass]
    comparisons: list[QualityComparison]
    errors: dict[str, int] = Field(
        default_factory=dict, description="Quality errors of every pass, by kind."
    )
    probe_s: float = Field(description="Wall time of the probe's passes together, in s.")
    loaded_level: int | None = Field(
        default=None,
        description="The sweep level (its `level` index in summary.json) the loaded pass ran "
        "beside; None when no loaded pass ran.",
    )
    loaded_beside: LoadedBeside | None = Field(
        default=None,
        description="'level': during that level's measured requests (a fixed sweep's "
        "heaviest); 'replay': after the sweep, beside that level's load sent again unmeasured "
        "(an adaptive sweep or a capacity search, whose last level is known only once run).",
    )
    loaded_overlap_share: float | None = Field(
        default=None,
        description="Share of the loaded pass's wall time that the load ran beside it, in "
        "[0, 1]; below 1 the rest of the pass ran unloaded.",
    )
    notes: list[str] = Field(
        default_factory=list,
        description="What went wrong with the probe itself (a pass that could not run), and "
        "a loaded pass that outlasted its load.",
    )


class QualityBlock(_Model):
    """The `quality` block of summary.json: the verdicts, compact."""

    verdicts: dict[str, Verdict] = Field(description="Each comparison's verdict, by kind.")
    primary: dict[str, float] = Field(
        description="Each comparison's primary metric value, by kind."
    )
    primary_metric: dict[str, PrimaryMetric] = Field(
        description="Which metric each value is, by kind."
    )
    errors: int = Field(description="Quality errors of every pass, all kinds together.")
    logprobs_available: bool = Field(description="As in quality.json.")
    probe_s: float = Field(description="Wall time of the probe's passes together, in s.")
    loaded_level: int | None = Field(
        default=None, description="The level the loaded pass ran beside, as in quality.json."
    )


def answers_moved_alone(moved: Sequence[PrimaryMetric], primary: PrimaryMetric | None) -> bool:
    """A comparison's `moved` holds metrics, but not its primary: the greedy answers moved
    while the teacher-forced scores stayed within their floor (verdict rule 4)."""
    return bool(moved) and primary not in moved


def output_faults(errors: Mapping[str, int]) -> dict[str, int]:
    """The kinds of `errors` that are output faults (OUTPUT_FAULTS). A kind that is not a
    known request failure counts as a fault, so a file from a newer servelab never reads
    cleaner than it is."""
    return {kind: n for kind, n in errors.items() if kind not in REQUEST_FAILURES and n}


def request_failures(errors: Mapping[str, int]) -> dict[str, int]:
    """The kinds of `errors` that are request failures (REQUEST_FAILURES)."""
    return {kind: n for kind, n in errors.items() if kind in REQUEST_FAILURES and n}


def errors_text(errors: Mapping[str, int]) -> str:
    """Quality errors by kind in one phrase: 'nan_logprob x3, reasoning_only x1', or 'none'."""
    return ", ".join(f"{kind} x{count}" for kind, count in sorted(errors.items())) or "none"


def quality_block(result: QualityResult) -> QualityBlock:
    """The compact summary.json view of `result`."""
    return QualityBlock(
        verdicts={c.kind: c.verdict for c in result.comparisons},
        primary={c.kind: c.primary_value for c in result.comparisons},
        primary_metric={c.kind: c.primary_metric for c in result.comparisons},
        errors=sum(result.errors.values()),
        logprobs_available=result.logprobs_available,
        probe_s=result.probe_s,
        loaded_level=result.loaded_level,
    )


def write_quality(run_dir: RunDir | Path, result: QualityResult) -> Path:
    """Replace quality.json in the run directory atomically."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    return run.write_json_text(QUALITY_FILE, result.model_dump_json(by_alias=True, indent=2) + "\n")


def load_quality(run_dir: RunDir | Path) -> QualityResult | None:
    """The run's quality.json; None where absent, a ConfigError where invalid."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    return run.load(QUALITY_FILE, QualityResult)
