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


def test_tiny_has_a_few_hundred_thousand_parameters() -> None:
    assert 100_000 < get_preset("tiny").parameter_count() < 1_000_000


def test_h200_ref_has_about_2_6_billion_parameters() -> None:
    count = get_preset("h200-ref").parameter_count()
    assert 2.5e9 < count < 2.7e9


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_analytic_count_matches_the_model_transformers_builds(name: str) -> None:
    preset = get_preset(name)
    assert preset.parameter_count() == _meta_model_parameters(preset)


def test_active_parameters_count_only_the_routed_experts() -> None:
    preset = get_preset("h200-ref")
    per_expert = 3 * preset.hidden_size * preset.moe_intermediate_size
    idle = preset.num_hidden_layers * (preset.num_experts - preset.num_experts_per_tok)
    assert preset.active_parameter_count() == preset.parameter_count() - idle * per_expert
    assert 0.7e9 < preset.active_parameter_count() < 0.9e9


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
