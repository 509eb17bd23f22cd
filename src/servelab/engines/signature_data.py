"""What serving engines print when something decides their speed or kills them.

Each `Signature` is one message of one engine, matched on the text its source writes, with
the file and the version (or commit) it was read at, and one real line it must match.
The decisive facts of a deployment are often only in the log: a MoE kernel running on
default tiles, DeepGEMM fed the wrong scale format, CUDA graphs never captured, a KV
cache smaller than the load needs. `servelab.engines.signatures` matches these lines.

Units: SGLang prints "GB" for bytes / 2**30, torch "GiB" and transformers "MB" for bytes /
2**20; all become `*_gib` fields.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import PurePosixPath
from types import MappingProxyType

from servelab.core.severity import Severity
from servelab.probe.comm.nccl_log import parse_connection

__all__ = [
    "KIND_INFO",
    "SIGNATURES",
    "EventKind",
    "EventSeverity",
    "FieldValue",
    "KindInfo",
    "Signature",
    "Source",
]

FieldValue = int | float | str | bool | None
Fields = dict[str, FieldValue]
Converter = Callable[[str], FieldValue]
Extractor = Callable[[re.Match[str]], Fields]


class EventKind(StrEnum):
    """What a log line says about the deployment."""

    MOE_CONFIG_MISSING = "moe_config_missing"
    MOE_CONFIG_FALLBACK = "moe_config_fallback"
    MOE_CONFIG_LOADED = "moe_config_loaded"
    KERNEL_CONFIG_MISSING = "kernel_config_missing"
    DEEPGEMM_SCALE_FORMAT = "deepgemm_scale_format"
    QUANTIZATION_SLOW = "quantization_slow"
    CUDA_GRAPH_CAPTURE_BEGIN = "cuda_graph_capture_begin"
    CUDA_GRAPH_CAPTURE_END = "cuda_graph_capture_end"
    CUDA_GRAPH_DISABLED = "cuda_graph_disabled"
    CUDA_GRAPH_CAPTURE_FAILED = "cuda_graph_capture_failed"
    WEIGHTS_LOADED = "weights_loaded"
    KV_CACHE_MEMORY = "kv_cache_memory"
    KV_CACHE_CAPACITY = "kv_cache_capacity"
    MAX_CONCURRENCY = "max_concurrency"
    SCHEDULER_LIMITS = "scheduler_limits"
    KV_CACHE_FULL = "kv_cache_full"
    KV_CACHE_SIZING_FAILED = "kv_cache_sizing_failed"
    KV_SIZE_NEGATIVE = "kv_size_negative"
    RUNNING_CAP_LOWERED = "running_cap_lowered"
    CONTINUOUS_BATCHING_OFF = "continuous_batching_off"
    OUT_OF_MEMORY = "out_of_memory"
    NCCL_ERROR = "nccl_error"
    NCCL_WARNING = "nccl_warning"
    NCCL_TRANSPORT = "nccl_transport"
    CUSTOM_ALLREDUCE_OFF = "custom_allreduce_off"
    NAN = "nan"
    ENGINE_CONFIG = "engine_config"
    ENGINE_VERSION = "engine_version"
    ENGINE_READY = "engine_ready"
    ENGINE_ERROR = "engine_error"
    ENGINE_HANG = "engine_hang"
    BAD_ARGUMENT = "bad_argument"


EventSeverity = Severity
"""How much an event can matter: info is a fact, warning costs speed, error stops serving."""


@dataclass(frozen=True)
class KindInfo:
    """What an event kind means for a deployment, and what to try, for the report."""

    meaning: str
    advice: str


KIND_INFO: Mapping[EventKind, KindInfo] = MappingProxyType(
    {
        EventKind.MOE_CONFIG_MISSING: KindInfo(
            "The fused MoE kernel runs with default tile sizes for this expert shape, GPU and "
            "dtype; on decode these can leave most of the GPU idle.",
            "`servelab tune kernels --engine SPEC` names the file and the engine's tuner "
            "(SGLang: benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py; vLLM: "
            "benchmarks/kernels/benchmark_moe.py --tune). vLLM reads it from "
            "VLLM_TUNED_CONFIG_FOLDER; SGLang from SGLANG_MOE_CONFIG_DIR/configs/triton_X_Y_Z/ "
            "(that folder replaces its packaged configs: copy them in too).",
        ),
        EventKind.MOE_CONFIG_FALLBACK: KindInfo(
            "A tuned MoE config was found, but not the one for this case: another Triton "
            "version's, or the up-projection's reused for the down projection.",
            "Tune for the installed Triton version (and the `_down` config with SGLang's "
            "tuning_fused_moe_triton_sep.py) and put the JSON at `config_path`.",
        ),
        EventKind.MOE_CONFIG_LOADED: KindInfo(
            "The fused MoE kernel uses a tuned config file.",
            "Nothing to do; re-tune if the GPU, Triton version or parallel layout changed.",
        ),
        EventKind.KERNEL_CONFIG_MISSING: KindInfo(
            "A dense GEMM kernel (block-FP8 W8A8) runs with default tile sizes.",
            "Tune it for this GPU (vLLM: benchmarks/kernels/benchmark_w8a8_block_fp8.py) and put "
            "the JSON at `config_path`.",
        ),
        EventKind.DEEPGEMM_SCALE_FORMAT: KindInfo(
            "DeepGEMM runs with UE8M0 scales but the checkpoint's scales are not UE8M0, so they "
            "are converted; on Blackwell this can cost accuracy.",
            "Check output quality; use a checkpoint with scale_fmt=ue8m0, or disable DeepGEMM "
            "(SGLANG_ENABLE_JIT_DEEPGEMM=0) and compare speed and accuracy.",
        ),
        EventKind.QUANTIZATION_SLOW: KindInfo(
            "The engine has no optimized kernels for this quantization; it can be slower than "
            "the unquantized model.",
            "Try another quantization format or kernel backend for this checkpoint.",
        ),
        EventKind.CUDA_GRAPH_CAPTURE_BEGIN: KindInfo(
            "The engine started capturing CUDA graphs; decode steps up to the largest captured "
            "batch size will replay them without per-kernel launch overhead.",
            "Nothing to do; capture must end before the engine serves.",
        ),
        EventKind.CUDA_GRAPH_CAPTURE_END: KindInfo(
            "CUDA graphs were captured; `mem_gib` is what they cost and `elapsed_s` how long.",
            "If batches larger than the captured sizes are common, raise the largest captured "
            "size (SGLang --cuda-graph-max-bs-decode, --cuda-graph-max-bs in older releases; "
            "vLLM --max-cudagraph-capture-size).",
        ),
        EventKind.CUDA_GRAPH_DISABLED: KindInfo(
            "CUDA graphs are off for this phase, so every decode step pays kernel launch "
            "overhead; small batches are the slowest.",
            "Enable them unless they fail (remove --disable-cuda-graph / --enforce-eager) and "
            "compare single-stream tok/s.",
        ),
        EventKind.CUDA_GRAPH_CAPTURE_FAILED: KindInfo(
            "Capturing CUDA graphs failed; the engine stops.",
            "Lower --mem-fraction-static or the largest captured batch size, or disable CUDA "
            "graphs to confirm the cause in `detail`.",
        ),
        EventKind.WEIGHTS_LOADED: KindInfo(
            "The model weights are loaded; `mem_gib` is their footprint per GPU.",
            "Nothing to do; the rest of the memory budget goes to the KV cache and graphs.",
        ),
        EventKind.KV_CACHE_MEMORY: KindInfo(
            "Memory the engine left for the KV cache.",
            "Raise the memory fraction (SGLang --mem-fraction-static, vLLM "
            "--gpu-memory-utilization) or shard further if it is too small.",
        ),
        EventKind.KV_CACHE_CAPACITY: KindInfo(
            "How many tokens the KV cache holds: with the context length it bounds how many "
            "requests can run at once.",
            "If concurrency is capped by it: more memory fraction, an FP8 KV cache, a larger "
            "tensor-parallel size, or shorter contexts.",
        ),
        EventKind.MAX_CONCURRENCY: KindInfo(
            "How many requests of the full context length fit in the KV cache at once.",
            "Compare with the concurrency you need; see kv_cache_capacity for the levers.",
        ),
        EventKind.SCHEDULER_LIMITS: KindInfo(
            "The scheduler's limits: total KV tokens, chunked prefill size, running-request cap. "
            "Throughput stops growing once concurrency reaches `max_running_requests`.",
            "If the sweep plateaus at the cap, raise it (SGLang --max-running-requests, vLLM "
            "--max-num-seqs) as far as the KV cache allows.",
        ),
        EventKind.KV_CACHE_FULL: KindInfo(
            "The KV cache ran out during decode: requests were retracted or preempted and will "
            "be recomputed, which costs throughput and tail latency.",
            "Lower the running-request cap, raise the memory fraction, or (SGLang) raise "
            "--schedule-conservativeness; occasional retractions are harmless.",
        ),
        EventKind.KV_CACHE_SIZING_FAILED: KindInfo(
            "transformers' continuous batching could not fit its paged KV cache in the memory it "
            "may use (`num_sectors` at or below 0, or a footprint above `available_bytes`): its "
            "worker is dead and every later request gets HTTP 503. With eager or SDPA attention "
            "the attention masks cost max_batch_tokens x (cache tokens + max_batch_tokens) "
            "activations, which at the default 8192 batch tokens can take all of it.",
            "Size the cache in tokens, `knobs.kv_cache_tokens` (servelab passes it as "
            "--cb-num-blocks), and lower `knobs.max_batch_tokens` (--cb-max-batch-tokens; the "
            "masks cost batch tokens x cache tokens); on a GPU a larger share also works "
            "(`knobs.mem_fraction`, --cb-max-memory-percent).",
        ),
        EventKind.KV_SIZE_NEGATIVE: KindInfo(
            "The engine's memory profile left nothing for the KV cache: the weights, activations "
            "and CUDA graphs (and a hybrid model's state cache) took all the memory the fraction "
            "allows, so the profiled KV size came out zero or negative (`kv_gib` where printed) "
            "and the engine did not start.",
            "Raise the memory fraction (SGLang --mem-fraction-static, above "
            "`min_mem_fraction_static` where printed; vLLM --gpu-memory-utilization), free the "
            "GPU of other processes, shard the weights further (TP/PP/EP), or shorten the context.",
        ),
        EventKind.RUNNING_CAP_LOWERED: KindInfo(
            "SGLang lowered the running-request cap below the configured value at start-up: the "
            "KV cache (`reason`: kv cache) or a hybrid model's mamba state cache holds fewer "
            "requests. /get_server_info still reports `configured`; the scheduler admits "
            "`in_force` per data-parallel worker, so throughput plateaus there.",
            "Read the sweep's knee against `in_force`, not the flag. To raise it: more KV memory "
            "(--mem-fraction-static, an FP8 KV cache, more tensor parallelism, a shorter context); "
            "for the state cache --max-mamba-cache-size, --mamba-full-memory-ratio or "
            "--mamba-ssm-dtype bfloat16.",
        ),
        EventKind.CONTINUOUS_BATCHING_OFF: KindInfo(
            "The model cannot use continuous batching; requests are generated one after another.",
            "Use a model class with continuous-batching support, or expect no gain from "
            "concurrency.",
        ),
        EventKind.OUT_OF_MEMORY: KindInfo(
            "The GPU ran out of memory, or the engine could not fit its KV cache in what was left.",
            "Lower the memory fraction only if activations or graphs ran out; otherwise shard "
            "further (TP/PP/EP), shorten the context, or lower the running-request cap.",
        ),
        EventKind.NCCL_ERROR: KindInfo(
            "A collective operation between GPUs failed or timed out; the engine stops.",
            "Rerun with NCCL_DEBUG=INFO; check P2P support and topology (servelab probe --comm), "
            "and try NCCL_P2P_DISABLE=1 or NCCL_IB_DISABLE=1 to isolate the transport.",
        ),
        EventKind.NCCL_WARNING: KindInfo(
            "NCCL reported a problem it may have worked around (a failed transport, a socket "
            "retry); often the first sign of a slow or failing collective.",
            "Read `detail`; compare all-reduce bandwidth with servelab probe --comm.",
        ),
        EventKind.NCCL_TRANSPORT: KindInfo(
            "The transport NCCL chose between two ranks (`via`): P2P (NVLink or PCIe "
            "peer-to-peer), SHM (staged through host memory, its fallback without P2P, e.g. in a "
            "VM) or NET (a network, even within one host). SHM or NET within one host slows "
            "every all-reduce; `count` is how many channel connections used it.",
            "If SHM or NET shows within one host, check P2P (servelab probe; nvidia-smi topo -p2p "
            "r), the IOMMU/ACS settings and the VM or container; compare all-reduce bandwidth "
            "with servelab probe --comm.",
        ),
        EventKind.CUSTOM_ALLREDUCE_OFF: KindInfo(
            "The engine's custom all-reduce kernel is off (`reason`), so every tensor-parallel "
            "all-reduce goes through NCCL; for decode's small messages that costs latency in "
            "every layer.",
            "no p2p: enable GPU peer-to-peer (bare metal, or a VM with P2P and the IOMMU set for "
            "it) and confirm with servelab probe --comm; pcie more than two: expected on a "
            "PCIe-only machine with more than two GPUs; spans nodes, unsupported world size: "
            "expected, or change the tensor-parallel size. Pass --disable-custom-all-reduce to "
            "make it explicit.",
        ),
        EventKind.NAN: KindInfo(
            "Logits or probabilities contain NaN: the model produces garbage for some requests.",
            "Check the quantization format, the kernel backends and the dtype; SGLang's "
            "--enable-nan-detection names the step.",
        ),
        EventKind.ENGINE_CONFIG: KindInfo(
            "The settings the engine resolved from its flags (parallel sizes, caps, backends).",
            "Compare with the intended spec; a default that differs is a lead.",
        ),
        EventKind.ENGINE_VERSION: KindInfo(
            "The engine's version, as it printed it.",
            "Record it with the results; signatures and flags depend on it.",
        ),
        EventKind.ENGINE_READY: KindInfo(
            "The engine said it is ready to serve.",
            "Nothing to do.",
        ),
        EventKind.ENGINE_ERROR: KindInfo(
            "The engine hit a fatal error in one of its processes; the lines before it hold the "
            "cause.",
            "Read the traceback before this line; the other events often name the cause.",
        ),
        EventKind.ENGINE_HANG: KindInfo(
            "The engine stopped making progress: a watchdog saw no forward step for `timeout_s` "
            "(SGLang), or the engine core or a worker did not answer in time (vLLM). Usually a "
            "collective waits on a stuck rank (NCCL, P2P) or a kernel hangs; at start-up, weight "
            "loading or compilation can also outlast the timeout.",
            "Read the lines before it (NCCL warnings, the stuck ranks' stack dump); rerun with "
            "NCCL_DEBUG=INFO and check P2P with servelab probe --comm. If start-up is only slow, "
            "raise the timeout (SGLang --watchdog-timeout; vLLM VLLM_ENGINE_READY_TIMEOUT_S, "
            "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, VLLM_RPC_TIMEOUT).",
        ),
        EventKind.BAD_ARGUMENT: KindInfo(
            "The engine rejected a command-line argument and did not start.",
            "Fix the flag in the spec (servelab engine check SPEC names the closest valid one).",
        ),
    }
)


@dataclass(frozen=True)
class Source:
    """Where a message's text was read: repository, file, and the version or commit."""

    repo: str
    path: str
    ref: str


@dataclass(frozen=True)
class Signature:
    """One engine message: how to find it cheaply, how to match it, what to extract.

    `literals` gate the regex: at least one must occur in the line. The regex's match is
    also the identity of the message: lines whose matches are equal are one event, counted;
    `identity` names fields to compare instead, for a message printed once per channel or
    peer that means one thing (NCCL's transport). Named groups become fields through
    `converters` (text when absent), except groups named with a leading underscore;
    `extract` adds fields the groups cannot express. A `fallback` signature matches only
    when no other signature of its kind matched the same line.
    """

    name: str
    kind: EventKind
    severity: EventSeverity
    literals: tuple[str, ...]
    regex: re.Pattern[str]
    source: Source
    example: str
    converters: Mapping[str, Converter] = field(default_factory=dict)
    extract: Extractor | None = None
    fallback: bool = False
    identity: tuple[str, ...] = ()

    def fields(self, match: re.Match[str]) -> Fields:
        """The typed values in a match of this signature."""
        values: Fields = {}
        for group, text in match.groupdict().items():
            if text is not None and not group.startswith("_"):
                convert = self.converters.get(group, str)
                values[group] = convert(text)
        if self.extract is not None:
            values.update(self.extract(match))
        return values


# --- converters and extractors ------------------------------------------------------------

_BINARY_UNITS = {
    "B": 1 / 2**30,
    "KB": 1 / 2**20,
    "KiB": 1 / 2**20,
    "MB": 1 / 2**10,
    "MiB": 1 / 2**10,
    "GB": 1.0,
    "GiB": 1.0,
    "TB": 2.0**10,
    "TiB": 2.0**10,
}
_SIZE = re.compile(r"(-?[\d.]+)\s*([KMGT]i?B|B)\b")


def _count(text: str) -> int:
    """An integer as engines print it, thousands separators included ("1,587,648")."""
    return int(text.replace(",", ""))


def _gib(text: str) -> float:
    """A size such as "2.00 GiB" or "512 MiB" in GiB; SGLang's and torch's units are binary."""
    match = _SIZE.search(text)
    if match is None:
        return float(text)
    return float(match.group(1)) * _BINARY_UNITS[match.group(2)]


def _scalar(text: str) -> FieldValue:
    """A value as Python prints it in a repr or `key=value` list: None, bool, number, text."""
    text = text.strip()
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


_KEY_VALUE = re.compile(r"(\w+)=(-?[\d.]+ GB|\[[^\]]*\]|'[^']*'|[^,\s)]+)")


def _key_values(text: str) -> Fields:
    """`key=value` pairs as SGLang logs them; "X GB" values become `key_gib` floats."""
    values: Fields = {}
    for key, value in _KEY_VALUE.findall(text):
        if value.endswith(" GB"):
            values[f"{key}_gib"] = _gib(value)
        else:
            values[key] = _scalar(value)
    return values


_SGLANG_MEMORY = re.compile(r"(avail mem|mem usage|elapsed)=(-?[\d.]+) ?(GB|s)")
_SGLANG_MEMORY_NAMES = {
    "avail mem": "avail_mem_gib",
    "mem usage": "mem_gib",
    "elapsed": "elapsed_s",
}


def _sglang_memory(match: re.Match[str]) -> Fields:
    """SGLang's "avail mem=X GB", "mem usage=Y GB" and "elapsed=Z s", wherever on the line."""
    return {
        _SGLANG_MEMORY_NAMES[name]: float(value)
        for name, value, _unit in _SGLANG_MEMORY.findall(match.string, match.start())
    }


_CONFIG_FILE_KEYS = {"E": "experts", "N": "n", "K": "k"}
_CONFIG_FILE_PAIR = re.compile(r"(\w+)=(\[[^\]]*\]|[^,]*)")
_TRITON_DIR = re.compile(r"^triton_(\d+(?:_\d+)*)$")
_FIRST_JSON = re.compile(r"[^'\"\[\s][^'\"]*?\.json")


def _config_file(path_text: str) -> Fields:
    """The facts in a tuned-kernel config path: shape, GPU, dtype, Triton version, up/down."""
    first = _FIRST_JSON.search(path_text)
    path = PurePosixPath(first.group(0) if first else path_text.strip())
    stem = path.name.removesuffix(".json")
    values: Fields = {"config_path": str(path), "config_file": path.name}
    down = stem.endswith("_down")
    if down:
        stem = stem.removesuffix("_down")
    for key, value in _CONFIG_FILE_PAIR.findall(stem):
        name = _CONFIG_FILE_KEYS.get(key, key)
        values[name] = _scalar(value.replace(" ", ""))
    values["down"] = down
    triton = _TRITON_DIR.match(path.parent.name)
    if triton:
        values["triton_version"] = triton.group(1).replace("_", ".")
    return values


def _config_path(match: re.Match[str]) -> Fields:
    return _config_file(match.group("config_path"))


def _moe_triton_fallback(match: re.Match[str]) -> Fields:
    values = _config_file(match.group("config_path"))
    values["fallback_path"] = match.group("fallback_path")
    return values


_SERVER_ARGS_KEYS = (
    "model_path",
    "tp_size",
    "pp_size",
    "ep_size",
    "dp_size",
    "enable_dp_attention",
    "max_running_requests",
    "max_total_tokens",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "mem_fraction_static",
    "context_length",
    "page_size",
    "dtype",
    "kv_cache_dtype",
    "quantization",
    "attention_backend",
    "moe_runner_backend",
    "moe_a2a_backend",
    "disable_cuda_graph",
    "cuda_graph_max_bs",
    "cuda_graph_max_bs_decode",
    "disable_radix_cache",
    "enable_torch_compile",
    "schedule_policy",
    "schedule_conservativeness",
    "disable_custom_all_reduce",
    "enable_flashinfer_allreduce_fusion",
    "speculative_algorithm",
)


def _sglang_server_args(match: re.Match[str]) -> Fields:
    """The performance-relevant settings in SGLang's `server_args=ServerArgs(...)` dump."""
    pairs = _key_values(match.string[match.end() :])
    return {key: pairs[key] for key in _SERVER_ARGS_KEYS if key in pairs}


def _sglang_server_args_dict(match: re.Match[str]) -> Fields:
    """The same settings in SGLang's later `server_args={...}` line, a dict of resolved
    values (its defaults filled in)."""
    try:
        parsed = ast.literal_eval(match.group("_args"))
    except (ValueError, SyntaxError):
        return {}
    if not isinstance(parsed, dict):
        return {}
    return {
        key: value if isinstance(value, int | float | str | bool) or value is None else str(value)
        for key in _SERVER_ARGS_KEYS
        if key in parsed
        for value in [parsed[key]]
    }


_VLLM_ARGS_KEYS = (
    "model",
    "model_tag",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "enable_expert_parallel",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "gpu_memory_utilization",
    "enforce_eager",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "kv_cache_dtype",
    "quantization",
    "dtype",
    "block_size",
    "speculative_config",
)


_VLLM_SCALAR_ARG = re.compile(r"""'(\w+)': (-?\d+(?:\.\d+)?|True|False|'[^']*')(?=[,}])""")


def _vllm_non_default_args(match: re.Match[str]) -> Fields:
    """The performance-relevant settings in vLLM's `non-default args: {...}` line; where a
    value is an object's repr (`profiler_config=ProfilerConfig(...)`), which literal_eval
    cannot read, the plain values (numbers, switches, strings) are read one by one."""
    values = _vllm_capture_limit(match)
    try:
        parsed = ast.literal_eval(match.group("_args"))
    except (ValueError, SyntaxError):
        parsed = {
            key: ast.literal_eval(text)
            for key, text in _VLLM_SCALAR_ARG.findall(match.group("_args"))
        }
    if not isinstance(parsed, dict):
        return values
    for key in _VLLM_ARGS_KEYS:
        if key in parsed:
            value = parsed[key]
            scalar = value if isinstance(value, int | float | str | bool) else str(value)
            values[key] = scalar
    return values


_VLLM_CAPTURE_MAX = re.compile(
    r"""['"](?:max_cudagraph_capture_size|max_capture_size)['"]: ?(\d+)"""
)
_VLLM_CAPTURE_SIZES = re.compile(r"""['"]cudagraph_capture_sizes['"]: ?\[([\d,\s]*)\]""")
_VLLM_COMPILE_RANGES = re.compile(r"""['"]compile_ranges_endpoints['"]: ?\[([\d,\s]*)\]""")


def _vllm_capture_limit(match: re.Match[str]) -> Fields:
    """vLLM's largest CUDA-graph batch, wherever its line holds one: a `compilation_config`
    dict (repr or JSON, `max_capture_size` before v0.11), or the `max_cudagraph_capture_size`
    and `cudagraph_capture_sizes` of its non-default args; a list's largest size stands for
    a missing maximum (vLLM sets the maximum to it). 0 with no sizes: graphs off."""
    line = match.string
    values: Fields = {}
    sizes = _VLLM_CAPTURE_SIZES.search(line)
    if sizes is not None:
        batch_sizes = _ints(sizes.group(1))
        values["num_batch_sizes"] = len(batch_sizes)
        if batch_sizes:
            values["max_cudagraph_capture_size"] = max(batch_sizes)
    largest = _VLLM_CAPTURE_MAX.search(line)
    if largest is not None:
        values["max_cudagraph_capture_size"] = int(largest.group(1))
    return values


def _vllm_compilation(match: re.Match[str]) -> Fields:
    """The largest CUDA-graph batch, and the step budget as the resolved compilation config
    prints it: its last `compile_ranges_endpoints` is `max_num_batched_tokens`
    (`VllmConfig._set_compile_ranges` ends the ranges there and keeps only endpoints below
    it), set or defaulted, the one place a launch without the flag shows it at INFO. A
    user's own endpoints in the non-default args are not read this way."""
    values = _vllm_capture_limit(match)
    ranges = _VLLM_COMPILE_RANGES.search(match.string)
    ends = _ints(ranges.group(1)) if ranges else []
    if ends:
        values["max_num_batched_tokens"] = max(ends)
    return values


_PROGRESS_TOTAL = re.compile(r"\b\d+/(\d+) \[")


def _capture_progress(match: re.Match[str]) -> Fields:
    """The number of sizes a capture progress bar counts (its total), where it shows one."""
    total = _PROGRESS_TOTAL.search(match.string, match.end())
    return {"num_batch_sizes": int(total.group(1))} if total else {}


_BATCH_SIZES = re.compile(r"\bbs=\[([\d,\s]*)\]")


def _sglang_capture_settings(match: re.Match[str]) -> Fields:
    """Backend and batch sizes of SGLang's "Capture ... CUDA graph begin. backend=..." line."""
    values = _sglang_memory(match)
    backend = re.search(r"\bbackend=(\w+)", match.string)
    if backend:
        values["backend"] = backend.group(1)
    sizes = _BATCH_SIZES.search(match.string)
    if sizes:
        values.update(_batch_sizes(sizes.group(1)))
    return values


def _ints(text: str) -> list[int]:
    """The numbers of a printed list's inside ("1, 2, 4, 8"); none for an empty one."""
    return [int(item) for item in text.split(",") if item.strip()]


def _batch_sizes(text: str) -> Fields:
    """The largest and the number of the batch sizes in a printed list ("1, 2, 4, 8")."""
    batch_sizes = _ints(text)
    if not batch_sizes:
        return {}
    return {"max_bs": max(batch_sizes), "num_batch_sizes": len(batch_sizes)}


def _after(match: re.Match[str]) -> str:
    return match.string[match.end() :]


def _sglang_retract(match: re.Match[str]) -> Fields:
    values: Fields = {}
    tail = _after(match)
    retracted = re.search(r"#retracted_reqs: (\d+)", tail)
    if retracted:
        values["retracted_reqs"] = int(retracted.group(1))
    ratio = re.search(r"#new_token_ratio: ([\d.]+) -> ([\d.]+)", tail)
    if ratio:
        values["new_token_ratio_before"] = float(ratio.group(1))
        values["new_token_ratio_after"] = float(ratio.group(2))
    return values


def _vllm_scheduler_args(match: re.Match[str]) -> Fields:
    """The running-request cap and step budget in vLLM's `non-default args: {...}` line;
    `max_num_seqs` is also given as `max_running_requests`, the name SGLang's limits use."""
    values = _vllm_non_default_args(match)
    limits: Fields = {
        key: values[key]
        for key in ("max_num_seqs", "max_num_batched_tokens", "max_model_len")
        if key in values
    }
    if "max_num_seqs" in limits:
        limits["max_running_requests"] = limits["max_num_seqs"]
    return limits


def _vllm_preemption(match: re.Match[str]) -> Fields:
    total = re.search(r"total_num_cumulative_preemption=(\d+)", _after(match))
    return {"total_preemptions": int(total.group(1))} if total else {}


def _torch_oom(match: re.Match[str]) -> Fields:
    values: Fields = {}
    tail = _after(match)
    gpu = re.search(
        r"GPU (\d+) has a total capacity of ([\d.]+ \w+) of which ([\d.]+ \w+) is free", tail
    )
    if gpu:
        values["gpu"] = int(gpu.group(1))
        values["total_gib"] = _gib(gpu.group(2))
        values["free_gib"] = _gib(gpu.group(3))
    return values


def _vllm_kv_needed(match: re.Match[str]) -> Fields:
    estimate = re.search(r"estimated maximum model length is (\d+)", _after(match))
    return {"estimated_max_model_len": int(estimate.group(1))} if estimate else {}


def _sizes_gib(match: re.Match[str]) -> Fields:
    """SGLang's "K size: X GB, V size: Y GB" or "KV size: X GB" after "KV Cache is allocated"."""
    tail = _after(match)
    return {
        f"{name.lower()}_gib": float(value)
        for name, value in re.findall(r"\b(KV|K|V) size: ([\d.]+) ?GB", tail)
    }


def _model_type(match: re.Match[str]) -> Fields:
    model = re.search(r"\btype=(\w+)", match.string)
    return {"model_type": model.group(1)} if model else {}


_CB_WORKER_CAUSE = re.compile(r" \S+?: (.+?)(?:\"\})?\s*$")


def _cb_worker_dead(match: re.Match[str]) -> Fields:
    """The error that killed transformers' continuous-batching worker, after the request id
    (and without the closing `"}` of the JSON body it comes in)."""
    cause = _CB_WORKER_CAUSE.match(match.string, match.end())
    return {"detail": cause.group(1)} if cause else {}


def _nccl_connection(match: re.Match[str]) -> Fields:
    """The transport ("P2P", "SHM", "NET"), path, channel and ranks of an NCCL "Channel ... via
    ..." line, read by the probe's own NCCL log parser."""
    connection = parse_connection(match.string)
    if connection is None:
        return {}
    values: Fields = {
        "transport": connection.transport,
        "via": connection.via,
        "channel": connection.channel,
        "from_rank": connection.from_rank,
    }
    if connection.to_rank is not None:
        values["to_rank"] = connection.to_rank
    return values


# The group of the custom all-reduce regex that matched -> the short reason.
_CUSTOM_ALLREDUCE_REASONS = {
    "_no_library": "no library",
    "_spans_nodes": "spans nodes",
    "_pcie": "pcie more than two",
    "_no_p2p": "no p2p",
    "_no_mnnvl": "no mnnvl",
    "world_size": "unsupported world size",
}
_CUSTOM_ALLREDUCE_OFF = (
    r"(?:Custom allreduce|Custom collectives|CustomAll[Rr]educe(?:V2)?) (?:is|are) disabled "
    r"(?:because (?:(?P<_no_library>of missing custom allreduce library)"
    r"|(?P<_spans_nodes>this process group spans across nodes)"
    r"|(?P<_pcie>it's not supported on more than two PCIe-only GPUs)"
    r"|(?P<_no_p2p>your platform lacks GPU P2P capability or P2P test failed)"
    r"|(?P<_no_mnnvl>this multi-node group does not (?:have MNNVL-capable GPUs on every rank"
    r"|support MNNVL multicast)))"
    r"|due to an unsupported world size: (?P<world_size>\d+))"
)


def _custom_allreduce_reason(match: re.Match[str]) -> Fields:
    reason = next(why for group, why in _CUSTOM_ALLREDUCE_REASONS.items() if match.group(group))
    return {"reason": reason}


def _sglang_watchdog(match: re.Match[str]) -> Fields:
    """Before v0.5.10 only the scheduler had a watchdog, and its line named no process."""
    return {"what": "watchdog", "process": match.group("_process") or "Scheduler"}


# --- building blocks ----------------------------------------------------------------------


def _sig(
    name: str,
    kind: EventKind,
    severity: EventSeverity,
    pattern: str,
    *,
    literals: tuple[str, ...],
    source: Source,
    example: str,
    converters: Mapping[str, Converter] | None = None,
    extract: Extractor | None = None,
    fallback: bool = False,
    identity: tuple[str, ...] = (),
) -> Signature:
    return Signature(
        name=name,
        kind=kind,
        severity=severity,
        literals=literals,
        regex=re.compile(pattern),
        source=source,
        example=example,
        converters=MappingProxyType(dict(converters or {})),
        extract=extract,
        fallback=fallback,
        identity=identity,
    )


_INFO, _WARNING, _ERROR = EventSeverity.INFO, EventSeverity.WARNING, EventSeverity.ERROR
_K = EventKind

SGLANG = "sgl-project/sglang"
VLLM = "vllm-project/vllm"
TRANSFORMERS = "huggingface/transformers"
TORCH = "pytorch/pytorch"
NCCL = "NVIDIA/nccl"
UVICORN = "encode/uvicorn"
SERVELAB = "servelab"

_SG_MOE = "python/sglang/srt/layers/moe/fused_moe_triton/fused_moe_triton_config.py"
_SG_RUNNER = "python/sglang/srt/model_executor/model_runner.py"
_SG_SCHEDULER = "python/sglang/srt/managers/scheduler.py"
_SG_POOL = "python/sglang/srt/mem_cache/memory_pool.py"
_SG_KV_CONFIG = "python/sglang/srt/mem_cache/kv_cache_configurator.py"
_SG_KV_MIXIN = "python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py"
_SG_COMM = "python/sglang/srt/distributed/device_communicators"
_VL_RUNNER = "vllm/v1/worker/gpu_model_runner.py"
_VL_KV = "vllm/v1/core/kv_cache_utils.py"
_TF_CB = "src/transformers/generation/continuous_batching"
_TF_VERSION = "v5.24.0"

_FLOAT = {"avail_mem_gib": float, "mem_gib": float, "elapsed_s": float}
_NAN_TOKEN = r"(?<![\w.\-/])(?:nan|NaN|NAN)(?![\w.\-/])"
_NAN_CONTEXT = (
    r"\b(?:[Ll]ogits?|[Pp]robs?|[Pp]robabilit(?:y|ies)|[Ll]oss|[Tt]ensors?|[Oo]utputs?"
    r"|[Hh]idden[ _]states?|[Aa]ctivations?|[Gg]radients?|[Dd]etected|[Ee]ncountered)\b"
)

# --- SGLang ----------------------------------------------------------------------------------

_SGLANG: tuple[Signature, ...] = (
    _sig(
        "sglang.moe_default_config",
        _K.MOE_CONFIG_MISSING,
        _WARNING,
        r"Using default MoE kernel config\. Performance might be sub-optimal!"
        r"(?: Config file not found at (?P<config_path>.+?)"
        r"(?:, you can create them with (?P<tuning_url>\S+))?\s*$)?",
        literals=("Using default MoE kernel config",),
        source=Source(SGLANG, _SG_MOE, "c050f40d (same text at 083d6013, in v0.5.8.post1 logs)"),
        example="[2026-02-04 11:30:00] Using default MoE kernel config. Performance might be "
        "sub-optimal! Config file not found at /public_sglang_ci/runner-l1-thj6s-gpu-1/_work/"
        "sglang/sglang/python/sglang/srt/layers/moe/fused_moe_triton/configs/triton_3_5_1/"
        "E=60,N=1408,device_name=NVIDIA_H100_80GB_HBM3.json, you can create them with "
        "https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton",
        extract=lambda m: _config_path(m) if m.group("config_path") else {},
    ),
    _sig(
        "sglang.moe_down_config_reuses_up",
        _K.MOE_CONFIG_FALLBACK,
        _WARNING,
        r"Using MoE kernel config with down_moe=False\. Performance might be sub-optimal! "
        r"Config file not found at (?P<config_path>.+?)(?:, you can create them with \S+)?\s*$",
        literals=("Using MoE kernel config with down_moe=False",),
        source=Source(SGLANG, _SG_MOE, "v0.5.8.post1 (log), read at a 2026 main commit"),
        example="[2026-02-19 16:30:07 TP13] Using MoE kernel config with down_moe=False. "
        "Performance might be sub-optimal! Config file not found at /app/sglang/sglang-0.5.8."
        "post1/lib/python3.12/site-packages/sglang/srt/layers/moe/fused_moe_triton/configs/"
        "triton_3_5_1/E=257,N=128,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,"
        "block_shape=[128, 128]_down.json, you can create them with "
        "https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton",
        extract=_config_path,
    ),
    _sig(
        "sglang.moe_down_config_missing_reuse_up",
        _K.MOE_CONFIG_FALLBACK,
        _WARNING,
        r"Down MoE config file not found at (?P<config_path>.+?); reusing the tuned "
        r"up-projection config without TMA",
        literals=("Down MoE config file not found",),
        source=Source(SGLANG, _SG_MOE, "main 2026 (after v0.5.10)"),
        example="[2026-08-02 10:14:51 TP0] Down MoE config file not found at /usr/local/lib/"
        "python3.12/dist-packages/sglang/srt/layers/moe/fused_moe_triton/configs/triton_3_5_1/"
        "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128]_down.json; "
        "reusing the tuned up-projection config without TMA. Performance might be sub-optimal.",
        extract=_config_path,
    ),
    _sig(
        "sglang.moe_triton_version_fallback",
        _K.MOE_CONFIG_FALLBACK,
        _WARNING,
        r"Config file not found at (?P<config_path>.+?)\. Fallback to triton version "
        r"(?P<fallback_triton_version>[\d.]+) and use MoE kernel config from "
        r"(?P<fallback_path>.+?)\. Performance might be sub-optimal!",
        literals=("Fallback to triton version",),
        source=Source(SGLANG, _SG_MOE, "c050f40d"),
        example="[2025-11-02 08:12:40 TP0] Config file not found at /sgl-workspace/sglang/python/"
        "sglang/srt/layers/moe/fused_moe_triton/configs/triton_3_4_0/E=128,N=768,"
        "device_name=NVIDIA_H200.json. Fallback to triton version 3.2.0 and use MoE kernel "
        "config from /sgl-workspace/sglang/python/sglang/srt/layers/moe/fused_moe_triton/configs/"
        "triton_3_2_0/E=128,N=768,device_name=NVIDIA_H200.json. Performance might be sub-optimal!",
        extract=_moe_triton_fallback,
    ),
    _sig(
        "sglang.moe_config_loaded",
        _K.MOE_CONFIG_LOADED,
        _INFO,
        r"Using MoE kernel config from (?P<config_path>.+?\.json)\.?\s*$",
        literals=("Using MoE kernel config from",),
        source=Source(SGLANG, _SG_MOE, "c050f40d"),
        example="[2026-06-08 07:21:05 TP1] Using MoE kernel config from /sgl-workspace/sglang/"
        "python/sglang/srt/layers/moe/fused_moe_triton/configs/triton_3_2_0/E=128,N=384,"
        "device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json.",
        extract=_config_path,
    ),
    _sig(
        "sglang.deepgemm_scale_fmt_not_ue8m0",
        _K.DEEPGEMM_SCALE_FORMAT,
        _WARNING,
        r"DeepGemm is enabled but the scale_fmt of checkpoint is not ue8m0\.",
        literals=("DeepGemm is enabled but the scale_fmt",),
        source=Source(SGLANG, "python/sglang/srt/configs/model_config.py", "001adf56"),
        example="[2026-04-12 12:43:59] WARNING model_config.py:856: DeepGemm is enabled but the "
        "scale_fmt of checkpoint is not ue8m0. This might cause accuracy degradation on Blackwell.",
    ),
    _sig(
        "sglang.quantization_not_optimized",
        _K.QUANTIZATION_SLOW,
        _WARNING,
        r"(?P<quantization>\S+) quantization is not fully optimized yet\.",
        literals=("quantization is not fully optimized yet",),
        source=Source(SGLANG, "python/sglang/srt/configs/model_config.py", "001adf56"),
        example="[2026-03-02 09:41:12] bitsandbytes quantization is not fully optimized yet. "
        "The speed can be slower than non-quantized models.",
    ),
    _sig(
        "sglang.server_args",
        _K.ENGINE_CONFIG,
        _INFO,
        r"server_args=ServerArgs\(",
        literals=("server_args=ServerArgs(",),
        source=Source(SGLANG, "python/sglang/srt/entrypoints/engine.py", "v0.4-v0.5"),
        example="[2025-04-03 04:46:21] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-"
        "Instruct', tokenizer_path='meta-llama/Llama-3.1-8B-Instruct', dtype='auto', "
        "kv_cache_dtype='auto', quantization=None, mem_fraction_static=0.88, "
        "max_running_requests=None, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "tp_size=1, disable_cuda_graph=False, disable_radix_cache=False)",
        extract=_sglang_server_args,
    ),
    _sig(
        "sglang.server_args_dict",
        _K.ENGINE_CONFIG,
        _INFO,
        r"server_args=(?P<_args>\{.*\})\s*$",
        literals=("server_args={",),
        source=Source(SGLANG, "python/sglang/srt/entrypoints/engine.py", "v0.5.23"),
        example="[2026-11-20 10:02:11] server_args={'model_path': '/models/Qwen3-8B', "
        "'dtype': 'auto', 'kv_cache_dtype': 'auto', 'mem_fraction_static': 0.903, "
        "'max_running_requests': None, 'chunked_prefill_size': 8192, "
        "'max_prefill_tokens': 16384, 'tp_size': 1, 'disable_cuda_graph': False}",
        extract=_sglang_server_args_dict,
    ),
    _sig(
        "sglang.server_args_cuda_graph_disabled",
        _K.CUDA_GRAPH_DISABLED,
        _WARNING,
        r"server_args=ServerArgs\((?=.*\bdisable_cuda_graph=True\b)",
        literals=("disable_cuda_graph=True",),
        source=Source(SGLANG, "python/sglang/srt/entrypoints/engine.py", "v0.4-v0.5"),
        example="[2025-09-03 18:31:02] server_args=ServerArgs(model_path='/models/Qwen3-30B-A3B', "
        "tp_size=2, mem_fraction_static=0.85, max_running_requests=64, "
        "disable_cuda_graph=True, disable_radix_cache=False)",
        extract=lambda _m: {"phase": "decode", "reason": "--disable-cuda-graph"},
    ),
    _sig(
        "sglang.load_weight_end",
        _K.WEIGHTS_LOADED,
        _INFO,
        r"Load weight end\.",
        literals=("Load weight end.",),
        source=Source(SGLANG, _SG_RUNNER, "0005834c"),
        example="[2026-08-17 16:52:10] Load weight end. elapsed=100.59 s, "
        "type=BailingMoeV3ForCausalLM, avail mem=97.27 GB, mem usage=15.47 GB.",
        extract=lambda m: _sglang_memory(m) | _model_type(m),
    ),
    _sig(
        "sglang.kv_cache_allocated",
        _K.KV_CACHE_CAPACITY,
        _INFO,
        r"KV Cache is allocated\.(?: dtype: (?P<dtype>[\w.]+),)? #tokens: (?P<tokens>\d+)",
        literals=("KV Cache is allocated",),
        source=Source(SGLANG, _SG_POOL, "v0.4-v0.5 ('dtype:' since 2026 main)"),
        example="[2025-10-16 09:06:22 TP5] KV Cache is allocated. #tokens: 2795207, "
        "K size: 53.31 GB, V size: 53.31 GB",
        converters={"tokens": _count},
        extract=_sizes_gib,
    ),
    _sig(
        "sglang.scheduler_limits",
        _K.SCHEDULER_LIMITS,
        _INFO,
        r"max_total_num_tokens=(?P<max_total_num_tokens>\d+)",
        literals=("max_total_num_tokens=",),
        source=Source(SGLANG, _SG_SCHEDULER, "v0.4-v0.5 (available_gpu_mem since v0.4.x)"),
        example="[2025-03-08 12:29:28 TP0] max_total_num_tokens=1226984, "
        "chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=64, "
        "context_len=262144, available_gpu_mem=10.39 GB",
        converters={"max_total_num_tokens": int},
        extract=lambda m: _key_values(_after(m)),
    ),
    _sig(
        "sglang.capture_cuda_graph_begin",
        _K.CUDA_GRAPH_CAPTURE_BEGIN,
        _INFO,
        r"Capture (?P<device>cuda|npu|cpu|musa|xpu) graph begin\.",
        literals=("graph begin.",),
        source=Source(SGLANG, _SG_RUNNER, "0005834c (v0.5.10 and earlier)"),
        example="[2025-10-16 09:06:22 TP0] Capture cuda graph begin. This can take up to several "
        "minutes. avail mem=11.82 GB",
        extract=_sglang_memory,
    ),
    _sig(
        "sglang.capture_cuda_graph_bs",
        _K.CUDA_GRAPH_CAPTURE_BEGIN,
        _INFO,
        r"Capture cuda graph bs \[(?P<_bs>[\d,\s]*)\]",
        literals=("Capture cuda graph bs [",),
        source=Source(
            SGLANG,
            "python/sglang/srt/model_executor/cuda_graph_runner.py",
            "0021673c (CudaGraphRunner.__init__: rank0_log of capture_bs)",
        ),
        example="[2025-06-12 10:41:07 TP0] Capture cuda graph bs [1, 2, 4, 8, 16, 24, 32, 40, "
        "48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160]",
        extract=lambda m: _batch_sizes(m.group("_bs")),
    ),
    _sig(
        "sglang.capture_cuda_graph_end",
        _K.CUDA_GRAPH_CAPTURE_END,
        _INFO,
        r"Capture (?P<device>cuda|npu|cpu|musa|xpu) graph end\. "
        r"Time elapsed: (?P<elapsed_s>[\d.]+) s",
        literals=("graph end. Time elapsed",),
        source=Source(SGLANG, _SG_RUNNER, "0005834c (v0.5.10 and earlier)"),
        example="[2025-11-10 19:59:09 TP0] Capture cuda graph end. Time elapsed: 11.39 s. "
        "mem usage=1.00 GB. avail mem=11.17 GB.",
        converters=_FLOAT,
        extract=lambda m: {k: v for k, v in _sglang_memory(m).items() if k != "elapsed_s"},
    ),
    _sig(
        "sglang.capture_phase_cuda_graph_begin",
        _K.CUDA_GRAPH_CAPTURE_BEGIN,
        _INFO,
        r"Capture (?P<phase>(?:target|draft) \w+) CUDA graph begin\.",
        literals=("CUDA graph begin.",),
        source=Source(SGLANG, "python/sglang/srt/speculative/eagle_worker.py", "main 2026"),
        example="[2026-07-21 08:21:55 TP0] Capture target verify CUDA graph begin. backend=full, "
        "num_tokens_per_bs=6, bs=[1, 2, 3, 4, 5, 6], avail mem=7.77 GB",
        extract=_sglang_capture_settings,
    ),
    _sig(
        "sglang.capture_phase_cuda_graph_end",
        _K.CUDA_GRAPH_CAPTURE_END,
        _INFO,
        r"Capture (?P<phase>(?:target|draft) \w+) CUDA graph end\. elapsed=(?P<elapsed_s>[\d.]+) s",
        literals=("CUDA graph end. elapsed=",),
        source=Source(SGLANG, "python/sglang/srt/speculative/eagle_worker.py", "main 2026"),
        example="[2026-07-21 13:35:33 TP0] Capture target decode CUDA graph end. elapsed=4.83 s, "
        "mem usage=0.24 GB, avail mem=7.28 GB.",
        converters=_FLOAT,
        extract=lambda m: {k: v for k, v in _sglang_memory(m).items() if k != "elapsed_s"},
    ),
    _sig(
        "sglang.capture_cuda_graph_failed",
        _K.CUDA_GRAPH_CAPTURE_FAILED,
        _ERROR,
        r"Capture (?:\w+ )?(?:cuda|CUDA) graph failed: ?(?P<detail>.*?)\s*$",
        literals=("graph failed",),
        source=Source(SGLANG, "python/sglang/srt/model_executor/cuda_graph_runner.py", "v0.5"),
        example="Exception: Capture cuda graph failed: FlashAttention only support fp16 and bf16 "
        "data type",
    ),
    _sig(
        "sglang.disable_prefill_cuda_graph",
        _K.CUDA_GRAPH_DISABLED,
        _INFO,
        r"Disable (?P<phase>prefill|piecewise) CUDA graph (?:because|for) (?P<reason>.+?)"
        r"(?: \(e\.g\..*)?\.?\s*$",
        literals=("CUDA graph because", "CUDA graph for the"),
        source=Source(SGLANG, _SG_RUNNER, "0005834c"),
        example="[2026-07-01 15:19:55 TP5] Disable prefill CUDA graph because cuda_graph_config "
        "resolved prefill.backend='disabled' (e.g. via --cuda-graph-backend-prefill=disabled or "
        "auto-disable rules).",
    ),
    _sig(
        "sglang.kv_cache_pool_full_retract",
        _K.KV_CACHE_FULL,
        _WARNING,
        r"KV cache pool is full\. Retract requests\.",
        literals=("KV cache pool is full",),
        source=Source(SGLANG, _SG_SCHEDULER, "v0.5"),
        example="[2026-09-13 16:06:07] KV cache pool is full. Retract requests. #retracted_reqs: "
        "1, #new_tokens_gained: 646, #new_token_ratio: 0.0980 -> 0.3487",
        extract=_sglang_retract,
    ),
    _sig(
        "sglang.decode_out_of_memory_retract",
        _K.KV_CACHE_FULL,
        _WARNING,
        r"Decode out of memory happened\.",
        literals=("Decode out of memory happened",),
        source=Source(SGLANG, _SG_SCHEDULER, "v0.4.3 (log, 2025-03)"),
        example="[2025-03-07 21:49:33 TP13] Decode out of memory happened. #retracted_reqs: 1, "
        "#new_token_ratio: 0.1474 -> 0.1845",
        extract=_sglang_retract,
    ),
    # Raised when the profiled token count is <= 0; "Current value: ..." since v0.5.4.
    _sig(
        "sglang.not_enough_memory",
        _K.KV_SIZE_NEGATIVE,
        _ERROR,
        r"Not enough memory\. Please try to increase --mem-fraction-static\.",
        literals=("Not enough memory. Please try to increase",),
        source=Source(
            SGLANG,
            f"{_SG_RUNNER} (ModelRunner.init_memory_pool, to v0.5.4), "
            "model_runner_kv_cache_mixin.py and pool_configurator.py (MemoryPoolConfig."
            "__post_init__, since v0.5.10)",
            "v0.4.3-v0.5.23",
        ),
        example="RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: mem_fraction_static=0.1",
        extract=lambda m: _key_values(_after(m)),
    ),
    _sig(
        "sglang.weights_leave_no_kv_memory",
        _K.KV_SIZE_NEGATIVE,
        _ERROR,
        r"Loaded weights leave no GPU memory for the KV cache under "
        r"--mem-fraction-static=(?P<mem_fraction_static>[\d.]+)\..*?\(minimum viable = "
        r"1 - available/pre = (?P<min_mem_fraction_static>-?[\d.]+)\)",
        literals=("Loaded weights leave no GPU memory",),
        source=Source(
            SGLANG,
            f"{_SG_KV_CONFIG} (KVCacheConfigurator._profile_available_bytes)",
            "v0.5.16-v0.5.23",
        ),
        example="ValueError: Loaded weights leave no GPU memory for the KV cache under "
        "--mem-fraction-static=0.8. Raise --mem-fraction-static above 0.874 (minimum viable = "
        "1 - available/pre = 0.8731). If using speculative decoding, draft weights are now "
        "counted.",
        converters={"mem_fraction_static": float, "min_mem_fraction_static": float},
    ),
    _sig(
        "sglang.mamba_state_cache_no_memory",
        _K.KV_SIZE_NEGATIVE,
        _ERROR,
        r"Not enough GPU memory for hybrid \(mamba/linear-attention\) state cache\. Computed "
        r"max_mamba_cache_size=(?P<max_mamba_cache_size>-?\d+) "
        r"\(total_rest_memory=(?P<rest_gib>-?[\d.]+) GB",
        literals=("Not enough GPU memory for hybrid",),
        source=Source(
            SGLANG,
            f"{_SG_KV_MIXIN} (ModelRunnerKVCacheMixin.handle_max_mamba_cache, v0.5.13), "
            f"{_SG_KV_CONFIG} (KVCacheConfigurator._handle_max_mamba_cache, since v0.5.16)",
            "v0.5.13-v0.5.23",
        ),
        example="RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state "
        "cache. Computed max_mamba_cache_size=-4 (total_rest_memory=-0.42 GB, "
        "mamba_cache_per_req=57.38 MB). Try: (1) reduce --max-running-requests, (2) increase "
        "--mem-fraction-static, (3) reduce --speculative-num-draft-tokens, or (4) use GPUs with "
        "more memory.",
        converters={"max_mamba_cache_size": int, "rest_gib": float},
    ),
    # `configured` is the requested cap per data-parallel worker (the flag // attention DP size).
    _sig(
        "sglang.max_running_requests_reduced",
        _K.RUNNING_CAP_LOWERED,
        _WARNING,
        r"max_running_requests was reduced from the requested (?P<configured>\d+) to "
        r"(?P<in_force>\d+) \(per dp worker\) due to the available KV cache"
        r"(?P<_auxiliary> or auxiliary-state)? capacity",
        literals=("max_running_requests was reduced",),
        source=Source(
            SGLANG,
            f"{_SG_KV_CONFIG} (KVCacheConfigurator.resolve_max_num_reqs), "
            "python/sglang/srt/hardware_backend/mlx/model_runner_stub.py ('or auxiliary-state')",
            "v0.5.16-v0.5.23",
        ),
        example="[2026-05-11 10:22:08 TP0] max_running_requests was reduced from the requested "
        "256 to 104 (per dp worker) due to the available KV cache capacity.",
        converters={"configured": int, "in_force": int},
        extract=lambda m: {
            "reason": "kv cache or auxiliary state" if m.group("_auxiliary") else "kv cache"
        },
    ),
    _sig(
        "sglang.max_running_requests_capped_by_mamba",
        _K.RUNNING_CAP_LOWERED,
        _WARNING,
        r"max_running_requests is capped to (?P<in_force>\d+) by the mamba state cache "
        r"\(max_mamba_cache_size=(?P<max_mamba_cache_size>\d+), "
        r"(?P<slots_per_request>\d+) state slots per request\)",
        literals=("max_running_requests is capped to",),
        source=Source(
            SGLANG, f"{_SG_KV_CONFIG} (KVCacheConfigurator.resolve_max_num_reqs)", "v0.5.19-v0.5.23"
        ),
        example="[2026-06-02 14:03:51 TP0] max_running_requests is capped to 48 by the mamba "
        "state cache (max_mamba_cache_size=144, 3 state slots per request). To raise it: "
        "increase --mamba-full-memory-ratio or --max-mamba-cache-size, or halve the state size "
        "with --mamba-ssm-dtype bfloat16.",
        converters=dict.fromkeys(("in_force", "max_mamba_cache_size", "slots_per_request"), int),
        extract=lambda _m: {"reason": "mamba state cache"},
    ),
    _sig(
        "sglang.mamba_state_cache_too_small",
        _K.RUNNING_CAP_LOWERED,
        _ERROR,
        r"Hybrid \(mamba/linear-attention\) state cache is too small to serve any requests\. "
        r"max_mamba_cache_size=(?P<max_mamba_cache_size>-?\d+), "
        r"mamba_ratio=(?P<slots_per_request>\d+), resulting max_num_reqs=(?P<in_force>-?\d+)",
        literals=("state cache is too small to serve any requests",),
        source=Source(
            SGLANG,
            f"{_SG_KV_MIXIN} (ModelRunnerKVCacheMixin._resolve_max_num_reqs, v0.5.13), "
            f"{_SG_KV_CONFIG} (KVCacheConfigurator.resolve_max_num_reqs, since v0.5.16)",
            "v0.5.13-v0.5.23",
        ),
        example="RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve "
        "any requests. max_mamba_cache_size=2, mamba_ratio=3, resulting max_num_reqs=0. Try: (1) "
        "reduce --max-running-requests, (2) increase --mem-fraction-static, or (3) use GPUs with "
        "more memory.",
        converters=dict.fromkeys(("in_force", "max_mamba_cache_size", "slots_per_request"), int),
        extract=lambda _m: {"reason": "mamba state cache"},
    ),
    # Before v0.5.10 the scheduler's own thread: "Watchdog timeout (self.watchdog_timeout=300)".
    _sig(
        "sglang.watchdog_timeout",
        _K.ENGINE_HANG,
        _ERROR,
        r"(?:(?P<_process>\w+) watchdog timeout|Watchdog timeout) "
        r"\(self\.watchdog_timeout=(?P<timeout_s>[\d.]+)(?:, self\.soft=False)?\)",
        literals=("atchdog timeout (self.watchdog_timeout=",),
        source=Source(
            SGLANG,
            f"{_SG_SCHEDULER} (Scheduler.watchdog_thread, to v0.5.4), "
            "python/sglang/srt/utils/watchdog.py (WatchdogRaw._watchdog_once, since v0.5.10)",
            "v0.4.3-v0.5.23",
        ),
        example="[2026-03-05 08:10:44 DP0 TP0] Scheduler watchdog timeout "
        "(self.watchdog_timeout=300, self.soft=False)",
        converters={"timeout_s": float},
        extract=_sglang_watchdog,
    ),
    # --soft-watchdog-timeout: the same line, but the engine only dumps its state and goes on.
    _sig(
        "sglang.soft_watchdog_timeout",
        _K.ENGINE_HANG,
        _WARNING,
        r"(?P<_process>\w+) watchdog timeout \(self\.watchdog_timeout=(?P<timeout_s>[\d.]+), "
        r"self\.soft=True\)",
        literals=("watchdog timeout (self.watchdog_timeout=",),
        source=Source(
            SGLANG,
            "python/sglang/srt/utils/watchdog.py (WatchdogRaw._watchdog_once)",
            "v0.5.10-v0.5.23",
        ),
        example="[2026-03-05 08:10:44 DP0 TP0] Scheduler watchdog timeout "
        "(self.watchdog_timeout=60.0, self.soft=True)",
        converters={"timeout_s": float},
        extract=lambda m: _sglang_watchdog(m) | {"soft": True},
    ),
    _sig(
        "sglang.custom_allreduce_disabled",
        _K.CUSTOM_ALLREDUCE_OFF,
        _WARNING,
        _CUSTOM_ALLREDUCE_OFF,
        literals=("is disabled because", "is disabled due to an unsupported world size"),
        source=Source(
            SGLANG,
            f"{_SG_COMM}/custom_all_reduce.py (CustomAllreduce.__init__, to v0.5.4), "
            "custom_all_reduce_utils.py (can_use_custom_all_reduce_with_nvlink, since v0.5.10: "
            "'CustomAllreduce is disabled', 'CustomAllReduceV2 is disabled')",
            "v0.4.3-v0.5.23",
        ),
        example="[2025-02-20 09:12:31 TP0] Custom allreduce is disabled because your platform "
        "lacks GPU P2P capability or P2P test failed. To silence this warning, specify "
        "disable_custom_all_reduce=True explicitly.",
        converters={"world_size": int},
        extract=_custom_allreduce_reason,
    ),
    _sig(
        "sglang.nan_in_logits",
        _K.NAN,
        _ERROR,
        r"Detected errors during sampling! NaN in the (?P<where>\w+)",
        literals=("Detected errors during sampling",),
        source=Source(
            SGLANG, "python/sglang/srt/layers/sampler.py", "v0.5 (--enable-nan-detection)"
        ),
        example="ValueError: Detected errors during sampling! NaN in the logits.",
    ),
    _sig(
        "sglang.scheduler_exception",
        _K.ENGINE_ERROR,
        _ERROR,
        r"(?P<process>Scheduler|DataParallelController|TokenizerManager|DetokenizerManager) "
        r"hit an exception",
        literals=("hit an exception",),
        source=Source(SGLANG, _SG_SCHEDULER, "v0.4-v0.5"),
        example="[2026-03-13 14:24:23 TP0] Scheduler hit an exception: Traceback (most recent "
        "call last):",
    ),
    _sig(
        "sglang.child_failed",
        _K.ENGINE_ERROR,
        _ERROR,
        r"Received sigquit from a child process\. It usually means the child failed\.",
        literals=("Received sigquit from a child process",),
        source=Source(SGLANG, "python/sglang/srt/entrypoints/engine.py", "v0.4-v0.5"),
        example="[2026-02-27 15:27:13] Received sigquit from a child process. It usually means "
        "the child failed.",
    ),
    _sig(
        "sglang.fired_up",
        _K.ENGINE_READY,
        _INFO,
        r"The server is fired up and ready to roll!",
        literals=("The server is fired up",),
        source=Source(SGLANG, "python/sglang/srt/entrypoints/http_server.py", "v0.4-v0.5"),
        example="[2026-08-17 16:52:41] The server is fired up and ready to roll!",
    ),
    _sig(
        "sglang.argparse_error",
        _K.BAD_ARGUMENT,
        _ERROR,
        r"error: (?P<detail>unrecognized arguments: .+|argument [^:]+: .+"
        r"|the following arguments are required: .+)$",
        literals=("error: ",),
        source=Source("python/cpython", "Lib/argparse.py", "3.10-3.13 (used by sglang)"),
        example="launch_server.py: error: unrecognized arguments: --max-running-request 64",
    ),
)

# --- vLLM ------------------------------------------------------------------------------------

_VLLM: tuple[Signature, ...] = (
    _sig(
        "vllm.moe_default_config",
        _K.MOE_CONFIG_MISSING,
        _WARNING,
        r"Using default MoE config\. Performance might be sub-optimal!"
        r"(?: Config file not found at (?P<config_path>.+?)\s*$)?",
        literals=("Using default MoE config",),
        source=Source(
            VLLM,
            "vllm/model_executor/layers/fused_moe/fused_moe.py",
            "000d1458 (one path; later releases log a list of paths)",
        ),
        example="WARNING 11-03 15:51:20 [fused_moe.py:690] Using default MoE config. Performance "
        "might be sub-optimal! Config file not found at /root/vllm/vllm/model_executor/layers/"
        "fused_moe/configs/E=128,N=8192,device_name=NVIDIA_GeForce_RTX_4090.json",
        extract=lambda m: _config_path(m) if m.group("config_path") else {},
    ),
    _sig(
        "vllm.moe_config_loaded",
        _K.MOE_CONFIG_LOADED,
        _INFO,
        r"Using configuration from (?P<config_path>\S+\.json) for MoE layer\.",
        literals=("for MoE layer",),
        source=Source(VLLM, "vllm/model_executor/layers/fused_moe/fused_moe.py", "000d1458"),
        example="(EngineCore_DP0 pid=441) INFO 11-24 11:43:50 [fused_moe.py:727] Using "
        "configuration from /usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/"
        "fused_moe/configs/E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3.json for MoE layer.",
        extract=_config_path,
    ),
    _sig(
        "vllm.w8a8_block_fp8_default_config",
        _K.KERNEL_CONFIG_MISSING,
        _WARNING,
        r"Using default W8A8 Block FP8 kernel config\. Performance might be sub-optimal! "
        r"Config file not found at (?P<config_path>\S+\.json)",
        literals=("Using default W8A8 Block FP8 kernel config",),
        source=Source(
            VLLM, "vllm/model_executor/layers/quantization/utils/fp8_utils.py", "v0.10 (log)"
        ),
        example="(Worker_TP1_EP1 pid=2079) WARNING 09-24 20:53:33 [fp8_utils.py:581] Using "
        "default W8A8 Block FP8 kernel config. Performance might be sub-optimal! Config file not "
        "found at /workspace/.venv/lib/python3.12/site-packages/vllm/model_executor/layers/"
        "quantization/utils/configs/N=4096,K=1024,device_name=NVIDIA_L40S,dtype=fp8_w8a8,"
        "block_shape=[128,128].json",
        extract=_config_path,
    ),
    _sig(
        "vllm.quantization_not_optimized",
        _K.QUANTIZATION_SLOW,
        _WARNING,
        r"(?P<quantization>\S+) quantization is not fully optimized yet\.",
        literals=("quantization is not fully optimized yet",),
        source=Source(VLLM, "vllm/config/model.py", "v0.11"),
        example="WARNING 03-21 20:14:31 [config.py:829] gptq quantization is not fully optimized "
        "yet. The speed can be slower than non-quantized models.",
    ),
    _sig(
        "vllm.api_server_version",
        _K.ENGINE_VERSION,
        _INFO,
        r"vLLM API server version (?P<version>\S+)",
        literals=("vLLM API server version",),
        source=Source(VLLM, "vllm/entrypoints/openai/api_server.py", "v0.8-v0.2x"),
        example="(APIServer pid=1) INFO 11-25 08:00:36 [api_server.py:1977] vLLM API server "
        "version 0.11.1",
    ),
    _sig(
        "vllm.engine_init_version",
        _K.ENGINE_VERSION,
        _INFO,
        r"Initializing an? (?:V\d )?LLM engine \((?P<version>[^)]+)\) with config",
        literals=("LLM engine (",),
        source=Source(VLLM, "vllm/v1/engine/core.py", "v0.8-v0.2x (V0: vllm/engine/llm_engine.py)"),
        example="(EngineCore_DP0 pid=270) INFO 11-25 08:00:48 [core.py:93] Initializing a V1 LLM "
        "engine (v0.11.1) with config: model='Qwen/Qwen3-30B-A3B', speculative_config=None",
        converters={"version": lambda text: text.removeprefix("v")},
    ),
    _sig(
        "vllm.compilation_config",
        _K.ENGINE_CONFIG,
        _INFO,
        r"compilation_config=(?P<_config>\{.*\})",
        literals=("compilation_config={",),
        source=Source(
            VLLM,
            "vllm/config/vllm.py (VllmConfig.__str__), vllm/config/compilation.py "
            "(CompilationConfig.__repr__: its fields as a dict)",
            "v0.11-v0.2x (JSON with max_capture_size before)",
        ),
        example="(EngineCore_DP0 pid=311) INFO 12-02 07:15:40 [core.py:98] Initializing a V1 LLM "
        "engine (v0.13.0) with config: model='/models/Qwen3-8B', enforce_eager=False, "
        "pooler_config=None, compilation_config={'level': None, 'mode': "
        "<CompilationMode.VLLM_COMPILE: 3>, 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: "
        "(2, 1)>, 'cudagraph_num_of_warmups': 1, 'cudagraph_capture_sizes': [1, 2, 4, 8, 16, 24, "
        "32], 'cudagraph_copy_inputs': False, 'max_cudagraph_capture_size': 32, "
        "'local_cache_dir': None}",
        extract=_vllm_compilation,
    ),
    _sig(
        "vllm.non_default_args",
        _K.ENGINE_CONFIG,
        _INFO,
        r"non-default args: (?P<_args>\{.*\})\s*$",
        literals=("non-default args: ",),
        source=Source(VLLM, "vllm/entrypoints/utils.py", "v0.10-v0.2x"),
        example="(APIServer pid=1) INFO 06-01 09:20:16 [utils.py:278] non-default args: "
        "{'model_tag': 'Qwen/Qwen3-30B-A3B', 'host': '0.0.0.0', 'max_model_len': 32768, "
        "'tensor_parallel_size': 2, 'max_num_seqs': 64, 'enforce_eager': True}",
        extract=_vllm_non_default_args,
    ),
    _sig(
        "vllm.chunked_prefill",
        _K.SCHEDULER_LIMITS,
        _INFO,
        r"Chunked prefill is enabled with max_num_batched_tokens=(?P<max_num_batched_tokens>\d+)",
        literals=("Chunked prefill is enabled",),
        source=Source(VLLM, "vllm/config/scheduler.py", "v0.11"),
        example="(APIServer pid=1) INFO 11-25 08:00:42 [scheduler.py:216] Chunked prefill is "
        "enabled with max_num_batched_tokens=8192.",
        converters={"max_num_batched_tokens": int},
    ),
    _sig(
        "vllm.model_loading_took",
        _K.WEIGHTS_LOADED,
        _INFO,
        r"(?:Model loading|Loading model weights) took (?P<mem_gib>[\d.]+) Gi?B"
        r"(?: memory)?(?: and (?P<elapsed_s>[\d.]+) seconds?)?",
        literals=("Model loading took", "Loading model weights took"),
        source=Source(VLLM, _VL_RUNNER, "v0.7-v0.2x"),
        example="(EngineCore_DP0 pid=441) INFO 11-24 11:43:54 [gpu_model_runner.py:3341] Model "
        "loading took 2.0513 GiB memory and 27.200487 seconds",
        converters={"mem_gib": float, "elapsed_s": float},
    ),
    _sig(
        "vllm.available_kv_cache_memory",
        _K.KV_CACHE_MEMORY,
        _INFO,
        r"Available KV cache memory: (?P<available_gib>[\d.]+) GiB",
        literals=("Available KV cache memory",),
        source=Source(VLLM, "vllm/v1/worker/gpu_worker.py", "v0.8-v0.2x"),
        example="(EngineCore_DP0 pid=441) INFO 11-24 11:44:17 [gpu_worker.py:348] Available KV "
        "cache memory: 33.31 GiB",
        converters={"available_gib": float},
    ),
    _sig(
        "vllm.kv_cache_size_tokens",
        _K.KV_CACHE_CAPACITY,
        _INFO,
        r"(?P<device>\w+(?: \+ host)?) KV cache size: (?P<tokens>[\d,]+) tokens",
        literals=("KV cache size: ",),
        source=Source(
            VLLM, _VL_KV, "v0.8-v0.32 (thousands separators since v0.8; 'GPU + host' in v0.32)"
        ),
        example="(EngineCore_DP0 pid=441) INFO 11-24 11:44:18 [kv_cache_utils.py:1234] GPU KV "
        "cache size: 1,587,648 tokens",
        converters={"tokens": _count},
    ),
    _sig(
        "vllm.num_gpu_blocks_override",
        _K.KV_CACHE_CAPACITY,
        _INFO,
        r"Overriding num_gpu_blocks=(?P<blocks_available>\d+) with "
        r"num_gpu_blocks_override=(?P<blocks>\d+)",
        literals=("num_gpu_blocks_override=",),
        source=Source(VLLM, _VL_KV, "v0.32"),
        example="(EngineCore pid=7120) INFO 12-01 10:02:11 [kv_cache_utils.py:2620] Overriding "
        "num_gpu_blocks=8192 with num_gpu_blocks_override=12",
        converters={"blocks_available": int, "blocks": int},
    ),
    _sig(
        "vllm.max_model_len",
        _K.SCHEDULER_LIMITS,
        _INFO,
        r"Using max model len (?P<max_model_len>\d+)",
        literals=("Using max model len",),
        source=Source(VLLM, "vllm/config/model.py", "v0.10-v0.32"),
        example="(APIServer pid=5938) INFO 12-01 09:44:58 [model.py:2152] Using max model len 1024",
        converters={"max_model_len": int},
    ),
    _sig(
        "vllm.scheduler_args",
        _K.SCHEDULER_LIMITS,
        _INFO,
        r"non-default args: (?P<_args>\{.*'(?:max_num_seqs|max_num_batched_tokens)'.*\})\s*$",
        literals=("'max_num_seqs'", "'max_num_batched_tokens'"),
        source=Source(VLLM, "vllm/entrypoints/utils.py", "v0.10-v0.32"),
        example="(APIServer pid=5938) INFO 12-01 09:44:50 [api_utils.py:286] non-default args: "
        "{'host': '127.0.0.1', 'port': 8011, 'model': '/models/tiny', 'dtype': 'float32', "
        "'max_model_len': 1024, 'max_num_seqs': 8}",
        extract=_vllm_scheduler_args,
    ),
    _sig(
        "vllm.gpu_blocks",
        _K.KV_CACHE_CAPACITY,
        _INFO,
        r"# (?P<device>GPU|cuda|CPU|\w+) blocks: (?P<blocks>\d+)(?:, # CPU blocks: \d+)?",
        literals=(" blocks: ",),
        source=Source(VLLM, "vllm/executor/executor_base.py", "v0.6-v0.8 (V0)"),
        example="INFO 03-21 20:15:46 [executor_base.py:111] # cuda blocks: 7191, # CPU blocks: 512",
        converters={"blocks": int},
    ),
    _sig(
        "vllm.max_concurrency",
        _K.MAX_CONCURRENCY,
        _INFO,
        r"Maximum concurrency for (?P<max_model_len>[\d,]+) tokens per request: "
        r"(?P<concurrency>[\d.]+)x",
        literals=("Maximum concurrency for",),
        source=Source(VLLM, _VL_KV, "v0.6-v0.2x"),
        example="(EngineCore_DP0 pid=441) INFO 11-24 11:44:18 [kv_cache_utils.py:1239] Maximum "
        "concurrency for 2,048 tokens per request: 775.22x",
        converters={"max_model_len": _count, "concurrency": float},
    ),
    _sig(
        "vllm.capturing_cuda_graphs",
        _K.CUDA_GRAPH_CAPTURE_BEGIN,
        _INFO,
        r"Capturing CUDA graphs \((?P<phase>[^,()]+), (?P<mode>[A-Z_]+)\)",
        literals=("Capturing CUDA graphs (",),
        source=Source(VLLM, _VL_RUNNER, "v0.10-v0.2x"),
        example="Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 51/51 "
        "[00:01<00:00, 33.44it/s]",
        extract=_capture_progress,
    ),
    _sig(
        "vllm.capturing_cuda_graph_shapes",
        _K.CUDA_GRAPH_CAPTURE_BEGIN,
        _INFO,
        r"Capturing CUDA graph shapes",
        literals=("Capturing CUDA graph shapes",),
        source=Source(VLLM, _VL_RUNNER, "v0.7-v0.9"),
        example="Capturing CUDA graph shapes: 100%|██████████| 35/35 [00:13<00:00,  2.51it/s]",
        extract=_capture_progress,
    ),
    _sig(
        "vllm.capturing_cudagraphs_v0",
        _K.CUDA_GRAPH_CAPTURE_BEGIN,
        _INFO,
        r"Capturing (?:cudagraphs for decoding|the model for CUDA graphs)\.",
        literals=("Capturing cudagraphs for decoding", "Capturing the model for CUDA graphs"),
        source=Source(VLLM, "vllm/worker/model_runner.py", "v0.5-v0.8 (V0)"),
        example="INFO 12-19 22:58:27 model_runner.py:1415] Capturing cudagraphs for decoding. This "
        "may lead to unexpected consequences if the model is not static. To run the model in "
        "eager mode, set 'enforce_eager=True' or use '--enforce-eager' in the CLI.",
    ),
    _sig(
        "vllm.graph_capturing_finished",
        _K.CUDA_GRAPH_CAPTURE_END,
        _INFO,
        r"Graph capturing finished in (?P<elapsed_s>[\d.]+) secs?, took (?P<mem_gib>-?[\d.]+) GiB",
        literals=("Graph capturing finished",),
        source=Source(VLLM, _VL_RUNNER, "v0.6-v0.2x"),
        example="(EngineCore_DP0 pid=188893) INFO 10-21 09:12:04 [gpu_model_runner.py:3480] Graph "
        "capturing finished in 7 secs, took 0.95 GiB",
        converters={"elapsed_s": float, "mem_gib": float},
    ),
    _sig(
        "vllm.skipping_cuda_graph_capture",
        _K.CUDA_GRAPH_DISABLED,
        _WARNING,
        r"Skipping CUDA graph capture(?:\. To turn on CUDA graph capture)?",
        literals=("Skipping CUDA graph capture",),
        source=Source(VLLM, _VL_RUNNER, "v0.9-v0.2x"),
        example="(EngineCore_DP0 pid=1394) WARNING 03-19 11:07:02 [gpu_model_runner.py:4612] "
        "Skipping CUDA graph capture. To turn on CUDA graph capture, ensure `cudagraph_mode` was "
        "not manually set to `NONE`",
        extract=lambda _m: {"phase": "all", "reason": "cudagraph_mode=NONE"},
    ),
    _sig(
        "vllm.cudagraph_disabled_eager",
        _K.CUDA_GRAPH_DISABLED,
        _WARNING,
        r"Cudagraph is disabled under eager mode",
        literals=("Cudagraph is disabled under eager mode",),
        source=Source(VLLM, "vllm/config/vllm.py", "v0.10-v0.2x"),
        example="(APIServer pid=1) INFO 11-25 08:00:42 [vllm.py:500] Cudagraph is disabled under "
        "eager mode",
        extract=lambda _m: {"phase": "all", "reason": "--enforce-eager"},
    ),
    _sig(
        "vllm.preempted_no_kv_space",
        _K.KV_CACHE_FULL,
        _WARNING,
        r"is preempted by PreemptionMode\.(?P<mode>\w+) mode because there is not enough KV "
        r"cache space",
        literals=("is preempted by PreemptionMode",),
        source=Source(VLLM, "vllm/core/scheduler.py", "v0.4-v0.8 (V0)"),
        example="WARNING 05-07 11:02:13 scheduler.py:1754] Sequence group chatcmpl-8f1c is "
        "preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. "
        "This can affect the end-to-end performance. Increase gpu_memory_utilization or "
        "tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=51",
        extract=_vllm_preemption,
    ),
    _sig(
        "vllm.kv_cache_memory_negative",
        _K.KV_SIZE_NEGATIVE,
        _ERROR,
        r"Available KV cache memory: (?P<kv_gib>-[\d.]+) GiB",
        literals=("Available KV cache memory: -",),
        source=Source(
            VLLM,
            "vllm/v1/worker/gpu_worker.py (Worker.determine_available_memory: '%.2f GiB', "
            "'%s GiB' of format_gib in v0.34)",
            "v0.10.1-v0.34.0",
        ),
        example="(EngineCore_DP0 pid=311) INFO 10-14 09:20:02 [gpu_worker.py:298] Available KV "
        "cache memory: -2.35 GiB",
        converters={"kv_gib": float},
    ),
    # Raised when that memory (or V0's block count) is <= 0.
    _sig(
        "vllm.no_memory_for_cache_blocks",
        _K.KV_SIZE_NEGATIVE,
        _ERROR,
        r"No available memory for the cache blocks",
        literals=("No available memory for the cache blocks",),
        source=Source(
            VLLM,
            f"{_VL_KV} (check_enough_kv_cache_memory), vllm/v1/core/kv_cache_planning.py in v0.34, "
            "vllm/worker/worker.py (V0)",
            "v0.6.6-v0.34.0",
        ),
        example="(EngineCore pid=3709) ValueError: No available memory for the cache blocks. Try "
        "increasing `gpu_memory_utilization` when initializing the engine.",
    ),
    _sig(
        "vllm.kv_cache_needed_exceeds_available",
        _K.OUT_OF_MEMORY,
        _ERROR,
        r"\((?P<needed_gib>[\d.]+) GiB KV cache is needed, which is larger than the available KV "
        r"cache memory \((?P<available_gib>-?[\d.]+) GiB\)",
        literals=("KV cache is needed, which is larger than",),
        source=Source(VLLM, _VL_KV, "v0.7-v0.2x"),
        example="ValueError: To serve at least one request with the models's max seq len "
        "(131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache "
        "memory (9.35 GiB). Based on the available memory, the estimated maximum model length is "
        "76592. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine.",
        converters={"needed_gib": float, "available_gib": float},
        extract=_vllm_kv_needed,
    ),
    _sig(
        "vllm.free_memory_below_utilization",
        _K.OUT_OF_MEMORY,
        _ERROR,
        r"Free memory on device \((?P<free_gib>[\d.]+)/(?P<total_gib>[\d.]+) GiB\) on startup is "
        r"less than desired GPU memory utilization \((?P<utilization>[\d.]+), "
        r"(?P<requested_gib>[\d.]+) GiB\)",
        literals=("Free memory on device",),
        source=Source(VLLM, "vllm/v1/worker/utils.py", "v0.10-v0.2x"),
        example="ValueError: Free memory on device (6.9/8.0 GiB) on startup is less than desired "
        "GPU memory utilization (0.9, 7.2 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes.",
        converters={
            "free_gib": float,
            "total_gib": float,
            "utilization": float,
            "requested_gib": float,
        },
    ),
    _sig(
        "vllm.engine_core_failed",
        _K.ENGINE_ERROR,
        _ERROR,
        r"Engine core initialization failed\. See root cause above\."
        r"|EngineCore failed to start\.|EngineCore encountered a fatal error\.",
        literals=(
            "Engine core initialization failed",
            "EngineCore failed to start",
            "EngineCore encountered a fatal error",
        ),
        source=Source(VLLM, "vllm/v1/engine/utils.py, vllm/v1/engine/core.py", "v0.8-v0.2x"),
        example="(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause "
        "above. Failed core proc(s): {}",
    ),
    _sig(
        "vllm.engine_dead",
        _K.ENGINE_ERROR,
        _ERROR,
        r"EngineCore encountered an issue\. See stack trace \(above\) for the root cause\."
        r"|Engine core proc (?P<process>\S+) died unexpectedly"
        r"|engine core exited unexpectedly"
        r"|Engine loop is not running\. Inspect the stacktrace",
        literals=(
            "EngineCore encountered an issue",
            "died unexpectedly",
            "engine core exited unexpectedly",
            "Engine loop is not running",
        ),
        source=Source(
            VLLM,
            "vllm/v1/engine/exceptions.py (EngineDeadError), vllm/v1/engine/core_client.py "
            "(MPClient's engine monitor), vllm/engine/multiprocessing/__init__.py "
            "(ENGINE_DEAD_ERROR, V0)",
            "v0.6.6-v0.34.0",
        ),
        example="(APIServer pid=1) vllm.v1.engine.exceptions.EngineDeadError: EngineCore "
        "encountered an issue. See stack trace (above) for the root cause.",
    ),
    # The client waits for the engine cores' first message: 600 s fixed before v0.34 (with the
    # missing space of its source, "sendinitial"), VLLM_ENGINE_READY_TIMEOUT_S after.
    _sig(
        "vllm.engine_core_start_timeout",
        _K.ENGINE_HANG,
        _ERROR,
        r"Timed out waiting for (?P<_new>new )?engine(?:s to send ?initial message on input "
        r"socket| core processes to start\.(?: This is [^.]*\.)? Waited (?P<timeout_s>[\d.]+)s)",
        literals=("Timed out waiting for engine", "Timed out waiting for new engine"),
        source=Source(
            VLLM,
            "vllm/v1/engine/core_client.py (MPClient.__init__; DPLBAsyncMPClient."
            "_scale_up_elastic_ep, _wait_for_new_engine_ready in v0.34)",
            "v0.10.1-v0.34.0",
        ),
        example="TimeoutError: Timed out waiting for engine core processes to start. This is "
        "often caused by slow weight loading for large models. Waited 600s (configured by "
        "VLLM_ENGINE_READY_TIMEOUT_S). To increase the timeout, set the environment variable: "
        "VLLM_ENGINE_READY_TIMEOUT_S=<seconds>",
        converters={"timeout_s": float},
        extract=lambda m: {
            "what": "engine core",
            "during": "scale-up" if m.group("_new") else "start",
        },
    ),
    _sig(
        "vllm.worker_rpc_timeout",
        _K.ENGINE_HANG,
        _ERROR,
        r"RPC call to (?P<method>\w+) timed out\.",
        literals=("RPC call to ",),
        source=Source(
            VLLM,
            "vllm/v1/executor/multiproc_executor.py (MultiprocExecutor.collective_rpc; "
            "execute_model waits EXECUTE_MODEL_TIMEOUT_S = 40 in v0.8.5, "
            "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS = 300 since v0.10)",
            "v0.8.5-v0.34.0",
        ),
        example="(EngineCore_DP0 pid=270) ERROR 10-14 09:31:07 [core.py:710] TimeoutError: RPC "
        "call to execute_model timed out.",
        extract=lambda _m: {"what": "worker rpc"},
    ),
    _sig(
        "vllm.engine_no_reply",
        _K.ENGINE_HANG,
        _ERROR,
        r"(?:RPCServer|MQLLMEngine) didn't reply within (?P<_ms>\d+) ?ms",
        literals=("didn't reply within",),
        source=Source(
            VLLM,
            "vllm/engine/multiprocessing/client.py (MQLLMEngineClient._send_get_data_rpc_request, "
            "_await_ack; VLLM_RPC_TIMEOUT in ms, V0)",
            "v0.6.6-v0.8.5",
        ),
        example="TimeoutError: RPCServer didn't reply within 10000 ms",
        extract=lambda m: {"what": "engine core", "timeout_s": int(m.group("_ms")) / 1000},
    ),
    # A process waited that long for another (hanging, or compiling): INFO since v0.11, DEBUG
    # before ("in %s second.", with "foundin" on v0.8.5's read path).
    _sig(
        "vllm.shm_broadcast_wait",
        _K.ENGINE_HANG,
        _WARNING,
        r"No available shared memory broadcast block found ?in (?P<timeout_s>[\d.]+) seconds?",
        literals=("No available shared memory broadcast block",),
        source=Source(
            VLLM,
            "vllm/distributed/device_communicators/shm_broadcast.py (MessageQueue.acquire_write, "
            "acquire_read; VLLM_RINGBUFFER_WARNING_INTERVAL)",
            "v0.8.5-v0.34.0",
        ),
        example="(Worker_TP1 pid=412) INFO 10-14 09:29:55 [shm_broadcast.py:466] No available "
        "shared memory broadcast block found in 60 seconds. This typically happens when some "
        "processes are hanging or doing some time-consuming work (e.g. compilation).",
        converters={"timeout_s": float},
        extract=lambda _m: {"what": "shm broadcast"},
    ),
    _sig(
        "vllm.custom_allreduce_disabled",
        _K.CUSTOM_ALLREDUCE_OFF,
        _WARNING,
        _CUSTOM_ALLREDUCE_OFF,
        literals=("is disabled because", "are disabled because", "is disabled due to an"),
        source=Source(
            VLLM,
            "vllm/distributed/device_communicators/custom_all_reduce.py (CustomAllreduce.__init__;"
            " 'spans across nodes' to v0.11, 'Custom collectives ... MNNVL' in v0.34)",
            "v0.6.6-v0.34.0",
        ),
        example="(VllmWorker rank=0 pid=2210) WARNING 05-02 10:00:41 [custom_all_reduce.py:137] "
        "Custom allreduce is disabled because it's not supported on more than two PCIe-only "
        "GPUs. To silence this warning, specify disable_custom_all_reduce=True explicitly.",
        converters={"world_size": int},
        extract=_custom_allreduce_reason,
    ),
    _sig(
        "vllm.argparse_error",
        _K.BAD_ARGUMENT,
        _ERROR,
        r"error: (?P<detail>unrecognized arguments: .+|argument [^:]+: .+"
        r"|the following arguments are required: .+)$",
        literals=("error: ",),
        source=Source("python/cpython", "Lib/argparse.py", "3.10-3.13 (used by vllm serve)"),
        example="vllm serve: error: argument --max-num-seqs: invalid int value: 'many'",
    ),
)

# --- transformers serve (and the embedded engine) -------------------------------------------

_TF_CACHE = Source(TRANSFORMERS, f"{_TF_CB}/cache.py", _TF_VERSION)
_TF_SIZING = Source(
    TRANSFORMERS, f"{_TF_CB}/cache.py (PagedAttentionMemoryHandler._check_footprint)", _TF_VERSION
)
_TF_INIT = Source(TRANSFORMERS, f"{_TF_CB}/initialization.py", _TF_VERSION)
_TF_BOOL = r"True|False"
_CB_LOG = "2026-12-02 00:49:28,{ms} - ContinuousBatchingLogger - INFO - "

_TRANSFORMERS: tuple[Signature, ...] = (
    _sig(
        "transformers.paged_cache_initialized",
        _K.KV_CACHE_CAPACITY,
        _INFO,
        r"Paged cache initialized: self\.max_batch_tokens = (?P<max_batch_tokens>-?\d+), "
        r"self\.num_sectors = (?P<num_sectors>-?\d+), mb_per_sector = (?P<mib_per_sector>-?\d+)",
        literals=("Paged cache initialized",),
        source=_TF_CACHE,
        example=_CB_LOG.format(ms="204") + "Paged cache initialized: self.max_batch_tokens = "
        "8192, self.num_sectors = 11, mb_per_sector = 0",
        converters={"max_batch_tokens": int, "num_sectors": int, "mib_per_sector": int},
    ),
    _sig(
        "transformers.memory_for_cache",
        _K.KV_CACHE_MEMORY,
        _INFO,
        r"Memory available for cache allocation: (?P<available_gib>-?\d+ MB)",
        literals=("Memory available for cache allocation",),
        source=_TF_CACHE,
        example=_CB_LOG.format(ms="204") + "Memory available for cache allocation: 412 MB",
        # `available_memory // 1024**2`: the "MB" are MiB.
        converters={"available_gib": _gib},
    ),
    _sig(
        "transformers.cache_sizing_invalid",
        _K.KV_CACHE_SIZING_FAILED,
        _ERROR,
        r"Invalid values: max_batch_tokens = (?P<max_batch_tokens>-?\d+), "
        r"num_sectors = (?P<num_sectors>-?\d+)",
        literals=("Invalid values: max_batch_tokens",),
        source=_TF_SIZING,
        example="2026-12-02 00:50:15,405 - ContinuousBatchingLogger - ERROR - Error in generation "
        "loop: Invalid values: max_batch_tokens = 8192, num_sectors = -34",
        converters={"max_batch_tokens": int, "num_sectors": int},
    ),
    _sig(
        "transformers.cache_footprint_too_large",
        _K.KV_CACHE_SIZING_FAILED,
        _ERROR,
        r"Memory footprint (?P<footprint_bytes>-?\d+) is more than available memory "
        r"(?P<available_bytes>-?\d+)",
        literals=("Memory footprint ",),
        source=_TF_SIZING,
        example="MemoryError: Memory footprint 38606667776 is more than available memory 4327018",
        converters={"footprint_bytes": int, "available_bytes": int},
    ),
    _sig(
        "transformers.cb_worker_dead",
        _K.ENGINE_ERROR,
        _ERROR,
        # Without the request id: every refused request is one event, counted.
        r"CB worker (?:is dead and cannot accept|died during) request"
        r"|\"reason\": ?\"cb_worker_dead\"",
        literals=("CB worker ", "cb_worker_dead"),
        source=Source(
            TRANSFORMERS,
            "src/transformers/cli/serving/utils.py, cli/serving/server.py",
            _TF_VERSION,
        ),
        example='{"error":"CB worker is dead and cannot accept request '
        "45159120-62f1-4369-8a71-119c2e018ddd: Invalid values: max_batch_tokens = 8192, "
        'num_sectors = -34"}',
        extract=_cb_worker_dead,
    ),
    # One event per line, by the decode path's choice (what decode steps replay): "cuda
    # graphs" only when they are on, so a CPU run (no graph backend: always (False, False))
    # never reads as graphs on.
    _sig(
        "transformers.cuda_graphs",
        _K.ENGINE_CONFIG,
        _INFO,
        rf"Using cuda graphs for \(varlen, decode\) paths: \((?P<cuda_graph_varlen>{_TF_BOOL}), "
        r"(?P<cuda_graph_decode>True)\)",
        literals=("Using cuda graphs for (varlen, decode) paths",),
        source=_TF_INIT,
        example=_CB_LOG.format(ms="188") + "Using cuda graphs for (varlen, decode) paths: "
        "(True, True)",
        converters={"cuda_graph_varlen": _scalar, "cuda_graph_decode": _scalar},
    ),
    _sig(
        "transformers.cuda_graphs_off",
        _K.CUDA_GRAPH_DISABLED,
        _INFO,
        rf"Using cuda graphs for \(varlen, decode\) paths: \((?P<cuda_graph_varlen>{_TF_BOOL}), "
        r"(?P<cuda_graph_decode>False)\)",
        literals=("Using cuda graphs for (varlen, decode) paths",),
        source=_TF_INIT,
        example=_CB_LOG.format(ms="188") + "Using cuda graphs for (varlen, decode) paths: "
        "(False, False)",
        converters={"cuda_graph_varlen": _scalar, "cuda_graph_decode": _scalar},
    ),
    _sig(
        "transformers.async_batching",
        _K.ENGINE_CONFIG,
        _INFO,
        rf"choosing cb_config\.use_async_batching = (?P<use_async_batching>{_TF_BOOL}) because "
        rf"use_cuda_graphs = (?P<use_cuda_graphs>{_TF_BOOL}) and "
        rf"is_attn_mask_needed = (?P<is_attn_mask_needed>{_TF_BOOL})",
        literals=("choosing cb_config.use_async_batching",),
        source=_TF_INIT,
        example=_CB_LOG.format(ms="188") + "No behavior specified for use_async_batching, "
        "choosing cb_config.use_async_batching = False because use_cuda_graphs = False and "
        "is_attn_mask_needed = True. If you want to save memory, you can disable asynchronous "
        "batching but it will degrade performance.",
        converters=dict.fromkeys(
            ("use_async_batching", "use_cuda_graphs", "is_attn_mask_needed"), _scalar
        ),
    ),
    _sig(
        "transformers.no_flash_attention",
        _K.ENGINE_CONFIG,
        _INFO,
        r"Continuous batching is much better when using flash attention\. Consider using a flash",
        literals=("Continuous batching is much better when using flash attention",),
        source=Source(TRANSFORMERS, f"{_TF_CB}/continuous_api.py", _TF_VERSION),
        example=_CB_LOG.format(ms="187") + "Continuous batching is much better when using flash "
        "attention. Consider using a flash `attn_implementation` when loading the model.",
        extract=lambda _match: {"flash_attention": False},
    ),
    _sig(
        "transformers.no_continuous_batching",
        _K.CONTINUOUS_BATCHING_OFF,
        _WARNING,
        r"(?P<model_class>\w+) does not support continuous batching\. "
        r"Falling back to sequential generation\.",
        literals=("does not support continuous batching",),
        source=Source(TRANSFORMERS, "src/transformers/cli/serving/utils.py", _TF_VERSION),
        example="[transformers] GPT2LMHeadModel does not support continuous batching. Falling "
        "back to sequential generation.",
    ),
    _sig(
        "transformers.generation_failed",
        _K.ENGINE_ERROR,
        _ERROR,
        r"Generation thread terminated unexpectedly\.|Error in generation loop: "
        r"|Error during batch generation: |The background thread died with a fatal error\."
        r"|Failed to load (?P<model>\S+): ",
        literals=(
            "Generation thread terminated",
            "Error in generation loop",
            "Error during batch generation",
            "The background thread died",
            "Failed to load ",
        ),
        source=Source(
            TRANSFORMERS, f"{_TF_CB}/continuous_api.py, cli/serving/model_manager.py", _TF_VERSION
        ),
        example="2026-11-29 15:12:03,481 - ContinuousBatchingLogger - ERROR - Error in generation "
        "loop: CUDA error: an illegal memory access was encountered",
    ),
    _sig(
        "transformers.bad_attn_implementation",
        _K.BAD_ARGUMENT,
        _ERROR,
        r"Unsupported attention implementation: '(?P<detail>[^']*)'",
        literals=("Unsupported attention implementation",),
        source=Source(TRANSFORMERS, "src/transformers/cli/serving/model_manager.py", _TF_VERSION),
        example="ValueError: Unsupported attention implementation: 'paged|eager'. Must be one of "
        "{'flash_attention_2', 'flex_attention', 'eager', 'sdpa', 'flash_attention_3'} or a hub "
        "kernel (e.g. 'kernels-community/flash-attn2').",
    ),
    _sig(
        "transformers.typer_bad_option",
        _K.BAD_ARGUMENT,
        _ERROR,
        r"(?P<detail>No such option: \S+|Invalid value for '[^']+'|Missing option '[^']+')",
        literals=("No such option", "Invalid value for", "Missing option"),
        source=Source("fastapi/typer", "typer/rich_utils.py (click errors)", "typer 0.12-0.20"),
        example="│ No such option: --continous-batching (Possible options: "
        "--continuous-batching) │",
    ),
)

# --- servelab sim ----------------------------------------------------------------------------

_SIM: tuple[Signature, ...] = (
    _sig(
        "sim.serving_on",
        _K.ENGINE_READY,
        _INFO,
        r"^serving on (?P<url>https?://\S+)",
        literals=("serving on ",),
        source=Source(SERVELAB, "src/servelab/cli/sim.py", "0.1.0"),
        example="serving on http://127.0.0.1:41237",
    ),
    _sig(
        "sim.error",
        _K.ENGINE_ERROR,
        _ERROR,
        r"^(?:internal )?error: (?P<detail>.+)$",
        literals=("error: ",),
        source=Source(SERVELAB, "src/servelab/cli/exit_codes.py", "0.1.0"),
        example="error: unknown GPU 'h300' (known: a100-80g, b200, h100-sxm, h200, rtx-pro-6000)",
    ),
    _sig(
        "sim.typer_bad_option",
        _K.BAD_ARGUMENT,
        _ERROR,
        r"(?P<detail>No such option: \S+|Invalid value for '[^']+'|Missing option '[^']+')",
        literals=("No such option", "Invalid value for", "Missing option"),
        source=Source("fastapi/typer", "typer/rich_utils.py (click errors)", "typer 0.12-0.20"),
        example="│ No such option: --no-such-flag (Possible options: --no-usage)                │",
    ),
)

# --- shared by the GPU engines: torch, CUDA, NCCL, uvicorn ------------------------------------

_TORCH_ALLOCATOR = Source(TORCH, "c10/cuda/CUDACachingAllocator.cpp", "v2.4-v2.9")

_GPU_COMMON: tuple[Signature, ...] = (
    _sig(
        "torch.cuda_out_of_memory",
        _K.OUT_OF_MEMORY,
        _ERROR,
        r"(?P<device>CUDA|HIP) out of memory\."
        r"(?: Tried to allocate (?P<tried_gib>[\d.]+ [KMGT]?i?B))?",
        literals=("out of memory.",),
        source=_TORCH_ALLOCATOR,
        example="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
        "a total capacity of 79.19 GiB of which 1.23 GiB is free. Including non-PyTorch memory, "
        "this process has 77.95 GiB memory in use.",
        converters={"tried_gib": _gib},
        extract=_torch_oom,
    ),
    _sig(
        "cuda.error_out_of_memory",
        _K.OUT_OF_MEMORY,
        _ERROR,
        r"(?:CUDA|HIP) error: out of memory|CUBLAS_STATUS_ALLOC_FAILED",
        literals=("error: out of memory", "CUBLAS_STATUS_ALLOC_FAILED"),
        source=Source(TORCH, "c10/cuda/CUDAException.h (cudaErrorMemoryAllocation)", "v2.x"),
        example="RuntimeError: CUDA error: out of memory",
    ),
    _sig(
        "torch.nccl_error",
        _K.NCCL_ERROR,
        _ERROR,
        r"NCCL error in: (?P<location>[^,]+), (?P<detail>.+?)"
        r"(?:, NCCL version (?P<nccl_version>\S+))?\s*$",
        literals=("NCCL error in: ",),
        source=Source(TORCH, "torch/csrc/distributed/c10d/NCCLUtils.hpp (C10D_NCCL_CHECK)", "v2.x"),
        example="torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), "
        "NCCL version 2.21.5",
    ),
    _sig(
        "pynccl.nccl_error",
        _K.NCCL_ERROR,
        _ERROR,
        r"(?<=Error: )NCCL error: (?P<detail>.+?)\s*$",
        literals=("Error: NCCL error: ",),
        source=Source(
            SGLANG,
            "python/sglang/srt/distributed/device_communicators/pynccl_wrapper.py (and vLLM's)",
            "v0.5",
        ),
        example="RuntimeError: NCCL error: remote process exited or there was a network error",
    ),
    _sig(
        "nccl.result_code",
        _K.NCCL_ERROR,
        _ERROR,
        r"\b(?P<nccl_code>nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument"
        r"|InvalidUsage|RemoteError))\b(?::\s*(?P<detail>.+?))?\s*$",
        literals=("nccl",),
        source=Source(NCCL, "src/nccl.h.in (ncclResult_t)", "v2.18-v2.27"),
        example="ncclUnhandledCudaError: Call to CUDA function failed.",
        fallback=True,
    ),
    _sig(
        "torch.nccl_watchdog_timeout",
        _K.NCCL_ERROR,
        _ERROR,
        r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), "
        r"OpType=(?P<op_type>\w+).*?\) ran for (?P<ran_ms>\d+) milliseconds",
        literals=("Watchdog caught collective operation timeout",),
        source=Source(TORCH, "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp", "v2.x"),
        example="[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, "
        "NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000) ran for 600081 milliseconds "
        "before timing out.",
        converters={"seq": int, "ran_ms": int},
    ),
    _sig(
        "nccl.warn",
        _K.NCCL_WARNING,
        _WARNING,
        r"NCCL WARN (?P<detail>.+?)\s*$",
        literals=("NCCL WARN",),
        source=Source(NCCL, "src/debug.cc", "v2.18-v2.27"),
        example="[2026-02-27 15:27:13] tpgds-aihub0006:1180825:1180825 [4] os/linux.cc:200 NCCL "
        "WARN ncclOsSocketPollConnect: connect to 10.99.91.49<58525> returned Connection refused, "
        "exceeded error retry count after 35 attempts",
    ),
    # One event per transport: every channel of every rank pair prints its own line.
    _sig(
        "nccl.transport",
        _K.NCCL_TRANSPORT,
        _INFO,
        r"NCCL INFO (?:Channel|CollNet) \d+(?:/\d+)? : \d+.*? via \S",
        literals=("NCCL INFO Channel", "NCCL INFO CollNet"),
        source=Source(
            NCCL,
            "src/transport/p2p.cc (p2pSendSetup), shm.cc (shmSendSetup), net.cc (sendSetup, "
            "recvSetup), coll_net.cc; prefix src/debug.cc",
            "v2.18.3-v2.30.7",
        ),
        example="h200-node:41522:41601 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via "
        "P2P/CUMEM/read",
        extract=_nccl_connection,
        identity=("transport",),
    ),
    _sig(
        "torch.multinomial_invalid_probs",
        _K.NAN,
        _ERROR,
        r"probability tensor contains either `inf`, `nan` or element < 0",
        literals=("probability tensor contains",),
        source=Source(TORCH, "aten/src/ATen/native/Distributions.cpp", "v2.x"),
        example="RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
    ),
    _sig(
        "generic.nan",
        _K.NAN,
        _WARNING,
        rf"{_NAN_CONTEXT}.*?{_NAN_TOKEN}|{_NAN_TOKEN}.*?{_NAN_CONTEXT}",
        literals=("nan", "NaN", "NAN"),
        source=Source(SERVELAB, "src/servelab/engines/signature_data.py", "0.1.0"),
        example="WARNING 07-02 10:11:42 [sampler.py:88] logits contain NaN for request "
        "cmpl-7d1f, replacing with -inf",
        fallback=True,
    ),
)

_UVICORN_READY = _sig(
    "uvicorn.startup_complete",
    _K.ENGINE_READY,
    _INFO,
    r"Application startup complete\.",
    literals=("Application startup complete",),
    source=Source(UVICORN, "uvicorn/lifespan/on.py", "0.2x-0.3x"),
    example="INFO:     Application startup complete.",
)


_TRANSFORMERS_ALL = (*_TRANSFORMERS, _UVICORN_READY, *_GPU_COMMON)

SIGNATURES: Mapping[str, tuple[Signature, ...]] = MappingProxyType(
    {
        "sglang": (*_SGLANG, *_GPU_COMMON),
        "vllm": (*_VLLM, _UVICORN_READY, *_GPU_COMMON),
        "transformers": _TRANSFORMERS_ALL,
        "embedded": _TRANSFORMERS_ALL,
        "sim": _SIM,
    }
)
"""The signatures of each engine, by adapter name; `embedded` is transformers serve."""
