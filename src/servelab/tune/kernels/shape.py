"""E and N of an engine's fused-MoE kernel, for a model and a parallel layout.

N is the expert intermediate size one GPU holds (the last dimension of w2, "the
intermediate size after silu_and_mul"), E the experts one GPU holds. How the layout
divides them differs by engine:

- vLLM (FusedMoEParallelConfig.make in vllm/model_executor/layers/fused_moe/config.py):
  the MoE layer's tensor-parallel group is flattened over dp x tp. Without
  `--enable-expert-parallel`, N = intermediate / (tp x dp) and E = experts; with it the
  experts are spread over all tp x dp GPUs, E = experts / (tp x dp), N = intermediate.
  The tuner (benchmarks/kernels/benchmark_moe.py) reproduces this with `--tp-size` as
  the divisor, so it is given tp x dp.
- SGLang (calculate_shard_intermediate_size in benchmark/kernels/fused_moe_triton/
  common_utils.py): the MoE tensor-parallel size is tp / ep, N = intermediate / (tp / ep),
  E = experts / ep. DeepSeek-V3/V3.2, GLM-4.5/4.6 and GLM-5 fuse their one shared expert
  into the routed tensor (E + 1) on NVIDIA GPUs of compute capability 8.0 and above, but
  not under expert parallelism (determine_num_fused_shared_experts in
  python/sglang/srt/models/deepseek_v2.py and glm4_moe.py; DeepSeek only with 256 routed
  experts).

The dtype of the file follows the checkpoint's quantization (`checkpoint_dtype`), and the
block shape its `quantization_config.weight_block_size` (both tuners read that key).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servelab.core.errors import ConfigError
from servelab.core.jsonfile import read_json_object
from servelab.model.configs import ModelConfig
from servelab.tune.kernels.naming import KernelEngine

__all__ = [
    "SHARED_FUSION_FAMILIES",
    "MoeShape",
    "checkpoint_block_shape",
    "checkpoint_dtype",
    "moe_shape",
    "shared_experts",
]

SHARED_FUSION_FAMILIES = frozenset({"deepseek_v3", "deepseek_v32", "glm4_moe", "glm_moe_dsa"})
"""model_types whose shared expert SGLang fuses into the routed experts' kernel."""
_FUSION_NEEDS_256 = frozenset({"deepseek_v3", "deepseek_v32"})


@dataclass(frozen=True)
class MoeShape:
    """What one GPU's fused-MoE kernel sees."""

    experts: int
    """E in the file name: the experts one GPU holds, fused shared experts included."""
    n: int
    """N in the file name: the expert intermediate size one GPU holds."""
    fused_shared_experts: int
    moe_tp: int
    """How many ways the expert intermediate size is split."""
    expert_parallel: int
    """How many ways the experts are spread (1: every GPU holds all of them)."""


def moe_shape(
    engine: KernelEngine,
    model: ModelConfig,
    *,
    tp: int,
    ep: int = 1,
    dp: int = 1,
    shared_experts_fusion: bool = True,
) -> MoeShape:
    """E and N for `model` served by `engine` at this layout; a layout that cannot shard the
    experts evenly is a ConfigError, as the engine would refuse it."""
    if not model.is_moe:
        raise ConfigError(f"{model.family} model has no routed experts: no fused-MoE kernel")
    if engine == "vllm":
        if ep not in (1, tp * dp):
            raise ConfigError(
                f"vllm cannot take ep={ep} with tp={tp} and dp={dp}",
                hint=f"its expert parallel size is tp x dp: set ep to 1 or {tp * dp}",
            )
        spread = tp * dp if ep > 1 else 1
        moe_tp = 1 if ep > 1 else tp * dp
        fused = 0
    else:
        if tp % ep:
            raise ConfigError(f"sglang needs ep to divide tp: got tp={tp}, ep={ep}")
        spread, moe_tp = ep, tp // ep
        fused = 1 if shared_experts_fusion and _sglang_fuses(model, ep) else 0
    if model.experts % spread:
        raise ConfigError(f"{model.experts} experts do not split over {spread} GPUs")
    if model.moe_intermediate % moe_tp:
        raise ConfigError(
            f"expert intermediate size {model.moe_intermediate} does not split {moe_tp} ways"
        )
    return MoeShape(
        experts=model.experts // spread + fused,
        n=model.moe_intermediate // moe_tp,
        fused_shared_experts=fused,
        moe_tp=moe_tp,
        expert_parallel=spread,
    )


def shared_experts(model: ModelConfig) -> int:
    """The model's always-on shared experts, as ModelConfig records them (in intermediates)."""
    if not model.moe_intermediate or model.shared_intermediate % model.moe_intermediate:
        return 0
    return model.shared_intermediate // model.moe_intermediate


def _sglang_fuses(model: ModelConfig, ep: int) -> bool:
    if model.family not in SHARED_FUSION_FAMILIES or shared_experts(model) != 1 or ep > 1:
        return False
    return model.family not in _FUSION_NEEDS_256 or model.experts == 256


def checkpoint_dtype(model: ModelConfig) -> tuple[str | None, str | None]:
    """The config dtype a checkpoint's own quantization implies, and a note where the file
    this names may not be the one the engine's MoE kernel reads."""
    fmt = model.checkpoint_format
    if fmt == "fp8":
        return "fp8_w8a8", None
    if fmt == "int4":
        return "int4_w4a16", (
            "a 4-bit GPTQ/AWQ checkpoint reads this file only on the Triton WNA16 MoE kernel; "
            "on Marlin kernels no tuned config is read"
        )
    if fmt == "nvfp4":
        return None, (
            "neither engine's get_config_dtype_str has an NVFP4 value: this file tunes the "
            "Triton fused-MoE kernel for 16-bit experts; NVFP4 experts run on other MoE "
            "kernels, which it does not tune"
        )
    return None, None


def checkpoint_block_shape(config_json: Path) -> tuple[int, int] | None:
    """`quantization_config.weight_block_size` of a config.json (or its folder), if any."""
    path = config_json / "config.json" if config_json.is_dir() else config_json
    quant = read_json_object(path, what="model config").get("quantization_config")
    shape = quant.get("weight_block_size") if isinstance(quant, dict) else None
    if shape is None:
        return None
    if (
        not isinstance(shape, list)
        or len(shape) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in shape)
    ):
        raise ConfigError(f"{path}: weight_block_size {shape!r} is not two block sizes")
    return shape[0], shape[1]
