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
"""

from __future__ import annotations

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

__all__ = ["ModelView"]


@dataclass(frozen=True)
class ModelView:
    """One deployment (and its datasheet twin when a probe calibrated it) at a time scale."""

    deployment: Deployment
    datasheet: Deployment | None = None
    time_scale: float = 1.0

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
        return kv_capacity(self.deployment, input_len, max(output_len, 1)).max_concurrency

    def kv_capacity_tokens(self) -> int:
        return kv_capacity(self.deployment).capacity_tokens

    def variant(self, **update: object) -> ModelView | None:
        """The same deployment with some fields changed (a what-if); None if it cannot fit."""
        dep = self.deployment.model_copy(update=update)
        try:
            kv_capacity(dep)
        except ConfigError:
            return None
        return ModelView(deployment=dep, time_scale=self.time_scale)
