"""Parallel layouts: tensor (tp), pipeline (pp), expert (ep) and data (dp) parallelism.

GPUs = tp x pp x dp. Expert parallelism does not add GPUs: it splits the routed experts
of a pipeline stage over ep of that stage's tp x dp GPUs instead of slicing every expert
tp ways (SGLang's --ep-size, vLLM's --enable-expert-parallel).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from servelab.core.errors import ConfigError
from servelab.model.configs import ModelConfig

__all__ = ["LAYOUT_KEYS", "Layout", "check_layout", "parse_layout"]

LAYOUT_KEYS = ("tp", "pp", "ep", "dp")


MAX_DEGREE = 1 << 20
"""No deployment has a million ranks in one dimension; past it the arithmetic overflows."""


class Layout(BaseModel):
    """How the model is spread over the GPUs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tp: int = Field(
        default=1, gt=0, le=MAX_DEGREE, description="Tensor-parallel ranks per pipeline stage."
    )
    pp: int = Field(default=1, gt=0, le=MAX_DEGREE, description="Pipeline stages.")
    ep: int = Field(
        default=1, gt=0, le=MAX_DEGREE, description="Expert-parallel ranks (within tp x dp)."
    )
    dp: int = Field(default=1, gt=0, le=MAX_DEGREE, description="Data-parallel replicas.")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def label(self) -> str:
        """'tp=4,pp=2': the non-trivial parts, tp always."""
        parts = [f"tp={self.tp}"]
        parts += [
            f"{key}={getattr(self, key)}" for key in LAYOUT_KEYS[1:] if getattr(self, key) > 1
        ]
        return ",".join(parts)


def parse_layout(text: str) -> dict[str, int]:
    """'tp=4,pp=2' -> {'tp': 4, 'pp': 2}: the keys given, each a positive whole number."""
    values: dict[str, int] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in LAYOUT_KEYS:
            raise ConfigError(
                f"layout {text!r} is not understood",
                hint=f"key=value pairs with keys {', '.join(LAYOUT_KEYS)}, e.g. tp=4,pp=2",
            )
        try:
            number = int(value)
        except ValueError:
            number = 0
        if number <= 0:
            raise ConfigError(f"layout {text!r}: {key} must be a positive whole number")
        values[key] = number
    return values


def check_layout(layout: Layout, config: ModelConfig, gpus: int) -> None:
    """A ConfigError unless `layout` fits `gpus` GPUs and divides the model's heads and experts."""
    if layout.gpus != gpus:
        raise ConfigError(
            f"layout {layout.label} uses tp x pp x dp = {layout.gpus} GPUs, not {gpus}",
            hint="make --tp x --pp x --dp equal --gpus",
        )
    if config.heads % layout.tp:
        raise ConfigError(f"{config.heads} attention heads do not divide by tp={layout.tp}")
    if config.attention == "gqa" and config.kv_heads % layout.tp and layout.tp % config.kv_heads:
        raise ConfigError(
            f"{config.kv_heads} KV heads and tp={layout.tp}: neither divides the other",
            hint="engines shard KV heads or replicate them, one of the two must divide",
        )
    if layout.pp > config.layers:
        raise ConfigError(f"pp={layout.pp} is more than the model's {config.layers} layers")
    if layout.ep > 1:
        if not config.is_moe:
            raise ConfigError(f"ep={layout.ep} needs a MoE model; this one is dense")
        if (layout.tp * layout.dp) % layout.ep:
            raise ConfigError(
                f"ep={layout.ep} must divide tp x dp = {layout.tp * layout.dp}",
                hint="expert parallelism splits the experts over a stage's GPUs",
            )
        if config.experts % layout.ep:
            raise ConfigError(f"{config.experts} experts do not divide by ep={layout.ep}")
