"""The simulator's settings: one keyword-only value object built by `servelab sim`."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servelab.sim.corruption import AFTER_TOKENS_KINDS, Corruption
from servelab.sim.model_profile import CALIBRATED_PROFILES, PROFILE_DEFAULTS
from servelab.sim.policy import ENGINE_POLICIES
from servelab.sim.profiles import PROFILES

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_CHUNKED_PREFILL_SIZE",
    "DEFAULT_ITL_MS",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MODEL",
    "DEFAULT_PORT",
    "DEFAULT_PREFILL_PER_TOKEN_MS",
    "DEFAULT_STEP_BASE_MS",
    "DEFAULT_STEP_PER_SEQ_MS",
    "DEFAULT_TTFT_MS",
    "MAX_MODEL_LEN",
    "UNBOUNDED_PREFIX_CACHE_TOKENS",
    "MetricsStyle",
    "SimConfig",
]

DEFAULT_PORT = 8000
DEFAULT_MODEL = "servelab-sim"
DEFAULT_TTFT_MS = 50.0
DEFAULT_ITL_MS = 20.0
DEFAULT_MAX_TOKENS = 16
"""Output tokens when a request sets neither max_tokens nor max_completion_tokens."""
MAX_MODEL_LEN = 131_072
"""Context length the simulator reports in /tokenize and /v1/models."""
DEFAULT_CHUNKED_PREFILL_SIZE = 8192
"""SGLang's default on GPUs of 35 to 160 GB (H100, H200, A100): server_args.py sets
chunked_prefill_size to 2048 below that, 16384 above it (B200, MI300), 4096 if unknown."""
DEFAULT_BLOCK_SIZE = 16
"""vLLM's: `CacheConfig.DEFAULT_BLOCK_SIZE` (vllm/config/cache.py, 0.32), which its GPU
attention backends keep (its CPU build uses 128)."""
UNBOUNDED_PREFIX_CACHE_TOKENS = 1 << 22
"""The prefix cache's bound when no KV capacity is modelled (fixed timing, or a profile
without one): about 4M tokens, more than a GPU's KV cache usually holds, so that a long
run's memory stays bounded."""
DEFAULT_STEP_BASE_MS = 10.0
"""Linear profile: a step of a mid-sized model on one GPU, dominated by reading weights."""
DEFAULT_STEP_PER_SEQ_MS = 0.05
DEFAULT_PREFILL_PER_TOKEN_MS = 0.02
"""About 50k prompt tokens per second, a mid-sized model's prefill rate on one GPU."""


class MetricsStyle(StrEnum):
    """Whose metric names GET /metrics uses."""

    SGLANG = "sglang"
    VLLM = "vllm"


class SimConfig(BaseModel):
    """How the simulated engine answers: timings, response shape and injected faults.

    Fixed timing (no `profile`): the first text chunk of a request is due `ttft_ms` after
    the request starts and each further chunk `itl_ms` after the previous one's due time.
    A request starts when it is received, or, with `max_running_requests`, once fewer
    than that many are running (it waits in arrival order meanwhile).
    Batching (a `profile`, see `servelab.sim.profiles.PROFILES`): a continuous-batching
    engine whose step times come from the profile's StepCost (see `servelab.sim.batching`);
    `ttft_ms` and `itl_ms` are then unused. It runs in one process (`workers` must be 1).
    The prefix cache (`prefix_cache`, on by default as in vLLM v1 and SGLang) reuses the
    KV of shared prompt prefixes in whole blocks of `block_size` tokens, held in the KV
    capacity (see `servelab.sim.prefix_cache`); in batching a hit saves its prefill.
    Fault rates are per-request probabilities; at most one fault hits a request, so
    their sum must not exceed 1. Corruption (`corruption`, see `servelab.sim.corruption`)
    is planted apart from them: a seeded share of answers arrive whole and on time but
    wrong. `workers > 1` runs that many processes on one port
    (see `servelab.sim.process`); one process sends about 50k chunks/s on one core.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(default="127.0.0.1", description="Address to listen on.")
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535, description="0 picks a free port.")
    model: str = Field(default=DEFAULT_MODEL, description="The one model name served.")
    ttft_ms: float = Field(
        default=DEFAULT_TTFT_MS, ge=0, description="Request received to first text chunk sent."
    )
    itl_ms: float = Field(default=DEFAULT_ITL_MS, ge=0, description="Between text chunks.")
    tokens_per_chunk: int = Field(default=1, ge=1, description="Output tokens per text chunk.")
    reasoning_tokens: int = Field(
        default=0, ge=0, description="Leading output tokens sent as reasoning_content (chat)."
    )
    send_usage: bool = Field(
        default=True,
        description="Report usage: on request in streams, always in non-streaming answers.",
    )
    role_chunk: bool = Field(
        default=True, description="Start chat streams with a role-only chunk, like vLLM."
    )
    reject_fields: list[str] = Field(
        default_factory=list, description="Request fields answered with 422, like transformers."
    )
    fail_rate: float = Field(default=0.0, ge=0, le=1, description="Share answered with 500.")
    drop_rate: float = Field(
        default=0.0, ge=0, le=1, description="Share of streams cut off mid-body."
    )
    malformed_rate: float = Field(
        default=0.0, ge=0, le=1, description="Share of streams with one broken SSE event."
    )
    stall_rate: float = Field(
        default=0.0, ge=0, le=1, description="Share that stop sending but stay open."
    )
    seed: int = Field(default=0, description="Seeds the fault and corruption decisions.")
    corruption: Corruption = Field(
        default=Corruption.NONE,
        description="The corruption planted in answers (none by default); planted, every"
        " request is answered on the quality path.",
    )
    corruption_rate: float = Field(
        default=1.0, ge=0, le=1, description="Share of generation requests corrupted."
    )
    corrupt_after_tokens: int = Field(
        default=0,
        ge=0,
        description="wrong-token and nan-logprobs: output tokens left intact before the"
        " corruption strikes.",
    )
    record_path: Path | None = Field(
        default=None, description="Truth log (JSONL); with workers > 1 one file per worker."
    )
    workers: int = Field(
        default=1, ge=1, description="Processes sharing the port through SO_REUSEPORT."
    )
    max_running_requests: int | None = Field(
        default=None, ge=1, description="Requests generating at once; None: no cap."
    )
    kv_capacity_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Batching: tokens of KV cache; None: the profile's capacity. Fixed"
        " timing: bounds the prefix cache only.",
    )
    prefix_cache: bool = Field(
        default=True,
        description="Reuse the KV of shared prompt prefixes, in whole blocks; on by default,"
        " as vLLM v1's enable_prefix_caching and SGLang's radix cache are.",
    )
    block_size: int = Field(
        default=DEFAULT_BLOCK_SIZE,
        ge=1,
        description="Prefix cache: tokens per block; only full blocks are cached and hit.",
    )
    cache_report: bool = Field(
        default=False,
        description="Put usage.prompt_tokens_details.cached_tokens in answers, as vLLM's"
        " --enable-prompt-tokens-details and SGLang's --enable-cache-report do (both off"
        " by default).",
    )
    chunked_prefill_size: int = Field(
        default=DEFAULT_CHUNKED_PREFILL_SIZE, ge=1, description="Batching: prompt tokens a step."
    )
    step_overhead_ms: float = Field(
        default=0.0, ge=0, description="Batching: added to every step (scheduling, launch)."
    )
    profile: str | None = Field(
        default=None, description="Step-cost profile (batching mode); None: fixed timing."
    )
    step_base_ms: float = Field(
        default=DEFAULT_STEP_BASE_MS, ge=0, description="Linear profile: every step."
    )
    step_per_seq_ms: float = Field(
        default=DEFAULT_STEP_PER_SEQ_MS, ge=0, description="Linear profile: per decoding request."
    )
    prefill_per_token_ms: float = Field(
        default=DEFAULT_PREFILL_PER_TOKEN_MS,
        ge=0,
        description="Linear profile: per prompt token prefilled.",
    )
    step_per_context_token_ms: float = Field(
        default=0.0, ge=0, description="Linear profile: per context token of decoding requests."
    )
    prefill_step_ms: float = Field(
        default=0.0, ge=0, description="Linear profile: paid by a step that prefills anything."
    )
    batch_policy: str = Field(
        default="sim",
        description="Batching: whose admission, budget and preemption rules the batcher "
        "follows (servelab.sim.policy.ENGINE_POLICIES: sim, vllm, sglang, transformers).",
    )
    request_overhead_ms: float = Field(
        default=0.0,
        ge=0,
        description="Batching: from a request's arrival to its entering the scheduler (HTTP, "
        "tokenizer), in ms.",
    )
    metrics_style: MetricsStyle = Field(
        default=MetricsStyle.SGLANG, description="Metric names served at GET /metrics."
    )
    time_scale: float = Field(
        default=1.0,
        gt=0,
        description="Batching: every step lasts 1/time_scale as long (quick what-ifs; "
        "throughputs scale by it, their ratios between loads do not).",
    )
    perf_model: str | None = Field(
        default=None, description="Model profile: a model preset or a config.json path."
    )
    gpu: str | None = Field(default=None, description="Model profile: GPU slug, e.g. 'h200'.")
    gpus: int | None = Field(default=None, ge=1, description="Model profile: GPU count.")
    tp: int | None = Field(default=None, ge=1, description="Model profile: tensor parallel.")
    pp: int = Field(default=1, ge=1, description="Model profile: pipeline parallel.")
    ep: int = Field(default=1, ge=1, description="Model profile: expert parallel.")
    dp: int = Field(default=1, ge=1, description="Model profile: data parallel.")
    weights: str | None = Field(default=None, description="Model profile: weight format.")
    kv_dtype: str = Field(default="bf16", description="Model profile: KV cache dtype.")
    calibrate: Path | None = Field(
        default=None,
        description="Model-timed profiles: a `servelab probe --comm` probe.json whose "
        "measurements (memory, matmul, links, all-reduce) replace the datasheet's.",
    )

    @field_validator("batch_policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value not in ENGINE_POLICIES:
            raise ValueError(f"unknown batch policy {value!r}; one of {', '.join(ENGINE_POLICIES)}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _profile_defaults(cls, data: Any) -> Any:
        """A profile's own settings (PROFILE_DEFAULTS) where the caller gave none."""
        if isinstance(data, dict) and data.get("profile") in PROFILE_DEFAULTS:
            defaults = PROFILE_DEFAULTS[data["profile"]]
            data = {**data, **{k: v for k, v in defaults.items() if data.get(k) is None}}
        return data

    @model_validator(mode="after")
    def _profile_fits(self) -> SimConfig:
        if self.profile is not None and self.profile not in PROFILES:
            names = ", ".join(sorted(PROFILES))
            raise ValueError(f"unknown profile {self.profile!r}; known: {names}")
        if self.calibrate is not None and self.profile not in CALIBRATED_PROFILES:
            names = " or ".join(sorted(CALIBRATED_PROFILES))
            timing = f"the {self.profile} profile" if self.profile else "fixed timing"
            raise ValueError(
                f"--calibrate replaces the model's figures: it needs the {names} profile,"
                f" not {timing}"
            )
        if self.profile is not None and self.workers > 1:
            raise ValueError(
                "a batching engine holds one batch in one process: workers must be 1"
                f" with a step-cost profile, got {self.workers}"
            )
        return self

    @model_validator(mode="after")
    def _corruption_fits(self) -> SimConfig:
        if self.corrupt_after_tokens and self.corruption not in AFTER_TOKENS_KINDS:
            kinds = " and ".join(sorted(AFTER_TOKENS_KINDS))
            raise ValueError(
                f"corrupt_after_tokens places {kinds}, not corruption {self.corruption}"
            )
        return self

    @model_validator(mode="after")
    def _fault_rates_fit(self) -> SimConfig:
        total = self.fail_rate + self.drop_rate + self.malformed_rate + self.stall_rate
        if total > 1.0 + 1e-9:
            raise ValueError(
                f"fault rates add up to {total:g}; fail, drop, malformed and stall rates"
                " together must be at most 1"
            )
        return self
