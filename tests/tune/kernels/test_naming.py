"""File names against the names of config files the engines ship (their repositories'
fused_moe/configs/ folders), and the rules that differ between the two engines."""

from __future__ import annotations

import pytest

from servelab.core.errors import ConfigError
from servelab.tune.kernels import config_file_name, device_name


@pytest.mark.parametrize(
    ("gpu", "vllm", "sglang"),
    [
        ("NVIDIA H200", "NVIDIA_H200", "NVIDIA_H200"),
        # vLLM folds the H200 family into one name; SGLang keeps the board's.
        ("NVIDIA H200 NVL", "NVIDIA_H200", "NVIDIA_H200_NVL"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA_H100_80GB_HBM3", "NVIDIA_H100_80GB_HBM3"),
        (
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition",
            "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition",
        ),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA_A100-SXM4-80GB", "NVIDIA_A100-SXM4-80GB"),
        ("NVIDIA H20-3e", "NVIDIA_H20-3e", "NVIDIA_H20-3e"),  # H20 is not H200
    ],
)
def test_device_names(gpu, vllm, sglang):
    assert device_name("vllm", gpu) == vllm
    assert device_name("sglang", gpu) == sglang


# Each is a file in vllm-project/vllm vllm/model_executor/layers/fused_moe/configs/.
VLLM_SHIPPED = [
    (
        (128, 384, "NVIDIA_H200", "fp8_w8a8", (128, 128)),
        "E=128,N=384,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json",
    ),
    (
        (128, 352, "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition", "fp8_w8a8", None),
        "E=128,N=352,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition,dtype=fp8_w8a8.json",
    ),
    (
        (1, 14336, "NVIDIA_A100-SXM4-80GB", "int8_w8a16", None),
        "E=1,N=14336,device_name=NVIDIA_A100-SXM4-80GB,dtype=int8_w8a16.json",
    ),
    (
        (128, 1536, "AMD_Instinct_MI308X", "int4_w4a16", None),
        "E=128,N=1536,device_name=AMD_Instinct_MI308X,dtype=int4_w4a16.json",
    ),
    ((128, 192, "NVIDIA_H200", None, None), "E=128,N=192,device_name=NVIDIA_H200.json"),
]

# Each is a file in sgl-project/sglang python/sglang/srt/layers/moe/fused_moe_triton/configs/.
SGLANG_SHIPPED = [
    (
        (257, 256, "NVIDIA_H200", "fp8_w8a8", (128, 128), False),
        "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json",
    ),
    (
        (256, 64, "NVIDIA_L20", "fp8_w8a8", (64, 64), False),
        "E=256,N=64,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[64, 64].json",
    ),
    (
        (256, 64, "NVIDIA_L40S", "int8_w8a8", None, False),
        "E=256,N=64,device_name=NVIDIA_L40S,dtype=int8_w8a8.json",
    ),
    (
        (256, 256, "NVIDIA_H20-3e", "fp8_w8a8", (128, 128), True),
        "E=256,N=256,device_name=NVIDIA_H20-3e,dtype=fp8_w8a8,block_shape=[128, 128]_down.json",
    ),
    (
        (384, 256, "AMD_Instinct_MI350X", "int4_w4a16", None, True),
        "E=384,N=256,device_name=AMD_Instinct_MI350X,dtype=int4_w4a16_down.json",
    ),
    ((128, 1024, "NVIDIA_H200", None, None, False), "E=128,N=1024,device_name=NVIDIA_H200.json"),
]


@pytest.mark.parametrize(("values", "shipped"), VLLM_SHIPPED)
def test_vllm_names_match_shipped_files(values, shipped):
    experts, n, device, dtype, block = values
    name = config_file_name(
        "vllm", experts=experts, n=n, device=device, dtype=dtype, block_shape=block
    )
    assert name == shipped


@pytest.mark.parametrize(("values", "shipped"), SGLANG_SHIPPED)
def test_sglang_names_match_shipped_files(values, shipped):
    experts, n, device, dtype, block, down = values
    name = config_file_name(
        "sglang", experts=experts, n=n, device=device, dtype=dtype, block_shape=block, down=down
    )
    assert name == shipped


def test_block_shape_spacing_is_the_one_difference():
    args = {"experts": 8, "n": 7168, "device": "NVIDIA_H200", "dtype": "fp8_w8a8"}
    vllm = config_file_name("vllm", **args, block_shape=(128, 128))
    sglang = config_file_name("sglang", **args, block_shape=(128, 128))
    assert vllm.replace("[128,128]", "[128, 128]") == sglang
    assert vllm != sglang


def test_a_zero_block_size_names_no_block_shape():
    # GPTQ's [0, group_size] is no block quantization to either engine (all(block_shape)).
    for engine in ("vllm", "sglang"):
        name = config_file_name(
            engine,
            experts=64,
            n=128,
            device="NVIDIA_H200",
            dtype="int4_w4a16",
            block_shape=(0, 128),
        )
        assert name == "E=64,N=128,device_name=NVIDIA_H200,dtype=int4_w4a16.json"


def test_per_channel_quant_is_sglang_only():
    name = config_file_name(
        "sglang", experts=8, n=64, device="X", dtype="int8_w8a8", per_channel_quant=True
    )
    assert name == "E=8,N=64,device_name=X,dtype=int8_w8a8,per_channel_quant=True.json"
    with pytest.raises(ConfigError, match="SGLang's"):
        config_file_name("vllm", experts=8, n=64, device="X", dtype=None, per_channel_quant=True)


def test_dtypes_each_engine_names():
    with pytest.raises(ConfigError, match="vllm has no MoE config dtype 'int8_w8a8'"):
        config_file_name("vllm", experts=8, n=64, device="X", dtype="int8_w8a8")
    with pytest.raises(ConfigError, match="sglang has no MoE config dtype 'nvfp4'"):
        config_file_name("sglang", experts=8, n=64, device="X", dtype="nvfp4")
    with pytest.raises(ConfigError, match="empty"):
        device_name("vllm", "  ")
