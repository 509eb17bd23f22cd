"""The embedded model's config and seeded random weights, written as a Hub-style checkpoint.

Weights are drawn tensor by tensor straight into the checkpoint dict, in the preset's
dtype, from one seeded CPU generator: no module is built and no default initializer
runs, so the 2.6B-parameter reference takes seconds of sampling, and the bytes depend
only on the preset and the library versions, not on the machine's GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from servelab.engines.embedded.presets import VOCAB_SIZE, EmbeddedPreset

if TYPE_CHECKING:
    import torch

__all__ = ["random_weights", "write_weights"]

ROPE_THETA = 1_000_000.0


def write_weights(preset: EmbeddedPreset, folder: Path, *, special_token_ids: list[int]) -> None:
    """Write config.json, generation_config.json and model.safetensors for `preset`."""
    from safetensors.torch import save_file
    from transformers import GenerationConfig, Qwen3MoeConfig

    # head_dim is a real Qwen3MoeConfig argument that transformers' type hints leave out.
    untyped: dict[str, Any] = {"head_dim": preset.head_dim}
    Qwen3MoeConfig(
        architectures=["Qwen3MoeForCausalLM"],
        dtype=preset.dtype,
        vocab_size=VOCAB_SIZE,
        hidden_size=preset.hidden_size,
        intermediate_size=preset.moe_intermediate_size,
        num_hidden_layers=preset.num_hidden_layers,
        num_attention_heads=preset.num_attention_heads,
        num_key_value_heads=preset.num_key_value_heads,
        **untyped,
        moe_intermediate_size=preset.moe_intermediate_size,
        num_experts=preset.num_experts,
        num_experts_per_tok=preset.num_experts_per_tok,
        norm_topk_prob=True,
        max_position_embeddings=preset.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    ).save_pretrained(folder)
    # No EOS: every request runs to its max_tokens, so output lengths are exact. Greedy:
    # the same prompt gives the same text on every run.
    GenerationConfig(do_sample=False, bos_token_id=None, eos_token_id=None).save_pretrained(folder)
    tensors = random_weights(preset, special_token_ids=special_token_ids)
    checkpoint = folder / "model.safetensors"
    save_file(tensors, str(checkpoint), metadata={"format": "pt"})
    checkpoint.chmod(0o644)  # safetensors creates it 0600; a shared cache needs it readable


def random_weights(
    preset: EmbeddedPreset, *, special_token_ids: list[int]
) -> dict[str, torch.Tensor]:
    """Seeded N(0, init_std) matrices, norms at 1, and lm_head rows of special tokens at 0.

    The zero rows make special tokens unreachable under greedy decoding: their logit is
    exactly 0 while the other ~2,000 logits are independent zero-mean draws given the
    hidden state, so their maximum is positive (all negative has odds 2**-2045). That
    matters because transformers serve skips special tokens when it detokenizes: one
    sampled here would be a generated token with no SSE chunk.
    """
    import torch

    dtype = getattr(torch, preset.dtype)
    generator = torch.Generator().manual_seed(preset.seed)
    tensors: dict[str, torch.Tensor] = {}
    for name, shape in preset.tensor_shapes().items():
        if name.endswith("norm.weight"):
            tensors[name] = torch.ones(shape, dtype=dtype)
        else:
            tensors[name] = torch.empty(shape, dtype=dtype).normal_(
                0.0, preset.init_std, generator=generator
            )
    tensors["lm_head.weight"][special_token_ids] = 0
    return tensors
