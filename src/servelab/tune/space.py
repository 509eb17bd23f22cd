"""The search space file (SPACE.yaml): the base spec, what to vary, the load, the goal.

    study: story-cap                 # default: the file's name
    base:                            # an engine spec, or the path of one
      engine: sim
      options: {profile: glm5-rtxpro6000-tp8, time_scale: 10}
      knobs: {max_running_requests: 64}
    space:
      knobs.max_running_requests: [64, 128, 256]        # a list: categorical
      knobs.mem_fraction: {low: 0.8, high: 0.95}        # a range: float
      knobs.max_batch_tokens: {low: 1024, high: 16384, log: true}   # int, log scale
      layout: [{tp: 8}, {tp: 4, pp: 2}, {tp: 2, pp: 4}]
      env.NCCL_ALGO: [Ring, Tree, null]                 # null: unset
      args.--enable-mixed-chunk: [true, false]          # a native switch
      args.--num-continuous-decode-steps: [1, 2, 4]     # a native flag with a value
    workload: {input_len: 256, output_len: 128}
    load: {concurrency: [1, 128], duration: 20s}
    objective: total_throughput@128  # or [total_throughput@128, single_stream_tok_s]
    constraints: ["p99_ttft_ms <= 2000", "error_rate <= 0.01"]
    quality: {tolerance: 0.01, prompts: 32}   # keep only right answers (tune.quality)
    trials: 12

`objective: capacity` searches, in each trial, the highest load that meets `slo` for
`attainment` of the requests (default 0.9): `load` then gives the search's start (one
level, default 1) and its largest load, `max` (default 1024 concurrent or req/s).
`objective: cost` is the lowest USD per million total tokens among the trial's levels that
meet `slo` for `attainment` of their requests, at the price given to `servelab tune`.

The base's own value of every searched setting is always a candidate, so the first trial
(the base as given) lies inside the space and the sampler learns from it.
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from servelab.bench.capacity import DEFAULT_ATTAINMENT
from servelab.bench.load import LoadMode
from servelab.bench.quality.plan import DEFAULT_PROMPTS, DEFAULT_SEED
from servelab.bench.workload import WorkloadSpec, parse_dataset
from servelab.core.errors import ConfigError
from servelab.core.redact import (
    MASK,
    MIN_SECRET_LEN,
    document_secrets,
    is_secret_name,
    redact_document,
    register_secret,
    scrub_values,
)
from servelab.core.units import parse_duration_s, parse_slos
from servelab.engines.base import LAYOUT_NAMES, EngineSpec
from servelab.engines.spec import load_spec, parse_spec
from servelab.tune.load import LoadPlan
from servelab.tune.params import Param, param_from_yaml
from servelab.tune.quality import MIN_PROMPTS, QualitySpec
from servelab.tune.results import ObjectiveSpec
from servelab.tune.targets import CAPACITY, COST, Constraint, parse_constraint, parse_objective

__all__ = [
    "DEFAULT_TRIALS",
    "LoadPlan",
    "SearchSpace",
    "load_space",
    "parse_space",
    "with_quality_tolerance",
]

DEFAULT_TRIALS = 20
DEFAULT_EARLY_STOP = 0.5
"""A trial whose first level reaches less than half the best trial's there is stopped."""
MAX_OBJECTIVES = 2
MAX_PROMPTS = 1000
"""Probes per pass at most: three passes of them per trial, beside its sweep."""

Sampler = Literal["auto", "tpe", "grid", "random"]


class _LoadFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    concurrency: list[float] | float | None = None
    request_rate: list[float] | float | None = None
    duration: str | float | None = None
    num_requests: int | None = Field(default=None, ge=1)
    warmup: int = Field(default=1, ge=0)
    stream: bool = True
    max: float | None = Field(default=None, gt=0)


class _WorkloadFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dataset: str = "random"
    input_len: int = Field(default=256, ge=1, le=10_000_000)
    output_len: int | None = Field(default=128, ge=1, le=10_000_000)
    range_ratio: float = Field(default=1.0, gt=0, le=1)
    shared_prefix_len: int = Field(default=0, ge=0)
    seed: int = 0


class _QualityFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tolerance: float
    prompts: int = Field(default=DEFAULT_PROMPTS, ge=MIN_PROMPTS, le=MAX_PROMPTS)
    seed: int = DEFAULT_SEED

    @field_validator("tolerance", mode="before")
    @classmethod
    def _number(cls, given: Any) -> Any:
        number = not isinstance(given, bool) and isinstance(given, int | float)
        if not number or not math.isfinite(given) or given < 0:
            raise ValueError(
                "a number from 0, in nats of mean |Δlogprob| (a share of probes where the "
                "engine gives no logprobs)"
            )
        return given

    def spec(self) -> QualitySpec:
        return QualitySpec(tolerance=float(self.tolerance), prompts=self.prompts, seed=self.seed)


class _SpaceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    study: str | None = None
    base: dict[str, Any] | str
    gpus: int | None = Field(default=None, ge=1)
    space: dict[str, Any] = Field(default_factory=dict)
    workload: _WorkloadFile = Field(default_factory=_WorkloadFile)
    load: _LoadFile = Field(default_factory=_LoadFile)
    objective: str | dict[str, Any] | list[str | dict[str, Any]] = "total_throughput"
    constraints: list[str] = Field(default_factory=list)
    slo: str | None = None
    attainment: float | None = Field(default=None, gt=0, le=1)
    trials: int = Field(default=DEFAULT_TRIALS, ge=1, le=10_000)
    time_budget: str | None = None
    early_stop: float = Field(default=DEFAULT_EARLY_STOP, ge=0, lt=1)
    sampler: Sampler = "auto"
    seed: int = 0
    diagnose_seeds: int = Field(default=3, ge=0, le=20)
    quality: _QualityFile | None = None

    @field_validator("study")
    @classmethod
    def _name(cls, name: str | None) -> str | None:
        if name is not None and not _valid_name(name):
            raise ValueError("a study name is letters, digits, '.', '_' and '-'")
        return name


class SearchSpace(BaseModel):
    """A study's question, checked: every path known, every range sane."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    source: str | None
    text: str = Field(
        description="The file as given, kept with the study: its secrets masked (***)."
    )
    document: dict[str, Any] = Field(
        description="The file's content with the base spec inlined, secrets masked: what "
        "another host's worker rebuilds the space from (with its own environment's secrets)."
    )
    base: EngineSpec
    gpus: int | None
    params: list[Param]
    workload: WorkloadSpec
    load: LoadPlan
    objectives: list[ObjectiveSpec]
    constraints: list[Constraint]
    slo_ms: dict[str, float] | None
    attainment: float = Field(
        description="objective capacity or cost: the share of a level's requests meeting every SLO."
    )
    trials: int
    time_budget_s: float | None
    early_stop: float
    sampler: Sampler
    seed: int
    diagnose_seeds: int
    quality: QualitySpec | None = Field(
        default=None,
        description="Keep only right answers: every trial probed, judged against the "
        "default trial's pass (tune.quality); None: quality not probed.",
    )

    def workload_text(self) -> str:
        w = self.workload
        lengths = f"{w.input_len} in / {w.output_len or 'default'} out"
        return f"{w.dataset} {lengths}; {self.load.text()}"

    def param(self, path: str) -> Param | None:
        return next((p for p in self.params if p.path == path), None)

    def grid_size(self) -> int | None:
        """How many settings the space holds, when every parameter can be listed."""
        sizes = [p.grid_size() for p in self.params]
        if any(size is None for size in sizes):
            return None
        return math.prod(size for size in sizes if size is not None)


def load_space(path: Path) -> SearchSpace:
    """The space file at `path`; a base given as a path is read relative to it."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no space file at {path}") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"{path} is not YAML: {getattr(exc, 'problem', exc)}{where}") from None
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{path} is not a space file: {exc}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{path} is not a mapping (base: ..., space: ..., objective: ...)")
    return parse_space(
        document, source=str(path), text=text, default_name=path.stem, folder=path.parent
    )


def parse_space(
    document: dict[str, Any],
    *,
    source: str,
    text: str,
    default_name: str,
    folder: Path | None = None,
) -> SearchSpace:
    """Validate a space document; the first problem is a one-line ConfigError."""
    try:
        raw = _SpaceFile.model_validate(document)
    except ValidationError as exc:
        raise _one_line(exc, source) from None
    base = _base(raw.base, source=source, folder=folder)
    name = raw.study or (default_name if _valid_name(default_name) else "study")
    for path in raw.space:
        if is_secret_name(path):
            raise ConfigError(
                f"{source}: space: {path} names a secret; a secret is not searched "
                "(every trial's settings are stored with the study)",
                hint="set it in base",
            )
    params = [
        param_from_yaml(path, given, base, source=source) for path, given in raw.space.items()
    ]
    _check_layout_params(params, source)
    load = _load(raw.load, source)
    workload = _workload(raw.workload, source)
    objectives = _objectives(raw.objective, load, source)
    constraints = [
        parse_constraint(text, load, objectives[0], source=source) for text in raw.constraints
    ]
    slo_ms = parse_slos(raw.slo) if raw.slo else None
    goodput = [o.metric for o in objectives] + [c.metric for c in constraints]
    if slo_ms is None and ({"request_goodput", "good_fraction"} & set(goodput)):
        raise ConfigError(f"{source}: goodput needs SLOs", hint="add slo: ttft=2s,tpot=50ms")
    _check_capacity(raw, objectives, load, slo_ms, source)
    _check_cost(objectives, constraints, slo_ms, source)
    budget = (
        parse_duration_s(raw.time_budget, what=f"{source}: time_budget")
        if raw.time_budget
        else None
    )
    if raw.sampler == "grid" and any(p.grid_size() is None for p in params):
        raise ConfigError(f"{source}: sampler grid needs lists or stepped int ranges only")
    inlined = {**document, "base": base.model_dump(mode="json", exclude_defaults=True)}
    return SearchSpace(
        name=name,
        source=source,
        text=_redacted_text(text, document, inlined),
        document=redact_document(inlined),
        base=base,
        gpus=raw.gpus,
        params=params,
        workload=workload,
        load=load,
        objectives=objectives,
        constraints=constraints,
        slo_ms=slo_ms,
        attainment=raw.attainment if raw.attainment is not None else DEFAULT_ATTAINMENT,
        trials=raw.trials,
        time_budget_s=budget,
        early_stop=raw.early_stop,
        sampler=raw.sampler,
        seed=raw.seed,
        diagnose_seeds=raw.diagnose_seeds,
        quality=raw.quality.spec() if raw.quality is not None else None,
    )


def with_quality_tolerance(space: SearchSpace, tolerance: float) -> SearchSpace:
    """`tune run --quality-tolerance`: the space with that tolerance, in its document too,
    so that it is part of the study's question and every worker reads it from the storage."""
    given = space.document.get("quality")
    block = {**(given if isinstance(given, dict) else {}), "tolerance": tolerance}
    try:
        raw = _QualityFile.model_validate(block)
    except ValidationError as exc:
        message = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise ConfigError(f"--quality-tolerance: {message}") from None
    document = {**space.document, "quality": block}
    return space.model_copy(update={"quality": raw.spec(), "document": document})


def _redacted_text(text: str, *documents: dict[str, Any]) -> str:
    """The file's text with the secrets of its documents masked, comments kept; the masked
    document as YAML where a secret is too short to be replaced safely in the text. Each
    secret is registered, so the files the study writes later are scrubbed of it too."""
    import yaml

    secrets = frozenset().union(*(document_secrets(d) for d in documents))
    for value in secrets:
        register_secret(value)
    scrubbed = _mask_in_yaml(text, secrets)
    if any(len(value) < MIN_SECRET_LEN for value in secrets) or _still_secret(scrubbed):
        return yaml.safe_dump(redact_document(documents[0]), sort_keys=False)
    return scrubbed


def _mask_in_yaml(text: str, secrets: frozenset[str]) -> str:
    """Each secret replaced by the mask, quoted where it stood as a whole plain YAML value
    (a bare `***` would read as an alias), so the text still parses."""
    import re

    for value in sorted(secrets, key=len, reverse=True):
        text = re.sub(
            re.escape(value),
            lambda m: MASK if _inside_scalar(m.string, m.start()) else f"'{MASK}'",
            text,
        )
    return scrub_values(text, frozenset())


def _inside_scalar(text: str, start: int) -> bool:
    """Whether the text before `start` continues a scalar (a quote, `--flag=`, a word)."""
    return start > 0 and text[start - 1] not in " \t\n[{,:-"


def _still_secret(text: str) -> bool:
    """Whether a secret survived in the text (written in another form: quoted, escaped)."""
    import yaml

    try:
        parsed = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError):
        return True
    return bool({value.strip("'\"") for value in document_secrets(parsed)} - {MASK})


def _base(given: dict[str, Any] | str, *, source: str, folder: Path | None) -> EngineSpec:
    if isinstance(given, str):
        path = Path(given)
        if not path.is_absolute() and folder is not None:
            path = folder / path
        return load_spec(path)
    return parse_spec(given, source=f"{source}: base")


def _check_layout_params(params: list[Param], source: str) -> None:
    paths = {p.path for p in params}
    if "layout" in paths and paths & set(LAYOUT_NAMES):
        both = sorted(paths & set(LAYOUT_NAMES))[0]
        raise ConfigError(f"{source}: space has both layout and {both}; give one of them")


def _load(raw: _LoadFile, source: str) -> LoadPlan:
    if raw.concurrency is not None and raw.request_rate is not None:
        raise ConfigError(f"{source}: load takes concurrency or request_rate, not both")
    if raw.duration is not None and raw.num_requests is not None:
        raise ConfigError(f"{source}: load takes duration or num_requests, not both")
    if raw.request_rate is not None:
        mode = LoadMode.REQUEST_RATE
        levels = [float(v) for v in _as_list(raw.request_rate)]
    else:
        mode = LoadMode.CONCURRENCY
        levels = [float(v) for v in _as_list(raw.concurrency if raw.concurrency else [1])]
    if not levels or any(v <= 0 or not math.isfinite(v) for v in levels):
        raise ConfigError(f"{source}: load levels must be positive numbers")
    if mode is LoadMode.CONCURRENCY and any(v != int(v) or v > 100_000 for v in levels):
        raise ConfigError(f"{source}: concurrency levels are whole numbers up to 100000")
    duration = raw.duration
    duration_s = (
        parse_duration_s(str(duration), what=f"{source}: load.duration")
        if isinstance(duration, str)
        else float(duration)
        if duration is not None
        else None
    )
    if duration_s is not None and not duration_s > 0:
        raise ConfigError(f"{source}: load.duration must be positive")
    return LoadPlan(
        mode=mode,
        levels=levels,
        duration_s=duration_s,
        num_requests=raw.num_requests,
        warmup=raw.warmup,
        stream=raw.stream,
        max_load=raw.max,
    )


def _check_capacity(
    raw: _SpaceFile,
    objectives: list[ObjectiveSpec],
    load: LoadPlan,
    slo_ms: dict[str, float] | None,
    source: str,
) -> None:
    """`capacity` needs the SLO it searches under, one start level and a max above it;
    `load.max` belongs to it alone, `attainment` to it and to `cost`."""
    if all(o.metric != CAPACITY for o in objectives):
        if raw.load.max is not None:
            raise ConfigError(f"{source}: load.max is for objective capacity")
        if raw.attainment is not None and not any(_cheapest(o) for o in objectives):
            raise ConfigError(f"{source}: attainment is for objective capacity or cost")
        return
    if len(objectives) > 1:
        raise ConfigError(f"{source}: capacity is the study's one objective")
    if slo_ms is None:
        raise ConfigError(f"{source}: capacity needs SLOs", hint="add slo: ttft=2s,tpot=50ms")
    if len(load.levels) != 1:
        raise ConfigError(
            f"{source}: objective capacity chooses its own levels: give load one start level "
            "and load.max"
        )
    if load.max_load is not None and load.max_load < load.levels[0]:
        raise ConfigError(f"{source}: load.max is under the start level")


def _check_cost(
    objectives: list[ObjectiveSpec],
    constraints: list[Constraint],
    slo_ms: dict[str, float] | None,
    source: str,
) -> None:
    """`cost` without a level is read at the cheapest level meeting the SLO: it needs one."""
    unplaced = any(_cheapest(o) for o in objectives) or any(
        c.metric == COST and c.at is None for c in constraints
    )
    if unplaced and slo_ms is None:
        raise ConfigError(
            f"{source}: cost is read at the cheapest level that meets the SLO: give slo",
            hint="add slo: ttft=2s,tpot=50ms, or read it at one level: cost@64",
        )


def _cheapest(objective: ObjectiveSpec) -> bool:
    return objective.metric == COST and objective.at is None


def _workload(raw: _WorkloadFile, source: str) -> WorkloadSpec:
    try:
        dataset, path = parse_dataset(raw.dataset)
    except ConfigError as exc:
        raise ConfigError(f"{source}: workload.dataset: {exc}") from None
    return WorkloadSpec(
        dataset=dataset,
        path=path,
        input_len=raw.input_len,
        output_len=raw.output_len,
        range_ratio=raw.range_ratio,
        shared_prefix_len=raw.shared_prefix_len,
        seed=raw.seed,
    )


def _objectives(
    given: str | dict[str, Any] | list[str | dict[str, Any]], load: LoadPlan, source: str
) -> list[ObjectiveSpec]:
    items = given if isinstance(given, list) else [given]
    if not 1 <= len(items) <= MAX_OBJECTIVES:
        raise ConfigError(f"{source}: objective takes one or two metrics, not {len(items)}")
    objectives = [parse_objective(item, load, source=source) for item in items]
    labels = [o.label for o in objectives]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"{source}: the two objectives are the same ({labels[0]})")
    return objectives


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _valid_name(name: str) -> bool:
    return bool(name) and len(name) <= 100 and all(c.isalnum() or c in "._-" for c in name)


def _one_line(exc: ValidationError, source: str) -> ConfigError:
    error = exc.errors()[0]
    loc = [str(part) for part in error["loc"]]
    if error["type"] == "extra_forbidden":
        *parent, key = loc
        models: dict[str, type[BaseModel]] = {
            "load": _LoadFile,
            "workload": _WorkloadFile,
            "quality": _QualityFile,
        }
        model = models.get(parent[0], _SpaceFile) if len(parent) == 1 else _SpaceFile
        known = list(model.model_fields)
        close = difflib.get_close_matches(key, known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
        where = f" in {'.'.join(parent)}" if parent else ""
        return ConfigError(f"{source}: unknown key {key!r}{where}", hint=hint)
    if loc == ["base"]:
        return ConfigError(
            f"{source}: base must be an engine spec (a mapping) or a spec file's path"
        )
    if loc == ["quality"] or (loc == ["quality", "tolerance"] and error["type"] == "missing"):
        return ConfigError(
            f"{source}: quality needs a tolerance", hint="quality: {tolerance: 0.01, prompts: 32}"
        )
    message = error["msg"].removeprefix("Value error, ")
    return ConfigError(f"{source}: {'.'.join(loc) or 'space'}: {message}")
