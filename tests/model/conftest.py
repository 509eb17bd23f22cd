"""Small hand-countable models and a GPU with round figures."""

from __future__ import annotations

import pytest

from servelab.model.configs import MlaSpec, ModelConfig, SparseAttentionSpec
from servelab.model.gpus import GpuSpec

GIB = 2**30


@pytest.fixture
def dense() -> ModelConfig:
    """2 layers, hidden 64, 4 heads of 16 (2 KV heads), MLP 128, vocabulary 100."""
    return ModelConfig(
        family="llama",
        layers=2,
        hidden=64,
        heads=4,
        kv_heads=2,
        head_dim=16,
        dense_intermediate=128,
        vocab=100,
    )


@pytest.fixture
def moe() -> ModelConfig:
    """Like `dense`, but layer 1 is MoE: 8 experts of 32, top-2, one shared expert of 32."""
    return ModelConfig(
        family="deepseek_v3",
        layers=2,
        hidden=64,
        heads=4,
        kv_heads=2,
        head_dim=16,
        dense_intermediate=128,
        moe_intermediate=32,
        experts=8,
        experts_per_token=2,
        shared_intermediate=32,
        first_k_dense=1,
        vocab=100,
    )


@pytest.fixture
def mla() -> ModelConfig:
    """3 MLA layers with DSA (top-4), 4 heads, latent 32 + rope 8, dense MLPs."""
    return ModelConfig(
        family="deepseek_v32",
        layers=3,
        hidden=64,
        heads=4,
        kv_heads=4,
        head_dim=24,
        attention="mla",
        mla=MlaSpec(
            q_lora_rank=16, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16
        ),
        sparse_attention=SparseAttentionSpec(index_topk=4, index_n_heads=2, index_head_dim=8),
        dense_intermediate=128,
        vocab=100,
    )


@pytest.fixture
def gpu() -> GpuSpec:
    """16 GiB, 1 TB/s, 100 TFLOP/s bf16 (200 fp8, 400 fp4), PCIe gen5 x16, no NVLink."""
    return GpuSpec(
        slug="test",
        name="Test GPU",
        nvml_names=("Test GPU",),
        memory_bytes=16 * GIB,
        memory_bandwidth_bytes_s=1e12,
        bf16_dense_flops=1e14,
        fp8_dense_flops=2e14,
        fp4_dense_flops=4e14,
        power_limit_w=100,
        nvlink_bandwidth_bytes_s=None,
        pcie_gen=5,
        pcie_width=16,
    )
