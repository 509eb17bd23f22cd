"""Parameter counts by component: all of them, and those one token's forward pass uses.

Counted from the tensor shapes each architecture creates (SwiGLU MLPs: gate, up and
down; no biases but the ones the config asks for). MTP layers are left out: they are
not part of the plain decode path.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from servelab.model.configs import ModelConfig

__all__ = ["ComponentParams", "LayerParams", "ParamCounts", "count_params", "layer_params"]


class LayerParams(BaseModel):
    """Parameters of one layer's parts; the performance model scales these per GPU."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    attention: int = Field(description="Q, K, V (or MLA) and output projections, DSA indexer.")
    dense_mlp: int = Field(description="One dense MLP (in a dense layer).")
    expert: int = Field(description="One routed expert.")
    shared_experts: int = Field(description="The shared expert(s) of one MoE layer.")
    router: int = Field(description="The router (and shared-expert gate) of one MoE layer.")
    norms: int = Field(description="The norm weights of one layer.")


class ComponentParams(BaseModel):
    """A parameter count split by component."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    embeddings: int
    attention: int
    dense_mlp: int
    experts: int
    shared_experts: int
    router: int
    norms: int
    lm_head: int = Field(description="0 when tied to the embeddings.")

    @property
    def total(self) -> int:
        return sum(self.model_dump().values())


class ParamCounts(BaseModel):
    """All parameters, and the active ones (those one token's forward pass uses)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    total: ComponentParams
    active: ComponentParams = Field(description="Like total, with k of E routed experts.")
    total_params: int
    active_params: int = Field(
        description="Embeddings included, as Qwen, DeepSeek and Mistral count 'activated'."
    )
    active_params_excluding_embeddings: int = Field(
        description="Without embeddings and LM head, as Zhipu counts GLM's active parameters."
    )


def layer_params(config: ModelConfig) -> LayerParams:
    """Parameters of each part of one layer of `config`."""
    h = config.hidden
    norms = 2 * h
    if config.mla is not None:
        attention, mla_norms = _mla_attention(config)
        norms += mla_norms
    else:
        q_out, kv_out = config.heads * config.head_dim, config.kv_heads * config.head_dim
        attention = h * q_out + 2 * h * kv_out + q_out * h
        if config.qkv_bias:
            attention += q_out + 2 * kv_out
        if config.qk_norm:
            norms += 2 * config.head_dim
    router = config.experts * h
    if config.shared_expert_gate:
        router += h
    return LayerParams(
        attention=attention,
        dense_mlp=3 * h * config.dense_intermediate,
        expert=3 * h * config.moe_intermediate,
        shared_experts=3 * h * config.shared_intermediate,
        router=router,
        norms=norms,
    )


def count_params(config: ModelConfig) -> ParamCounts:
    """Total and active parameter counts of `config`, by component."""
    per = layer_params(config)
    n_moe, n_dense = len(config.moe_layers), len(config.dense_layers)
    embeddings = config.vocab * config.hidden
    lm_head = 0 if config.tie_embeddings else embeddings
    common = {
        "embeddings": embeddings,
        "attention": config.layers * per.attention,
        "dense_mlp": n_dense * per.dense_mlp,
        "shared_experts": n_moe * per.shared_experts,
        "router": n_moe * per.router,
        "norms": config.layers * per.norms + config.hidden,
        "lm_head": lm_head,
    }
    total = ComponentParams.model_validate(
        {**common, "experts": n_moe * config.experts * per.expert}
    )
    active = ComponentParams.model_validate(
        {**common, "experts": n_moe * config.experts_per_token * per.expert}
    )
    return ParamCounts(
        total=total,
        active=active,
        total_params=total.total,
        active_params=active.total,
        active_params_excluding_embeddings=active.total - embeddings - lm_head,
    )


def _mla_attention(config: ModelConfig) -> tuple[int, int]:
    """(projection parameters, norm parameters) of one MLA layer, DSA indexer included."""
    mla, h, heads = config.mla, config.hidden, config.heads
    assert mla is not None
    qk_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    norms = mla.kv_lora_rank
    if mla.q_lora_rank:
        q = h * mla.q_lora_rank + mla.q_lora_rank * heads * qk_dim
        norms += mla.q_lora_rank
    else:
        q = h * heads * qk_dim
    kv_a = h * (mla.kv_lora_rank + mla.qk_rope_head_dim)
    kv_b = mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    out = heads * mla.v_head_dim * h
    params = q + kv_a + kv_b + out
    dsa = config.sparse_attention
    if dsa is not None:
        # Indexer: wq_b from the Q latent, wk and a per-head weight from the hidden state,
        # and a LayerNorm (weight and bias) on its key.
        q_in = mla.q_lora_rank or h
        params += q_in * dsa.index_n_heads * dsa.index_head_dim
        params += h * dsa.index_head_dim + h * dsa.index_n_heads
        norms += 2 * dsa.index_head_dim
    return params, norms
