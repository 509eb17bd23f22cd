"""Built-in presets: published sizes, the embedded engine's twin, lookups."""

from __future__ import annotations

import pytest

from servelab.core.errors import ConfigError
from servelab.engines.embedded.presets import VOCAB_SIZE, get_preset
from servelab.model.params import count_params
from servelab.model.presets import MODEL_PRESETS, resolve_model


def test_the_issue_presets_exist():
    wanted = {"glm-5-nvfp4", "deepseek-v3", "qwen3-30b-a3b", "llama-3.1-8b", "llama-3.1-70b"}
    assert wanted | {"h200-ref"} <= set(MODEL_PRESETS)


@pytest.mark.parametrize(
    "name", [n for n, p in MODEL_PRESETS.items() if p.published_total_params is not None]
)
def test_presets_land_on_their_published_sizes(name):
    preset = MODEL_PRESETS[name]
    counts = count_params(preset.config)
    assert counts.total_params == pytest.approx(preset.published_total_params, rel=0.01)
    # Zhipu counts GLM's active parameters without embeddings; the others with them.
    glm = preset.config.family == "glm_moe_dsa"
    active = counts.active_params_excluding_embeddings if glm else counts.active_params
    assert active == pytest.approx(preset.published_active_params, rel=0.03)


def test_glm5_public_figures():
    config = MODEL_PRESETS["glm-5-nvfp4"].config
    assert (config.layers, config.hidden, config.experts, config.experts_per_token) == (
        78,
        6144,
        256,
        8,
    )
    assert config.dense_layers == (0, 1, 2)
    assert config.sparse_attention is not None and config.sparse_attention.index_topk == 2048


def test_h200_ref_equals_the_embedded_engine_preset():
    embedded = get_preset("h200-ref")
    config = MODEL_PRESETS["h200-ref"].config
    assert config.vocab == VOCAB_SIZE
    assert (config.hidden, config.layers, config.heads, config.kv_heads, config.head_dim) == (
        embedded.hidden_size,
        embedded.num_hidden_layers,
        embedded.num_attention_heads,
        embedded.num_key_value_heads,
        embedded.head_dim,
    )
    counts = count_params(config)
    assert counts.total_params == embedded.parameter_count()
    assert counts.active_params == embedded.active_parameter_count()


def test_resolve_model(tmp_path):
    config, preset = resolve_model("GLM-5-NVFP4")
    assert preset is not None and preset.name == "glm-5-nvfp4"
    assert config is preset.config
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ConfigError, match="lacks"):
        resolve_model(str(tmp_path))
    with pytest.raises(ConfigError, match=r"unknown model 'nope'.*glm-5-nvfp4"):
        resolve_model("nope")
