"""Weight and KV-cache formats: how many bits a value costs and which tensor-core rate runs it.

A checkpoint is rarely one format throughout. The conventions assumed here, each
overridable through `weight_plan(..., attention=...)`:

- embeddings, the LM head, routers and norms stay BF16 in every format (DeepSeek-V3's
  FP8 release and NVIDIA Model Optimizer's NVFP4 recipes both leave them unquantized);
- FP8 quantizes every other linear layer, attention included;
- FP32 (a CPU model's dtype, as the embedded engine's tiny preset) is FP32 throughout;
- 4-bit formats (NVFP4, INT4) quantize the MLPs (dense, shared and routed experts) and
  leave attention BF16, as GLM-5-NVFP4 (lukealonso/GLM-5-NVFP4: "only the MoE expert MLP
  layers ... attention layers are left in BF16") and most W4 MoE checkpoints do.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from servelab.core.errors import ConfigError

__all__ = [
    "FORMAT_BITS",
    "KV_DTYPE_BYTES",
    "Format",
    "KvDtype",
    "WeightPlan",
    "parse_format",
    "parse_kv_dtype",
    "weight_plan",
]


class Format(StrEnum):
    """A weight format; the value is the name users type."""

    BF16 = "bf16"
    FP8 = "fp8"
    NVFP4 = "nvfp4"
    INT4 = "int4"
    FP32 = "fp32"


class KvDtype(StrEnum):
    """The KV cache's element type."""

    BF16 = "bf16"
    FP8 = "fp8"
    FP32 = "fp32"


FORMAT_BITS: dict[Format, float] = {
    Format.BF16: 16.0,
    # E4M3 values; DeepSeek's 128x128-block FP32 scales add 0.002 bit/value, left out.
    Format.FP8: 8.0,
    # E2M1 values plus one E4M3 scale per 16 values: 4 + 8/16 (the per-tensor FP32 scale
    # is negligible). NVIDIA, "NVFP4" in the Blackwell architecture technical brief.
    Format.NVFP4: 4.5,
    # GPTQ/AWQ-style symmetric INT4 with one FP16 scale per group of 128: 4 + 16/128.
    Format.INT4: 4.125,
    Format.FP32: 32.0,
}
"""Storage bits per weight value, scales included."""

KV_DTYPE_BYTES: dict[KvDtype, float] = {KvDtype.BF16: 2.0, KvDtype.FP8: 1.0, KvDtype.FP32: 4.0}
"""Bytes per cached K, V or latent element."""


class WeightPlan(BaseModel):
    """The format of each group of weights; `name` is what the user asked for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Format = Field(description="The headline format, e.g. nvfp4.")
    attention: Format = Field(description="Attention projections (and the DSA indexer).")
    mlp: Format = Field(description="Dense MLPs, shared experts and routed experts.")
    embeddings: Format = Field(default=Format.BF16, description="Embedding table and LM head.")
    router: Format = Field(default=Format.BF16, description="Routers (gates) and norms.")


def weight_plan(name: Format | str, *, attention: Format | str | None = None) -> WeightPlan:
    """The conventional plan for format `name`; `attention` overrides the attention format."""
    fmt = parse_format(name)
    if fmt == Format.FP32 and attention is None:
        return WeightPlan(name=fmt, attention=fmt, mlp=fmt, embeddings=fmt, router=fmt)
    if attention is not None:
        attn = parse_format(attention, what="attention weight format")
    elif fmt in (Format.NVFP4, Format.INT4):
        attn = Format.BF16
    else:
        attn = fmt
    return WeightPlan(name=fmt, attention=attn, mlp=fmt)


def parse_format(text: Format | str, *, what: str = "weight format") -> Format:
    """'nvfp4' -> Format.NVFP4; a ConfigError naming the valid ones otherwise."""
    try:
        return Format(str(text).strip().lower())
    except ValueError:
        valid = ", ".join(f.value for f in Format)
        raise ConfigError(f"unknown {what} {text!r}", hint=f"valid: {valid}") from None


def parse_kv_dtype(text: KvDtype | str) -> KvDtype:
    """'fp8' -> KvDtype.FP8; a ConfigError naming the valid ones otherwise."""
    try:
        return KvDtype(str(text).strip().lower())
    except ValueError:
        valid = ", ".join(d.value for d in KvDtype)
        raise ConfigError(f"unknown KV cache dtype {text!r}", hint=f"valid: {valid}") from None
