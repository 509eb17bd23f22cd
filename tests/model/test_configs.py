"""Reading Hugging Face config.json files, and parameter counts against published sizes."""

from __future__ import annotations

import json

import pytest

from servelab.core.errors import ConfigError
from servelab.model.configs import SUPPORTED_FAMILIES, ModelConfig, load_config
from servelab.model.params import count_params
from tests.model.hf_configs import (
    DEEPSEEK_V32,
    GLM5,
    LLAMA_31_8B,
    MIXTRAL_8X7B,
    PUBLISHED,
    QWEN3_30B_A3B,
    QWEN15_MOE_A27B,
)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_counts_match_published_sizes(name):
    raw, total, active, with_embeddings = PUBLISHED[name]
    counts = count_params(load_config(raw))
    ours = counts.active_params if with_embeddings else counts.active_params_excluding_embeddings
    assert counts.total_params == pytest.approx(total, rel=0.01)
    assert ours == pytest.approx(active, rel=0.03)


def test_families_cover_the_issue():
    wanted = {"llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "deepseek_v3", "deepseek_v32"}
    assert wanted | {"glm4_moe", "glm_moe_dsa"} <= set(SUPPORTED_FAMILIES)


def test_glm5_reads_mla_dsa_and_dense_layers():
    config = load_config(GLM5)
    assert config.attention == "mla"
    assert config.mla is not None and config.mla.kv_lora_rank == 512
    assert config.mla.qk_rope_head_dim == 64 and config.mla.v_head_dim == 256
    assert config.sparse_attention is not None and config.sparse_attention.index_topk == 2048
    assert config.dense_layers == (0, 1, 2)
    assert len(config.moe_layers) == 75
    assert config.shared_intermediate == 2048
    assert config.mtp_layers == 1


def test_explicit_mlp_layer_types_win():
    raw = {**GLM5, "mlp_layer_types": ["dense"] * 5 + ["sparse"] * 73}
    assert load_config(raw).dense_layers == (0, 1, 2, 3, 4)


def test_qwen_moe_sparse_step_and_mlp_only_layers():
    raw = {
        **QWEN3_30B_A3B,
        "num_hidden_layers": 8,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [3],
    }
    config = load_config(raw)
    # MoE where (i + 1) % 2 == 0, except layer 3.
    assert config.moe_layers == (1, 5, 7)
    assert config.dense_layers == (0, 2, 3, 4, 6)


def test_qwen2_moe_shared_expert_and_gate():
    config = load_config(QWEN15_MOE_A27B)
    assert config.shared_intermediate == 5632
    assert config.shared_expert_gate
    assert config.qkv_bias


def test_mixtral_every_layer_is_moe():
    config = load_config(MIXTRAL_8X7B)
    assert config.moe_layers == tuple(range(32))
    assert config.moe_intermediate == 14336


def test_checkpoint_format_is_recorded():
    assert load_config(DEEPSEEK_V32).checkpoint_format == "fp8"
    assert load_config(LLAMA_31_8B).checkpoint_format is None
    nvfp4 = {**GLM5, "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}
    assert load_config(nvfp4).checkpoint_format == "nvfp4"


def test_deepseek_moe_layer_freq_becomes_dense_layers():
    raw = {**DEEPSEEK_V32, "num_hidden_layers": 8, "first_k_dense_replace": 1, "moe_layer_freq": 2}
    assert load_config(raw).moe_layers == (2, 4, 6)


def test_reads_a_path_and_a_folder(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_31_8B))
    assert load_config(path) == load_config(tmp_path) == load_config(LLAMA_31_8B)
    assert load_config(str(path)).layers == 32


def test_unknown_model_type_lists_the_supported_ones():
    with pytest.raises(ConfigError, match=r"unsupported model_type 'gpt2'.*supported: llama"):
        load_config({"model_type": "gpt2"})


def test_missing_key_is_named():
    raw = {k: v for k, v in LLAMA_31_8B.items() if k != "hidden_size"}
    with pytest.raises(ConfigError, match=r"llama config\.json lacks 'hidden_size'"):
        load_config(raw)


def test_inconsistent_config_is_one_clear_error():
    with pytest.raises(ConfigError, match="inconsistent"):
        load_config({**LLAMA_31_8B, "num_key_value_heads": 5})


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no model config"), ("{not json", "is not JSON"), ("[1, 2]", "not a JSON object")],
)
def test_bad_files(tmp_path, content, message):
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_model_config_rejects_contradictions():
    with pytest.raises(ValueError, match="experts_per_token"):
        ModelConfig(
            family="x", layers=2, hidden=8, heads=2, kv_heads=2, head_dim=4,
            dense_intermediate=16, vocab=10, experts=4, experts_per_token=5, moe_intermediate=8,
        )  # fmt: skip
