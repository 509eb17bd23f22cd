"""A decoder's architecture, reduced to the numbers that decide its bytes and FLOPs.

`load_config` reads a Hugging Face `config.json` (or its dict) of the families in
`SUPPORTED_FAMILIES`; the presets in `servelab.model.presets` are the same model.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from servelab.core.errors import ConfigError
from servelab.core.jsonfile import read_json_object
from servelab.model._hf import READERS

__all__ = [
    "SUPPORTED_FAMILIES",
    "MlaSpec",
    "ModelConfig",
    "SparseAttentionSpec",
    "load_config",
]

SUPPORTED_FAMILIES: tuple[str, ...] = tuple(READERS)
"""The `model_type` values `load_config` understands."""


class MlaSpec(BaseModel):
    """Multi-head latent attention (DeepSeek-V2/V3, GLM-5): low-rank Q and a shared KV latent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    q_lora_rank: int | None = Field(gt=0, description="None: Q is a full-rank projection.")
    kv_lora_rank: int = Field(gt=0, description="Width of the cached KV latent.")
    qk_nope_head_dim: int = Field(ge=0)
    qk_rope_head_dim: int = Field(ge=0, description="The RoPE key part, cached beside the latent.")
    v_head_dim: int = Field(gt=0)


class SparseAttentionSpec(BaseModel):
    """DeepSeek sparse attention (V3.2, GLM-5): a small indexer picks top-k past tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index_topk: int = Field(gt=0, description="KV entries one query attends to, at most.")
    index_n_heads: int = Field(gt=0)
    index_head_dim: int = Field(gt=0, description="Width of the indexer key cached per token.")


class ModelConfig(BaseModel):
    """The architecture numbers of one decoder-only model (MoE or dense, GQA or MLA)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str = Field(description="Hugging Face model_type, e.g. 'qwen3_moe'.")
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0, description="GQA key/value heads (MLA: equal to heads).")
    head_dim: int = Field(gt=0, description="Q/K head width (MLA: nope + rope parts).")
    attention: Literal["gqa", "mla"] = "gqa"
    mla: MlaSpec | None = None
    sparse_attention: SparseAttentionSpec | None = Field(
        default=None, description="DSA: attention reads at most index_topk KV entries a token."
    )
    qkv_bias: bool = Field(default=False, description="Biases on the Q, K and V projections.")
    qk_norm: bool = Field(default=False, description="RMSNorm on each Q and K head (Qwen3).")
    dense_intermediate: int = Field(ge=0, description="Intermediate size of dense MLP layers.")
    moe_intermediate: int = Field(default=0, ge=0, description="Intermediate size of an expert.")
    experts: int = Field(default=0, ge=0, description="Routed experts per MoE layer; 0: dense.")
    experts_per_token: int = Field(default=0, ge=0)
    shared_intermediate: int = Field(
        default=0,
        ge=0,
        description="Total intermediate size of the always-on shared expert(s) of a MoE layer.",
    )
    shared_expert_gate: bool = Field(
        default=False, description="A sigmoid gate on the shared expert (Qwen2-MoE)."
    )
    first_k_dense: int = Field(default=0, ge=0, description="Leading layers with a dense MLP.")
    mlp_only_layers: tuple[int, ...] = Field(
        default=(), description="Further layers with a dense MLP (Qwen-MoE mlp_only_layers)."
    )
    sparse_step: int = Field(
        default=1, gt=0, description="Layer i is MoE only if (i + 1) % sparse_step == 0 (Qwen)."
    )
    vocab: int = Field(gt=0)
    tie_embeddings: bool = False
    mtp_layers: int = Field(
        default=0, ge=0, description="Multi-token-prediction layers: recorded, not counted."
    )
    checkpoint_format: str | None = Field(
        default=None, description="The checkpoint's own quantization (fp8, nvfp4), if it says."
    )

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        if (self.attention == "mla") != (self.mla is not None):
            raise ValueError("attention 'mla' needs an mla spec, and only it")
        if self.sparse_attention is not None and self.mla is None:
            raise ValueError("sparse attention (DSA) is modelled on MLA only")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} not a multiple of kv_heads {self.kv_heads}")
        if self.experts:
            if not 0 < self.experts_per_token <= self.experts:
                raise ValueError("experts_per_token must be between 1 and experts")
            if self.moe_intermediate <= 0:
                raise ValueError("a MoE model needs moe_intermediate")
            if not self.moe_layers:
                raise ValueError("experts are set but no layer is a MoE layer")
        elif self.experts_per_token or self.shared_intermediate:
            raise ValueError("experts_per_token and shared experts need experts > 0")
        if self.dense_layers and self.dense_intermediate <= 0:
            raise ValueError("dense MLP layers need dense_intermediate")
        return self

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def moe_layers(self) -> tuple[int, ...]:
        """Indices of the layers whose MLP is routed experts."""
        if not self.experts:
            return ()
        only = set(self.mlp_only_layers)
        return tuple(
            i
            for i in range(self.layers)
            if i >= self.first_k_dense and i not in only and (i + 1) % self.sparse_step == 0
        )

    @property
    def dense_layers(self) -> tuple[int, ...]:
        """Indices of the layers whose MLP is dense."""
        moe = set(self.moe_layers)
        return tuple(i for i in range(self.layers) if i not in moe)


def load_config(source: str | Path | Mapping[str, Any]) -> ModelConfig:
    """A ModelConfig from a Hugging Face config.json path (or its folder, or its dict)."""
    raw = _read(source) if isinstance(source, str | Path) else dict(source)
    family = raw.get("model_type")
    reader = READERS.get(str(family))
    if reader is None:
        raise ConfigError(
            f"unsupported model_type {family!r}", hint=f"supported: {', '.join(READERS)}"
        )
    try:
        fields = reader(raw)
    except KeyError as exc:
        raise ConfigError(f"{family} config.json lacks {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{family} config.json has a bad value: {exc}") from None
    try:
        return ModelConfig.model_validate({**fields, "family": str(family)})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "config"
        raise ConfigError(
            f"{family} config.json is inconsistent: {where}: {first['msg']}"
        ) from None


def _read(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    return read_json_object(path, what="model config")
