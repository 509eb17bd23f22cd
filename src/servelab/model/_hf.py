"""Readers of Hugging Face config.json files, one per model_type, into ModelConfig fields.

Key names are transformers' (`src/transformers/models/*/configuration_*.py`) and those
of the models' published config.json files. A missing required key raises KeyError
with the key's name; `load_config` turns that into a ConfigError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["READERS"]

Raw = dict[str, Any]


def _common(raw: Raw) -> Raw:
    heads = int(raw["num_attention_heads"])
    hidden = int(raw["hidden_size"])
    return {
        "layers": int(raw["num_hidden_layers"]),
        "hidden": hidden,
        "heads": heads,
        "kv_heads": int(raw.get("num_key_value_heads") or heads),
        "head_dim": int(raw.get("head_dim") or hidden // heads),
        "vocab": int(raw["vocab_size"]),
        "tie_embeddings": bool(raw.get("tie_word_embeddings", False)),
        "dense_intermediate": int(raw.get("intermediate_size") or 0),
        "checkpoint_format": _checkpoint_format(raw.get("quantization_config")),
    }


def _llama(raw: Raw) -> Raw:
    """Llama, Mistral: GQA, SwiGLU, optional attention bias."""
    return {**_common(raw), "qkv_bias": bool(raw.get("attention_bias", False))}


def _qwen2(raw: Raw) -> Raw:
    """Qwen2: Llama with biases on Q, K and V always."""
    return {**_common(raw), "qkv_bias": True}


def _qwen3(raw: Raw) -> Raw:
    """Qwen3: per-head RMSNorm on Q and K, no biases by default."""
    return {**_llama(raw), "qk_norm": True}


def _qwen_moe_layers(raw: Raw) -> Raw:
    return {
        "experts": int(raw["num_experts"]),
        "experts_per_token": int(raw["num_experts_per_tok"]),
        "moe_intermediate": int(raw["moe_intermediate_size"]),
        "mlp_only_layers": tuple(int(i) for i in raw.get("mlp_only_layers") or ()),
        "sparse_step": int(raw.get("decoder_sparse_step") or 1),
    }


def _qwen2_moe(raw: Raw) -> Raw:
    """Qwen2-MoE: routed experts plus one gated shared expert of its own size."""
    return {
        **_qwen2(raw),
        **_qwen_moe_layers(raw),
        "shared_intermediate": int(raw.get("shared_expert_intermediate_size") or 0),
        "shared_expert_gate": bool(raw.get("shared_expert_intermediate_size")),
    }


def _qwen3_moe(raw: Raw) -> Raw:
    """Qwen3-MoE: Qwen3 attention, routed experts only."""
    return {**_qwen3(raw), **_qwen_moe_layers(raw)}


def _mixtral(raw: Raw) -> Raw:
    """Mixtral: every layer MoE; intermediate_size is the expert's."""
    common = _common(raw)
    return {
        **common,
        "qkv_bias": False,
        "experts": int(raw["num_local_experts"]),
        "experts_per_token": int(raw["num_experts_per_tok"]),
        "moe_intermediate": common["dense_intermediate"],
    }


def _deepseek_moe(raw: Raw) -> Raw:
    """DeepSeek-style MoE blocks: routed + shared experts after `first_k_dense_replace`."""
    moe_intermediate = int(raw["moe_intermediate_size"])
    first_k = int(raw.get("first_k_dense_replace") or 0)
    layers = int(raw["num_hidden_layers"])
    freq = int(raw.get("moe_layer_freq") or 1)
    types = raw.get("mlp_layer_types")
    if types:
        # GLM-5 spells the pattern out; it wins over first_k_dense_replace.
        dense = tuple(i for i, kind in enumerate(types) if kind == "dense")
        first_k, only = 0, dense
    else:
        only = tuple(i for i in range(first_k, layers) if i % freq)
    return {
        "experts": int(raw.get("n_routed_experts") or raw["num_experts"]),
        "experts_per_token": int(raw["num_experts_per_tok"]),
        "moe_intermediate": moe_intermediate,
        "shared_intermediate": int(raw.get("n_shared_experts") or 0) * moe_intermediate,
        "first_k_dense": first_k,
        "mlp_only_layers": only,
        "mtp_layers": int(raw.get("num_nextn_predict_layers") or 0),
    }


def _mla(raw: Raw) -> Raw:
    """DeepSeek-V2/V3 and GLM-5 attention: Q and KV through low-rank latents."""
    q_lora = raw.get("q_lora_rank")
    nope, rope = int(raw["qk_nope_head_dim"]), int(raw["qk_rope_head_dim"])
    heads = int(raw["num_attention_heads"])
    return {
        **_common(raw),
        "kv_heads": heads,
        "head_dim": nope + rope,
        "attention": "mla",
        "mla": {
            "q_lora_rank": int(q_lora) if q_lora else None,
            "kv_lora_rank": int(raw["kv_lora_rank"]),
            "qk_nope_head_dim": nope,
            "qk_rope_head_dim": rope,
            "v_head_dim": int(raw["v_head_dim"]),
        },
    }


def _dsa(raw: Raw) -> Raw:
    return {
        "sparse_attention": {
            "index_topk": int(raw["index_topk"]),
            "index_n_heads": int(raw["index_n_heads"]),
            "index_head_dim": int(raw["index_head_dim"]),
        }
    }


def _deepseek_v3(raw: Raw) -> Raw:
    """DeepSeek-V2 and V3: MLA attention, DeepSeek MoE."""
    return {**_mla(raw), **_deepseek_moe(raw)}


def _deepseek_v32(raw: Raw) -> Raw:
    """DeepSeek-V3.2: V3 plus the sparse-attention indexer."""
    return {**_deepseek_v3(raw), **_dsa(raw)}


def _glm4_moe(raw: Raw) -> Raw:
    """GLM-4.5/4.6/4.7: GQA with biases, DeepSeek-style MoE blocks."""
    return {
        **_common(raw),
        "qkv_bias": bool(raw.get("attention_bias", False)),
        "qk_norm": bool(raw.get("use_qk_norm", False)),
        **_deepseek_moe(raw),
    }


def _checkpoint_format(quant: Any) -> str | None:
    """The format a quantization_config declares: fp8, nvfp4 or int4; None if none or other."""
    if not isinstance(quant, dict):
        return None
    method = str(quant.get("quant_method", "")).lower()
    algo = str(quant.get("quant_algo", "")).lower()
    if method == "fp8" or algo == "fp8":
        return "fp8"
    if "nvfp4" in algo or "nvfp4" in str(quant.get("format", "")).lower():
        return "nvfp4"
    if method in ("gptq", "awq") and int(quant.get("bits", 0)) == 4:
        return "int4"
    return None


READERS: dict[str, Callable[[Raw], Raw]] = {
    "llama": _llama,
    "mistral": _llama,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen2_moe": _qwen2_moe,
    "qwen3_moe": _qwen3_moe,
    "mixtral": _mixtral,
    "deepseek_v2": _deepseek_v3,
    "deepseek_v3": _deepseek_v3,
    "deepseek_v32": _deepseek_v32,
    "glm4_moe": _glm4_moe,
    "glm_moe_dsa": _deepseek_v32,  # GLM-5: the same blocks, its own sizes
}
"""model_type -> reader of its config.json into ModelConfig's fields."""
