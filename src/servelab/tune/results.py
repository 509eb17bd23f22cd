"""What a study found, as one document (study.json in the study's folder).

It is rebuilt from the study's storage after every trial, by whichever worker finished
it, so the file on each host says what the whole study knows at that moment. The report's
tuning section, the plot and `servelab tune show` all read this one document.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from servelab.bench.quality.results import PrimaryMetric, Verdict, answers_moved_alone
from servelab.diagnose.check import PredictionCheck

__all__ = [
    "CONFIRM_FILE",
    "SCHEMA",
    "STUDY_FILE",
    "ConfirmRun",
    "Confirmation",
    "LayoutModel",
    "NoiseCheck",
    "ObjectiveSpec",
    "ParamValue",
    "StudyResult",
    "TrialQuality",
    "TrialRole",
    "TrialRow",
    "TrialState",
    "TwinForecast",
]

SCHEMA = "servelab.tune/1"
STUDY_FILE = "study.json"
CONFIRM_FILE = "confirm.json"

ParamValue = str | int | float | bool | None
TrialState = Literal["complete", "pruned", "failed", "running", "waiting"]
TrialRole = Literal["default", "diagnose", "twin", "search", "retry"]
"""default: the base spec as given; diagnose: an action of diagnose on the default's run;
twin: the grid's untried setting the twin predicted best; search: the sampler's choice;
retry: a trial whose worker died, run again."""


class ObjectiveSpec(BaseModel):
    """One quantity to optimise, measured at one load level of every trial."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str = Field(description="total_throughput, output_throughput, request_goodput, ...")
    at: float | None = Field(
        description="The level (concurrency or request rate) it is read at; None: the highest."
    )
    direction: Literal["maximize", "minimize"]
    unit: str = Field(description="tok/s, req/s, ms.")

    @property
    def label(self) -> str:
        where = f" at {self.at:g}" if self.at is not None else ""
        return f"{self.metric}{where}"


class LayoutModel(BaseModel):
    """The analytic model's account of one trial's layout at the objective's load: why one
    layout beats another (all-reduces on the tensor-parallel path against the pipeline's
    bubble and sends, the prompts' prefill, what the KV cache holds). Rates are in the
    trial's own time: a simulator's `time_scale` multiplies them, as it does its steps."""

    model_config = ConfigDict(extra="forbid")

    tp: int
    pp: int
    batch: float = Field(
        description="Requests running together: the load, capped by the running-request cap "
        "and by what the KV cache holds at these lengths."
    )
    kv_max_requests: int = Field(description="Requests of this length the KV cache holds.")
    step_ms: float = Field(description="One decode step of the batch.")
    allreduces: int = Field(description="Tensor-parallel all-reduces along one step's path.")
    allreduce_bytes: float = Field(description="Bytes of each all-reduce (per rank).")
    allreduce_ms: float = Field(description="Their total time in one decode step.")
    pp_send_ms: float = Field(description="Activations sent between stages in one step.")
    pp_bubble_fraction: float = Field(description="Share of stage time idle.")
    prefill_ms: float = Field(description="Prefilling the batch's prompts, once per cycle.")
    total_tokens_per_s: float = Field(description="Input and output tokens/s the model predicts.")
    output_tokens_per_s: float = Field(description="Output tokens/s the model predicts.")
    time_scale: float = Field(default=1.0, description="The simulator's speed-up, else 1.")
    fits: bool
    reason: str = Field(description="One sentence: what dominates this layout's cycle.")

    def predicted(self, metric: str) -> float:
        """The model's figure for an objective's metric (output or else total tokens/s)."""
        if metric == "output_throughput":
            return self.output_tokens_per_s
        return self.total_tokens_per_s


class TwinForecast(BaseModel):
    """The objective a trial was predicted to measure before it launched: a finished
    trial's twin replayed at this trial's limits."""

    model_config = ConfigDict(extra="forbid")

    from_trial: int = Field(description="The finished trial whose run the twin was fitted on.")
    metric: str
    at: float | None
    changes: dict[str, int | None] = Field(description="The limits replayed at new values.")
    predicted: float
    low: float
    high: float
    extrapolated: list[str] = Field(default_factory=list)
    refitted_on: list[int] = Field(
        default_factory=list,
        description="The finished trials whose gaps the twin's cost was refitted on, its own "
        "first; empty where it was fitted on its own run alone.",
    )

    band_low: float | None = Field(
        default=None,
        description="The measured value's 95% noise band, from the requests of both runs "
        "(the one the twin was fitted on and this one); None until measured, or without a "
        "band.",
    )
    band_high: float | None = None

    def verdict(self, measured: float | None) -> str:
        """inside; within noise (outside, but its noise band reaches the interval, as
        diagnose's checks read it); outside."""
        if measured is None:
            return "not measured"
        if self.low <= measured <= self.high:
            return "inside"
        low, high = self.band_low, self.band_high
        reaches = low is not None and high is not None and low <= self.high and high >= self.low
        return "within noise" if reaches else "outside"

    def text(self, measured: float | None) -> str:
        where = f" at {self.at:g}" if self.at is not None else ""
        pooled = (
            f" (refitted on trials {', '.join(str(n) for n in self.refitted_on)})"
            if len(self.refitted_on) > 1
            else ""
        )
        said = (
            f"the twin of trial {self.from_trial}{pooled} predicted {self.metric}{where} "
            f"{self.predicted:,.4g} ({self.low:,.4g}-{self.high:,.4g})"
        )
        if measured is None:
            return said
        band = (
            f", band {self.band_low:,.4g}-{self.band_high:,.4g}"
            if self.band_low is not None and self.band_high is not None
            else ""
        )
        return f"{said}; measured {measured:,.4g}{band}: {self.verdict(measured)}"


class TrialQuality(BaseModel):
    """A trial's answers against the default trial's, judged by the study's tolerance
    (tune.quality's rule; docs/TUNE.md "Only right answers")."""

    model_config = ConfigDict(extra="forbid")

    reference_trial: int | None = Field(
        description="The default trial whose pass is the reference; None on the default itself."
    )
    verdict: Verdict | None = Field(
        default=None,
        description="The configuration comparison's verdict; None on the default (the "
        "reference) or where nothing was compared.",
    )
    primary_metric: PrimaryMetric | None = Field(
        default=None,
        description="The metric the verdict and the tolerance read: mean |Δlogprob| (nats) "
        "where there are logprobs, else the share of probes whose greedy answer differs.",
    )
    primary_value: float | None = Field(default=None, description="Its value (larger: worse).")
    interval_low: float | None = Field(
        default=None, description="The lower end of its bootstrap interval over the probes."
    )
    floor: float | None = Field(
        default=None, description="The larger of its epsilon and both runs' self-difference."
    )
    divergence_share: float | None = Field(
        default=None,
        description="Share of probes whose greedy answer differs from the default's.",
    )
    moved: list[PrimaryMetric] = Field(
        default_factory=list,
        description="The comparison's metrics past their floor (its `moved`); "
        "divergence_share without the primary: greedy answers that moved while the "
        "teacher-forced scores did not.",
    )
    errors: dict[str, int] = Field(
        default_factory=dict, description="Quality errors by kind (this trial's passes)."
    )
    accepted: bool = Field(description="Within the tolerance: the trial may be the best.")
    reason: str = Field(description="The judgement in one line, with its numbers.")

    @property
    def answers_moved_alone(self) -> bool:
        """The greedy answers drifted while the teacher-forced scores did not (the
        comparison's own `answers_moved_alone`)."""
        return answers_moved_alone(self.moved, self.primary_metric)

    def cell(self) -> str:
        """'drift 0.0123 nats', 'within_floor 0.25 share', 'broken', 'reference', and for
        answers that moved while the logprobs did not, 'greedy drift 1 share'."""
        if self.verdict is None:
            return "reference" if self.reference_trial is None and self.accepted else "not judged"
        if self.verdict == "broken" or self.primary_value is None:
            return self.verdict
        if self.answers_moved_alone and self.divergence_share is not None:
            return f"greedy drift {self.divergence_share:.3g} share"
        unit = "nats" if self.primary_metric == "mean_abs_dlogprob" else "share"
        return f"{self.verdict} {self.primary_value:.3g} {unit}"


class TrialRow(BaseModel):
    """One trial: what it set, what it measured, where its run directory is."""

    model_config = ConfigDict(extra="forbid")

    number: int
    state: TrialState
    role: TrialRole
    params: dict[str, ParamValue] = Field(description="The searched values, by parameter path.")
    values: list[float] | None = Field(
        default=None, description="The objectives' values, in the study's order."
    )
    metrics: dict[str, float | None] = Field(
        default_factory=dict, description="Every objective and constraint metric measured."
    )
    constraints: list[float] | None = Field(
        default=None, description="Per constraint: <= 0 is met (Optuna's convention)."
    )
    feasible: bool | None = Field(default=None, description="Every constraint met.")
    reason: str | None = Field(
        default=None, description="Why it was pruned or failed, or stopped early."
    )
    signature: str | None = Field(
        default=None, description="The engine log signature that explains a failed start."
    )
    run_dir: str | None = None
    host: str | None = Field(default=None, description="The worker's host that ran it.")
    retry_of: int | None = Field(default=None, description="The trial it repeats.")
    duration_s: float | None = None
    spec_yaml: str | None = Field(default=None, description="The launched spec (secrets hidden).")
    command: list[str] | None = Field(default=None, description="The engine's launch command.")
    model: LayoutModel | None = None
    prediction: PredictionCheck | None = Field(
        default=None,
        description="A trial seeded from a diagnose action: that finding's expected gain "
        "against what this trial measured beside the trial it was found in.",
    )
    twin: TwinForecast | None = Field(
        default=None,
        description="The objective predicted before launch by a finished trial's twin.",
    )
    quality: TrialQuality | None = Field(
        default=None,
        description="With a quality tolerance: the trial's answers against the default's.",
    )

    @field_validator("model", mode="before")
    @classmethod
    def _older_account(cls, given: Any) -> Any:
        """A model account an earlier servelab recorded in another shape is left out, not a
        study.json that no longer reads (the measurements stand without it)."""
        if given is None or isinstance(given, LayoutModel):
            return given
        try:
            return LayoutModel.model_validate(given)
        except ValidationError:
            return None


class NoiseCheck(BaseModel):
    """The best trial against another (the runner-up, the default) within the noise of their
    own requests: bench.noise's block-bootstrap band of best / other on the objective's
    level. A single measurement of each: the maximum of several noisy trials is biased up,
    so a best that is within noise of the runner-up is not shown to be better."""

    model_config = ConfigDict(extra="forbid")

    trial: int
    role: str = Field(description="runner-up, default, or both.")
    ratio: float | None = Field(description="The best's objective over this trial's.")
    band_lo: float | None = Field(default=None, description="The band's low end of the ratio.")
    band_hi: float | None = Field(default=None, description="The band's high end.")
    within_noise: bool | None = Field(
        description="The band holds 1; None where no band could be drawn."
    )
    text: str = Field(description="One line: the change, the band or why there is none.")


class ConfirmRun(BaseModel):
    """One re-measurement of `tune run --confirm`: a launch and sweep of one configuration."""

    model_config = ConfigDict(extra="forbid")

    pair: int
    which: Literal["best", "default"]
    value: float | None = Field(description="The first objective measured; None: nothing.")
    run_dir: str | None = Field(default=None, description="Relative to the study folder.")
    reason: str | None = Field(default=None, description="Why it measured nothing.")


class Confirmation(BaseModel):
    """The best and the default configurations re-measured N times each, alternately: the
    run-to-run band of the gain, which a single trial of each cannot give."""

    model_config = ConfigDict(extra="forbid")

    best_trial: int
    default_trial: int
    objective: str = Field(description="The first objective's label.")
    repeats: int = Field(description="Pairs asked for.")
    runs: list[ConfirmRun] = Field(default_factory=list)
    ratios: list[float] = Field(
        default_factory=list, description="Best / default, one per pair that measured both."
    )
    median_ratio: float | None = None
    min_ratio: float | None = None
    max_ratio: float | None = None
    confirmed: bool | None = Field(
        default=None,
        description="Every pair's best beat its default (None: no pair measured both).",
    )
    text: str = Field(description="One line, for `tune show` and the report.")


class StudyResult(BaseModel):
    """The study: its question, its trials, and the best of them."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(default=SCHEMA, alias="schema")
    name: str
    storage: str = Field(description="The storage URL, password hidden.")
    space_file: str | None = None
    engine: str
    workload: str = Field(description="The workload and load, in words.")
    objectives: list[ObjectiveSpec]
    constraints: list[str] = Field(default_factory=list)
    quality_tolerance: float | None = Field(
        default=None,
        description="`quality.tolerance`: how far a trial's answers may move from the "
        "default's, in the unit of the configuration comparison's primary metric; None: "
        "quality not probed.",
    )
    sampler: str = Field(description="tpe, grid, or nsga2 (two objectives).")
    trials: list[TrialRow]
    best: list[int] = Field(
        default_factory=list,
        description="Best feasible trial numbers: one for one objective, the Pareto set for two.",
    )
    default_trial: int | None = Field(default=None, description="The base spec's trial.")
    best_spec_yaml: str | None = None
    best_command: list[str] | None = None
    best_noise: list[NoiseCheck] = Field(
        default_factory=list,
        description="The best trial against the runner-up and the default, within the noise "
        "of their own requests (one objective only).",
    )
    confirmation: Confirmation | None = Field(
        default=None, description="`tune run --confirm N`: the gain re-measured N times."
    )
    notes: list[str] = Field(default_factory=list)

    def trial(self, number: int) -> TrialRow | None:
        return next((t for t in self.trials if t.number == number), None)

    def gain_over_default(self, objective: int = 0) -> float | None:
        """The first best trial's objective over the default's (None when either lacks it)."""
        if not self.best or self.default_trial is None:
            return None
        best, base = self.trial(self.best[0]), self.trial(self.default_trial)
        if best is None or base is None or not best.values or not base.values:
            return None
        if base.values[objective] == 0:
            return None
        return best.values[objective] / base.values[objective]
