"""The name of the fused-MoE config file an engine looks for, exactly as it builds it.

Both engines key their tuned Triton tile tables by `E=<experts>,N=<intermediate>,
device_name=<GPU>[,dtype=<dtype>][,block_shape=<[n, k]>].json`, but they spell the parts
differently, and a name that is off by one character is a file the engine never reads:

- vLLM, `get_config_file_name` in vllm/model_executor/layers/fused_moe/fused_moe.py
  (read at 13cb3e44): the device name with spaces as underscores, and any name whose
  underscore-separated words include `H200` becomes `NVIDIA_H200`; `,dtype=` only when the
  dtype is not None; `,block_shape=[128,128]` with the list's spaces removed, only when
  both block sizes are non-zero.
- SGLang, `get_config_file_name` in python/sglang/srt/layers/moe/fused_moe_triton/
  fused_moe_triton_config.py (read at c050f40d and 083d6013; the same function in
  moe_runner/triton_utils/fused_moe_triton_config.py on later main): the device name with
  spaces as underscores and no H200 folding; `,block_shape=[128, 128]` keeps Python's
  list spacing; `,per_channel_quant=True` and a `_down` suffix (the down projection's own
  table) on request.

Dtype strings are those of each engine's `get_config_dtype_str` (vLLM:
vllm/model_executor/layers/fused_moe/config.py `_get_config_dtype_str`; SGLang: the
config module above); None is the 16-bit default, whose file has no dtype field.
"""

from __future__ import annotations

from typing import Literal

from servelab.core.errors import ConfigError

__all__ = [
    "DTYPES",
    "KernelEngine",
    "config_file_name",
    "device_name",
]

KernelEngine = Literal["vllm", "sglang"]
"""Engines whose fused-MoE Triton kernel reads a tuned config file."""

DTYPES: dict[KernelEngine, tuple[str, ...]] = {
    # fp8_w8a16 appears in later releases' _get_config_dtype_str; vLLM's has no int8_w8a8.
    "vllm": ("fp8_w8a8", "fp8_w8a16", "int8_w8a16", "int4_w4a16", "float32"),
    "sglang": ("fp8_w8a8", "int8_w8a8", "int8_w8a16", "int4_w4a16", "float32"),
}
"""The `dtype=` values each engine writes into a config file name."""


def device_name(engine: KernelEngine, gpu_name: str) -> str:
    """The `device_name=` part for a GPU whose CUDA/NVML name is `gpu_name`."""
    name = gpu_name.strip()
    if not name:
        raise ConfigError("the GPU name is empty", hint='e.g. --gpu-name "NVIDIA H200"')
    folded = name.replace(" ", "_")
    if engine == "vllm" and "H200" in folded.split("_"):
        return "NVIDIA_H200"
    return folded


def config_file_name(
    engine: KernelEngine,
    *,
    experts: int,
    n: int,
    device: str,
    dtype: str | None,
    block_shape: tuple[int, int] | None = None,
    per_channel_quant: bool = False,
    down: bool = False,
) -> str:
    """The file name `engine` builds for these values; `device` as `device_name` gives it."""
    if dtype is not None and dtype not in DTYPES[engine]:
        known = ", ".join(DTYPES[engine])
        raise ConfigError(f"{engine} has no MoE config dtype {dtype!r}", hint=f"known: {known}")
    if engine == "vllm" and (per_channel_quant or down):
        raise ConfigError("per_channel_quant and _down config files are SGLang's, not vLLM's")
    name = f"E={experts},N={n},device_name={device}"
    if dtype:
        name += f",dtype={dtype}"
    if block_shape is not None and all(block_shape):
        shape = f"[{block_shape[0]}, {block_shape[1]}]"
        name += f",block_shape={shape.replace(' ', '') if engine == 'vllm' else shape}"
    if per_channel_quant:
        name += ",per_channel_quant=True"
    if down:
        name += "_down"
    return name + ".json"
