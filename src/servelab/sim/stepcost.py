"""How long one engine step takes for the batch it holds: the one number batching needs.

A step runs every decoding request forward by one token and, within the chunked-prefill
budget, some prompt tokens of requests still being prefilled. `StepCost` is the contract
any performance model meets to drive the simulator; `LinearStepCost` is the simple one
used by tests and by the `--step-*` flags. Named profiles live in
`servelab.sim.profiles.PROFILES`: each maps a name to a factory that builds a `StepCost`
from the simulator's settings (`StepSettings`, which `SimConfig` is), so a model-driven
profile (a model, a GPU, a layout) plugs in as one more entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from servelab.core.units import MS_PER_S

__all__ = [
    "LinearStepCost",
    "ScaledStepCost",
    "StepCost",
    "StepCostFactory",
    "StepSettings",
    "WrappedStepCost",
    "linear_step_cost",
]


class StepCost(Protocol):
    """The duration of one step, and the KV cache it has room for."""

    @property
    def kv_capacity_tokens(self) -> int | None:
        """Tokens of KV cache the engine can hold at once; None when unlimited."""
        ...

    def step_s(self, decode_batch: int, decode_context_tokens: int, prefill_tokens: int) -> float:
        """Seconds for one step that decodes `decode_batch` requests holding
        `decode_context_tokens` tokens of context in all, and prefills `prefill_tokens`."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearStepCost:
    """A step costs a fixed base plus a linear term per sequence, context and prompt token.

    base_ms: paid by every step (weights read once per step in a memory-bound decode).
    per_seq_ms: per decoding request (its own compute and sampling).
    per_context_token_ms: per token of context the decoding requests hold (KV reads).
    per_prefill_token_ms: per prompt token prefilled in the step (prefill is compute-bound).
    prefill_step_ms: paid by a step that prefills anything (a real engine launches other
    kernels for it; the twin fits it, the `--step-*` flags leave it at 0).
    """

    base_ms: float
    per_seq_ms: float = 0.0
    per_prefill_token_ms: float = 0.0
    per_context_token_ms: float = 0.0
    prefill_step_ms: float = 0.0
    kv_capacity_tokens: int | None = None

    def step_s(self, decode_batch: int, decode_context_tokens: int, prefill_tokens: int) -> float:
        ms = (
            self.base_ms
            + self.per_seq_ms * decode_batch
            + self.per_context_token_ms * decode_context_tokens
            + self.per_prefill_token_ms * prefill_tokens
            + (self.prefill_step_ms if prefill_tokens > 0 else 0.0)
        )
        return ms / MS_PER_S


@dataclass(frozen=True, slots=True)
class WrappedStepCost:
    """Another StepCost's steps, changed by a subclass's `step_s`, with its cache: the
    shapes the twin reads a fitted cost in, and the simulator's time scale."""

    inner: StepCost

    @property
    def kv_capacity_tokens(self) -> int | None:
        return self.inner.kv_capacity_tokens


@dataclass(frozen=True, slots=True)
class ScaledStepCost(WrappedStepCost):
    """Another StepCost run `time_scale` times faster: the same batches, shorter steps.

    For quick what-ifs: every duration is divided by the scale, so throughputs grow by it
    and their ratios between load levels do not change.
    """

    time_scale: float = 1.0

    def step_s(self, decode_batch: int, decode_context_tokens: int, prefill_tokens: int) -> float:
        return self.inner.step_s(decode_batch, decode_context_tokens, prefill_tokens) / (
            self.time_scale
        )


class StepSettings(Protocol):
    """The simulator's settings a profile's factory reads (`SimConfig` has them all)."""

    @property
    def profile(self) -> str | None: ...
    @property
    def step_base_ms(self) -> float: ...
    @property
    def step_per_seq_ms(self) -> float: ...
    @property
    def prefill_per_token_ms(self) -> float: ...
    @property
    def step_per_context_token_ms(self) -> float: ...
    @property
    def prefill_step_ms(self) -> float: ...
    @property
    def perf_model(self) -> str | None: ...
    @property
    def gpu(self) -> str | None: ...
    @property
    def gpus(self) -> int | None: ...
    @property
    def tp(self) -> int | None: ...
    @property
    def pp(self) -> int: ...
    @property
    def ep(self) -> int: ...
    @property
    def dp(self) -> int: ...
    @property
    def weights(self) -> str | None: ...
    @property
    def kv_dtype(self) -> str: ...
    @property
    def calibrate(self) -> Path | None: ...


StepCostFactory = Callable[[StepSettings], StepCost]
"""Builds a profile's StepCost from the simulator's settings (its flags)."""


def linear_step_cost(settings: StepSettings) -> StepCost:
    """The `--step-*` flags' profile."""
    return LinearStepCost(
        base_ms=settings.step_base_ms,
        per_seq_ms=settings.step_per_seq_ms,
        per_prefill_token_ms=settings.prefill_per_token_ms,
        per_context_token_ms=settings.step_per_context_token_ms,
        prefill_step_ms=settings.prefill_step_ms,
    )
