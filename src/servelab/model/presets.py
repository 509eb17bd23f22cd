"""Built-in models, with where each figure comes from and which ones are assumed.

Architecture figures are the models' public config.json values (as transformers'
configuration classes read them); a preset's `assumed` lists what is not printed there.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from servelab.core.errors import ConfigError
from servelab.model.configs import MlaSpec, ModelConfig, SparseAttentionSpec, load_config
from servelab.model.formats import Format
from servelab.model.kernels import KernelStyle

__all__ = ["MODEL_PRESETS", "ModelPreset", "resolve_model"]


class ModelPreset(BaseModel):
    """A named model with its usual checkpoint format and, where one is typical, deployment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str
    source: str = Field(description="Where the architecture figures come from.")
    config: ModelConfig
    weights: Format = Field(description="The checkpoint's weight format, the default plan.")
    gpu: str | None = Field(default=None, description="GPU slug of the typical deployment.")
    gpus: int | None = Field(default=None, description="GPU count of the typical deployment.")
    kernels: KernelStyle = Field(
        default=KernelStyle.FUSED, description="Whose kernels it usually runs (kernel floor)."
    )
    published_total_params: float | None = None
    published_active_params: float | None = None
    assumed: tuple[str, ...] = Field(default=(), description="Figures not from the source.")


_GLM5 = ModelConfig(
    family="glm_moe_dsa",
    layers=78,
    hidden=6144,
    heads=64,
    kv_heads=64,
    head_dim=256,
    attention="mla",
    mla=MlaSpec(
        q_lora_rank=2048,
        kv_lora_rank=512,
        qk_nope_head_dim=192,
        qk_rope_head_dim=64,
        v_head_dim=256,
    ),
    sparse_attention=SparseAttentionSpec(index_topk=2048, index_n_heads=32, index_head_dim=128),
    dense_intermediate=12288,
    moe_intermediate=2048,
    experts=256,
    experts_per_token=8,
    shared_intermediate=2048,
    first_k_dense=3,
    vocab=154880,
    mtp_layers=1,
    checkpoint_format="nvfp4",
)

_DEEPSEEK_V3 = ModelConfig(
    family="deepseek_v3",
    layers=61,
    hidden=7168,
    heads=128,
    kv_heads=128,
    head_dim=192,
    attention="mla",
    mla=MlaSpec(
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
    ),
    dense_intermediate=18432,
    moe_intermediate=2048,
    experts=256,
    experts_per_token=8,
    shared_intermediate=2048,
    first_k_dense=3,
    vocab=129280,
    mtp_layers=1,
    checkpoint_format="fp8",
)

_QWEN3_30B_A3B = ModelConfig(
    family="qwen3_moe",
    layers=48,
    hidden=2048,
    heads=32,
    kv_heads=4,
    head_dim=128,
    qk_norm=True,
    dense_intermediate=6144,
    moe_intermediate=768,
    experts=128,
    experts_per_token=8,
    vocab=151936,
)


def _llama31(layers: int, hidden: int, heads: int, intermediate: int) -> ModelConfig:
    return ModelConfig(
        family="llama",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=8,
        head_dim=128,
        dense_intermediate=intermediate,
        vocab=128256,
    )


# The embedded engine's GPU preset (servelab.engines.embedded.presets, "h200-ref"),
# repeated here because model/ may not import engines/; a test keeps the two equal.
_H200_REF = ModelConfig(
    family="qwen3_moe",
    layers=16,
    hidden=2048,
    heads=16,
    kv_heads=4,
    head_dim=128,
    qk_norm=True,
    dense_intermediate=0,
    moe_intermediate=768,
    experts=32,
    experts_per_token=8,
    vocab=2048,
)

# The embedded engine's CPU preset ("tiny"), repeated for the same reason; it runs in
# float32 on a CPU (servelab.model.cpu), so it has no GPU deployment.
_TINY = ModelConfig(
    family="qwen3_moe",
    layers=2,
    hidden=256,
    heads=4,
    kv_heads=2,
    head_dim=64,
    qk_norm=True,
    dense_intermediate=0,
    moe_intermediate=128,
    experts=4,
    experts_per_token=2,
    vocab=2048,
)

MODEL_PRESETS: dict[str, ModelPreset] = {
    preset.name: preset
    for preset in (
        ModelPreset(
            name="glm-5-nvfp4",
            description="GLM-5 (744B, 40B active, DSA) in NVFP4: the DESIGN.md deployment.",
            source=(
                "zai-org/GLM-5 config.json, as transformers' GlmMoeDsaConfig defaults "
                "(checkpoint zai-org/GLM-5) and the GLM-5.1 config.json repeat it"
            ),
            config=_GLM5,
            weights=Format.NVFP4,
            gpu="rtx-pro-6000",
            gpus=8,
            published_total_params=744e9,
            published_active_params=40e9,
            assumed=(
                "weights: routed experts, dense MLPs and the shared expert NVFP4; attention "
                "BF16 (lukealonso/GLM-5-NVFP4 keeps attention BF16; override with "
                "--attention-weights)",
                "published 40B active excludes embeddings and LM head (Zhipu's convention)",
            ),
        ),
        ModelPreset(
            name="deepseek-v3",
            description="DeepSeek-V3 (671B, 37B active, MLA) in its native FP8.",
            source="deepseek-ai/DeepSeek-V3 config.json",
            config=_DEEPSEEK_V3,
            weights=Format.FP8,
            published_total_params=671e9,
            published_active_params=37e9,
        ),
        ModelPreset(
            name="qwen3-30b-a3b",
            description="Qwen3-30B-A3B (30.5B, 3.3B active, 128 experts).",
            source="Qwen/Qwen3-30B-A3B config.json",
            config=_QWEN3_30B_A3B,
            weights=Format.BF16,
            published_total_params=30.5e9,
            published_active_params=3.3e9,
        ),
        ModelPreset(
            name="llama-3.1-8b",
            description="Llama 3.1 8B, dense, GQA with 8 KV heads.",
            source="meta-llama/Llama-3.1-8B config.json",
            config=_llama31(32, 4096, 32, 14336),
            weights=Format.BF16,
            published_total_params=8.03e9,
            published_active_params=8.03e9,
        ),
        ModelPreset(
            name="llama-3.1-70b",
            description="Llama 3.1 70B, dense, GQA with 8 KV heads.",
            source="meta-llama/Llama-3.1-70B config.json",
            config=_llama31(80, 8192, 64, 28672),
            weights=Format.BF16,
            published_total_params=70.6e9,
            published_active_params=70.6e9,
        ),
        ModelPreset(
            name="h200-ref",
            description="The embedded engine's GPU model: Qwen3-MoE, 16 layers, 32 experts.",
            source="servelab.engines.embedded.presets 'h200-ref' (random weights, bf16)",
            config=_H200_REF,
            weights=Format.BF16,
            gpu="h200",
            gpus=1,
            kernels=KernelStyle.UNFUSED,  # served by transformers serve
        ),
        ModelPreset(
            name="tiny",
            description="The embedded engine's CPU model: Qwen3-MoE, 2 layers, 4 experts, fp32.",
            source="servelab.engines.embedded.presets 'tiny' (random weights, float32)",
            config=_TINY,
            weights=Format.FP32,
            kernels=KernelStyle.UNFUSED,
        ),
    )
}


def resolve_model(name_or_path: str) -> tuple[ModelConfig, ModelPreset | None]:
    """A preset by name, else a config.json path (or its folder); ConfigError if neither."""
    preset = MODEL_PRESETS.get(name_or_path.strip().lower())
    if preset is not None:
        return preset.config, preset
    path = Path(name_or_path).expanduser()
    if path.exists():
        return load_config(path), None
    raise ConfigError(
        f"unknown model {name_or_path!r}",
        hint=f"a preset ({', '.join(MODEL_PRESETS)}) or a path to a config.json",
    )
