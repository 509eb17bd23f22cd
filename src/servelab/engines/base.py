"""The engine adapter protocol and the spec an engine is launched from.

An adapter knows three things about an engine: how to start it (`prepare` then
`command`), how to tell it is ready (`health_path`), and which request fields it
accepts (`pinning_fields`, `has_tokenize`), so the load generator only sends what the
engine understands.

Adapters may also carry these optional attributes, read with `getattr` so that a
minimal adapter (a test's stub) still works:

- `models_path`: "/v1/models" when the engine lists its models; the launcher waits for
  it after the health check, since some engines answer /health before they serve.
- `metrics_path`: "/metrics" when the engine exports Prometheus metrics.
- `program(spec)`: the leading part of `command` that is not the engine's own flags
  (`python -m sglang.launch_server`), so flag validation skips it.
- `cli`: a `servelab.engines.flagcheck.CliFlags`, where to find the engine's flag list.
"""

from __future__ import annotations

import shlex
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "DEFAULT_STARTUP_TIMEOUT_S",
    "KNOB_NAMES",
    "LAYOUT_NAMES",
    "PINNING_FIELDS",
    "EngineAdapter",
    "EngineSpec",
    "Knobs",
    "SettlesAfterStart",
]

DEFAULT_STARTUP_TIMEOUT_S = 600.0

# Request fields that pin the output length; sent only to engines that accept them.
PINNING_FIELDS: frozenset[str] = frozenset({"ignore_eos", "min_tokens"})

LAYOUT_NAMES = ("tp", "pp", "ep", "dp")
"""Parallel layout fields of a spec: tensor, pipeline, expert and data parallel sizes."""


class Knobs(BaseModel):
    """Settings every engine has in some form, each mapped to the engine's own flag.

    None leaves the engine's default. A knob set for an engine that has no such setting
    is an error that names the engine (a silent drop would benchmark something else).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_running_requests: int | None = Field(
        default=None, ge=1, description="Requests decoded at once; the rest wait in a queue."
    )
    cuda_graphs: bool | None = Field(default=None, description="Capture decode in CUDA graphs.")
    prefix_cache: bool | None = Field(
        default=None, description="Reuse the KV cache of shared prompt prefixes."
    )
    chunked_prefill_size: int | None = Field(
        default=None, ge=-1, description="Prompt tokens prefilled per step; -1 disables (SGLang)."
    )
    mem_fraction: float | None = Field(
        default=None, gt=0, le=1, description="Fraction of GPU memory the engine may take."
    )
    kv_cache_tokens: int | None = Field(
        default=None,
        ge=1,
        description="KV cache size in tokens, never as a share of memory (each engine's own "
        "flag: transformers --cb-num-blocks, vLLM --num-gpu-blocks-override, SGLang "
        "--max-total-tokens).",
    )
    kv_cache_dtype: str | None = Field(default=None, description="KV cache data type (fp8_e4m3).")
    quantization: str | None = Field(default=None, description="Weight quantization method.")
    attention_backend: str | None = Field(default=None, description="Attention kernels.")
    moe_backend: str | None = Field(default=None, description="MoE kernels.")
    max_batch_tokens: int | None = Field(
        default=None, ge=1, description="Tokens in one prefill batch or scheduler step."
    )
    max_model_len: int | None = Field(
        default=None, ge=1, description="Longest sequence (prompt and output) in tokens."
    )

    def given(self) -> dict[str, Any]:
        """The knobs that are set, in declaration order."""
        return {key: value for key, value in self if value is not None}


KNOB_NAMES: tuple[str, ...] = tuple(Knobs.model_fields)


class EngineSpec(BaseModel):
    """What to launch: the engine, its model, its layout and knobs, and native extras."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: str = Field(
        description="Adapter name in the registry: sglang, vllm, transformers, embedded, sim, "
        "openai."
    )
    model: str | None = Field(
        default=None, description="Model path, hub id, or preset name (embedded)."
    )
    served_name: str | None = Field(default=None, description="Name the model is served under.")
    url: str | None = Field(default=None, description="Endpoint of an engine not launched here.")
    host: str | None = Field(default=None, description="Address to listen on; default 127.0.0.1.")
    port: int | None = Field(
        default=None, ge=1, le=65535, description="Port to listen on; default a free one."
    )
    tp: int = Field(default=1, ge=1, description="Tensor parallel size.")
    pp: int = Field(default=1, ge=1, description="Pipeline parallel size.")
    ep: int = Field(default=1, ge=1, description="Expert parallel size.")
    dp: int = Field(default=1, ge=1, description="Data parallel size.")
    knobs: Knobs = Field(default_factory=Knobs, description="Common settings, mapped per engine.")
    device: str | None = Field(default=None, description="Device for engines that take one.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment added on launch.")
    extra_args: list[str] = Field(default_factory=list, description="Native flags passed through.")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Adapter-specific settings (the simulator's timings, `python` for SGLang, "
        "transformers and vLLM's module form, `executable` for the `vllm` program).",
    )
    startup_timeout_s: float = Field(default=DEFAULT_STARTUP_TIMEOUT_S, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _flatten_layout(cls, data: Any) -> Any:
        """Accept `layout: {tp: 8}` as well as top-level `tp: 8`."""
        if not isinstance(data, dict) or "layout" not in data:
            return data
        layout = data["layout"]
        if not isinstance(layout, dict):
            raise ValueError("layout must be a mapping of tp, pp, ep, dp")
        unknown = sorted(set(layout) - set(LAYOUT_NAMES), key=str)  # YAML keys: any type
        if unknown:
            known = ", ".join(LAYOUT_NAMES)
            raise ValueError(f"unknown key {unknown[0]!r} in layout (known: {known})")
        twice = sorted(set(layout) & set(data), key=str)
        if twice:
            raise ValueError(f"{twice[0]} is given both at the top level and under layout")
        return {**{k: v for k, v in data.items() if k != "layout"}, **layout}

    @field_validator("env", mode="before")
    @classmethod
    def _numbers_as_text(cls, env: Any) -> Any:
        """`NCCL_IB_DISABLE: 1` in YAML is the string "1" in the environment."""
        if not isinstance(env, dict):
            return env
        return {
            key: str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v
            for key, v in env.items()
        }

    @field_validator("extra_args", mode="before")
    @classmethod
    def _split_text(cls, extra_args: Any) -> Any:
        """One string of flags is split as a shell would."""
        return shlex.split(extra_args) if isinstance(extra_args, str) else extra_args

    @property
    def layout(self) -> dict[str, int]:
        """The parallel sizes, by name."""
        return {name: getattr(self, name) for name in LAYOUT_NAMES}

    @property
    def gpus_needed(self) -> int:
        """tp x pp x dp; SGLang's DP attention runs its dp ranks inside the tp group."""
        if self.engine == "sglang" and "--enable-dp-attention" in self.extra_args:
            return self.tp * self.pp
        return self.tp * self.pp * self.dp


@runtime_checkable
class EngineAdapter(Protocol):
    """One serving engine, as the launcher and the load generator see it."""

    name: str
    description: str
    launches: bool
    """False for endpoints servelab attaches to rather than starts."""
    health_path: str
    pinning_fields: frozenset[str] | None
    """Accepted output-pinning fields; None when unknown (the client probes and drops)."""
    has_tokenize: bool | None
    """Whether POST /tokenize exists; None when unknown (the client asks)."""

    def prepare(self, spec: EngineSpec) -> EngineSpec:
        """Make what the engine needs (model files...) and return the spec to launch."""
        ...

    def command(self, spec: EngineSpec, *, host: str, port: int) -> list[str]:
        """The argv that starts the engine on host:port."""
        ...


@runtime_checkable
class SettlesAfterStart(Protocol):
    """An adapter with something to adjust once its engine answers (a process's priority,
    which only exists once the engine has forked it)."""

    def settle(self, spec: EngineSpec, session_id: int) -> dict[str, Any]:
        """Adjust the running engine of session `session_id`; what was set, for the run."""
        ...
