"""The analytic model, asked the questions the rules have, at the run's own operating points.

A level of a sweep is compared with the model at the batch that was really decoding
(running requests, or an estimate) and the run's own request lengths. The measured TPOT
of a request in continuous batching holds its decode steps and, folded into them, the
prefills of the other requests that start while it decodes: in steady state each of the
b - 1 others starts once per its own lifetime, so

    TPOT_model(b) = step(b, context) + (b - 1) / output x (step(b, context, + input
                    prefill tokens) - step(b, context))

with context = input + output / 2. Every time is divided by `time_scale` (a simulator run
faster than real time), every rate multiplied by it.

Where the run configured a memory share (`MemoryShare`), the KV cache is the one that
engine sizes from that share by its own rule (`servelab.model.configured_cache`), not the
model's default fraction: a share far from the default changes the cache by orders of
magnitude, and each engine reads its share differently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servelab.core.errors import ConfigError
from servelab.model import (
    Deployment,
    KernelFloor,
    StepBreakdown,
    kernel_floor,
    kv_capacity,
    step,
    throughput_curve,
)
from servelab.model.configured_cache import (
    TRANSFORMERS_BATCH_TOKENS,
    ConfiguredCache,
    TransformersBuffers,
    configured_cache,
)
from servelab.model.formats import KV_DTYPE_BYTES

__all__ = ["KV_SOURCE", "MemoryShare", "ModelView"]

KV_SOURCE = "model: KV capacity"
"""The evidence source of the model's cache at its default fraction."""
_SEARCH_STEPS = 60
"""Bisection steps for the share that holds a cache: far below any share's precision."""


@dataclass(frozen=True)
class MemoryShare:
    """A memory share the run configured, with what the engine's rule needs beside the model.

    `engine` names the rule (vllm, sglang, transformers); `total_bytes` is the GPU's
    measured memory (None: the catalogue's), `in_use_bytes` what was in use before the
    engine started (0 when unknown). The transformers settings size its buffers.
    """

    engine: str
    value: float
    source: str
    total_bytes: float | None = None
    in_use_bytes: float = 0.0
    batch_tokens: int = TRANSFORMERS_BATCH_TOKENS
    flash_attention: bool = False
    async_batching: bool = False


@dataclass(frozen=True)
class ModelView:
    """One deployment (and its datasheet twin when a probe calibrated it) at a time scale."""

    deployment: Deployment
    datasheet: Deployment | None = None
    time_scale: float = 1.0
    share: MemoryShare | None = None

    @property
    def label(self) -> str:
        dep = self.deployment
        label = f"{dep.model_name} on {dep.gpus}x {dep.gpu.slug}, {dep.layout.label}"
        return label + (", calibrated by the probe" if dep.calibration is not None else "")

    @property
    def parallel(self) -> bool:
        """Whether steps need collectives (more than one GPU per replica)."""
        layout = self.deployment.layout
        return layout.tp * layout.pp * max(layout.ep, 1) > 1

    def decode(self, batch: float, context: float, *, datasheet: bool = False) -> StepBreakdown:
        """One decode step, in the model's own (unscaled) seconds."""
        dep = self.datasheet if datasheet and self.datasheet is not None else self.deployment
        return step(dep, decode_batch=max(batch, 1e-9), context_tokens=context)

    def kernel_floor(self, batch: float, context: float) -> KernelFloor:
        """The decode step's kernel floor, in the model's own (unscaled) seconds."""
        return kernel_floor(self.deployment, max(batch, 1e-9), context)

    def tpot_ms(
        self, batch: float, input_len: float, output_len: float, *, datasheet: bool = False
    ) -> float:
        """The TPOT a request sees at this batch, others' prefills folded in (see above)."""
        dep = self.datasheet if datasheet and self.datasheet is not None else self.deployment
        context = input_len + output_len / 2
        batch = max(batch, 1.0)
        alone = step(dep, decode_batch=batch, context_tokens=context).step_s
        mixed = step(
            dep, decode_batch=batch, context_tokens=context, prefill_tokens=max(input_len, 1)
        ).step_s
        others = (batch - 1) / max(output_len, 1.0) * (mixed - alone)
        return (alone + others) * 1e3 / self.time_scale

    def prefill_ms(self, input_len: float) -> float:
        """One request's prefill alone, in the run's milliseconds."""
        breakdown = step(self.deployment, prefill_tokens=max(input_len, 1))
        return breakdown.step_s * 1e3 / self.time_scale

    def prefill(self, input_len: float) -> StepBreakdown:
        return step(self.deployment, prefill_tokens=max(input_len, 1))

    def total_tokens_per_s(self, concurrency: int, input_len: int, output_len: int) -> float:
        """The model's closed-loop ceiling at this concurrency (docs/MODEL.md)."""
        [point] = throughput_curve(self.deployment, input_len, output_len, [max(concurrency, 1)])
        return point.total_tokens_per_s * self.time_scale

    def kv_max_concurrency(self, input_len: int, output_len: int) -> int:
        """Requests of this size the model's KV cache holds at once."""
        return self.kv_capacity_tokens() // (input_len + max(output_len, 1))

    def kv_capacity_tokens(self, share: float | None = None) -> int:
        """The whole deployment's cache: by the engine's rule at `share` or, by default, at
        the configured share; at the model's default fraction without a configured one."""
        cache = self.configured_cache(share)
        if cache is None:
            return kv_capacity(self.deployment).capacity_tokens
        return cache.capacity_tokens * self.deployment.layout.dp

    @property
    def kv_source(self) -> str:
        """What the model's KV capacity is, for evidence: which share, by which rule."""
        cache = self.configured_cache()
        if cache is None or self.share is None:
            return KV_SOURCE
        return f"{KV_SOURCE} at the configured memory share ({self.share.source}; {cache.rule})"

    def configured_cache(self, share: float | None = None) -> ConfiguredCache | None:
        """One GPU's cache by the engine's rule at `share` (default: the configured one);
        None without a configured share."""
        if self.share is None:
            return None
        dep, given = self.deployment, self.share
        room = kv_capacity(dep)
        buffers = TransformersBuffers.of(
            dep.model,
            batch_tokens=given.batch_tokens,
            flash_attention=given.flash_attention,
            async_batching=given.async_batching,
            activation_bytes=KV_DTYPE_BYTES[dep.kv_dtype],
        )
        return configured_cache(
            given.engine,
            given.value if share is None else share,
            total_bytes=given.total_bytes or dep.gpu.memory_bytes,
            in_use_bytes=given.in_use_bytes,
            weights_bytes=room.weights_bytes_per_gpu,
            activation_reserve_bytes=room.activation_reserve_bytes,
            kv_bytes_per_token=room.kv_bytes_per_token_per_gpu,
            buffers=buffers,
        )

    def share_for(self, tokens: int) -> float | None:
        """The least share, rounded up to two significant figures, whose cache (the whole
        deployment's) holds `tokens`; None without a configured share, or when all of
        the memory would not hold them."""
        if self.share is None or self.kv_capacity_tokens(1.0) < tokens:
            return None
        low, high = 0.0, 1.0
        for _ in range(_SEARCH_STEPS):
            middle = (low + high) / 2
            if self.kv_capacity_tokens(middle) >= tokens:
                high = middle
            else:
                low = middle
        step = 10.0 ** (math.floor(math.log10(high)) - 1)
        return min(1.0, round(math.ceil(high / step) * step, 12))

    def variant(self, **update: object) -> ModelView | None:
        """The same deployment with some fields changed (a what-if); None if it cannot fit."""
        dep = self.deployment.model_copy(update=update)
        try:
            kv_capacity(dep)
        except ConfigError:
            return None
        return ModelView(deployment=dep, time_scale=self.time_scale, share=self.share)
