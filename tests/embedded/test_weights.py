from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from servelab.engines.embedded import VOCAB_SIZE, get_preset
from servelab.engines.embedded.tokenizer import SPECIAL_TOKENS


@pytest.fixture(scope="module")
def tiny_model(tiny_dir: Path) -> AutoModelForCausalLM:
    model, info = AutoModelForCausalLM.from_pretrained(tiny_dir, output_loading_info=True)
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set()
    assert info["mismatched_keys"] == set()
    return model


def test_config_is_a_qwen3_moe_without_eos(tiny_dir: Path) -> None:
    config = json.loads((tiny_dir / "config.json").read_text())
    assert config["model_type"] == "qwen3_moe"
    assert config["architectures"] == ["Qwen3MoeForCausalLM"]
    assert config["vocab_size"] == VOCAB_SIZE
    assert config["tie_word_embeddings"] is False
    assert config["eos_token_id"] is None


def test_generation_is_greedy_with_eos_disabled(tiny_dir: Path) -> None:
    generation = GenerationConfig.from_pretrained(tiny_dir)
    assert generation.do_sample is False
    assert generation.eos_token_id is None


def test_checkpoint_loads_with_the_preset_size_and_dtype(tiny_model: AutoModelForCausalLM) -> None:
    preset = get_preset("tiny")
    assert sum(p.numel() for p in tiny_model.parameters()) == preset.parameter_count()
    assert tiny_model.dtype == torch.float32


def test_special_tokens_have_zero_output_rows(tiny_model: AutoModelForCausalLM) -> None:
    rows = tiny_model.lm_head.weight.detach()
    special = list(range(len(SPECIAL_TOKENS)))
    assert torch.count_nonzero(rows[special]) == 0
    assert bool((rows[len(SPECIAL_TOKENS) :].abs().sum(dim=1) > 0).all())


def test_greedy_output_runs_to_max_tokens_without_special_tokens(
    tiny_dir: Path, tiny_model: AutoModelForCausalLM
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    for prompt in ("The weather at the harbor", "x", "How does continuous batching work?"):
        inputs = tokenizer(prompt, return_tensors="pt")
        output = tiny_model.generate(**inputs, max_new_tokens=48)
        generated = output[0, inputs["input_ids"].shape[1] :].tolist()
        assert len(generated) == 48
        assert min(generated) >= len(SPECIAL_TOKENS)
