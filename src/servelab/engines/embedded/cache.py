"""The embedded engine's KV cache on the CPU, sized in tokens from the load it will serve.

transformers' continuous batching sizes its paged cache as a share of free memory
(`--cb-max-memory-percent`; on a CPU, of the NUMA node's MemTotal less the process's RSS),
after paying for `--cb-max-batch-tokens` (8,192 by default) and for attention masks of
batch tokens x (cache tokens + batch tokens) in the model's dtype. On a machine of a few
GiB nothing is left, the cache gets a negative size and the worker dies at the first
request. So on the CPU servelab never passes a share: it gives the cache in tokens
(`kv_cache_tokens`, as `--cb-num-blocks`) and bounds the batch tokens so the masks fit a
fixed budget. The numbers are transformers 5.24's (generation/continuous_batching/cache.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from servelab.core.errors import ConfigError
from servelab.engines.base import EngineSpec
from servelab.engines.embedded.presets import EmbeddedPreset
from servelab.engines.transformers_serve import CB_BLOCK_TOKENS, cb_num_blocks

__all__ = [
    "CACHE_HEADROOM",
    "DEFAULT_CPU_KV_CACHE_TOKENS",
    "EMBEDDED_CPU_MAX_CONCURRENCY",
    "ENGINE_DEFAULT_BATCH_TOKENS",
    "MASK_BUDGET_BYTES",
    "CpuCache",
    "LoadSizing",
    "cache_for",
    "cache_tokens_for_load",
    "cpu_cache_knobs",
    "refuse_memory_share",
    "size_for_load",
]

CACHE_HEADROOM = 1.25
"""Cache for the largest level's requests at full length, and a quarter more: the scheduler
stops admitting prefills when free blocks fall under its safety margin."""

DEFAULT_CPU_KV_CACHE_TOKENS = 32_768
"""The cache of an engine started with no workload in view (`servelab engine up`, and
`servelab engine check` given no load): 128 blocks, 64 MiB of the tiny preset's float32 KV
and 272 MiB of masks at 2,048 batch tokens."""

EMBEDDED_CPU_MAX_CONCURRENCY = 256
"""The auto sweep's cap for the embedded engine on the CPU when none is given: the cache is
sized for it before the engine starts, so it must be finite and fit a small machine."""

ENGINE_DEFAULT_BATCH_TOKENS = 8192
"""transformers' own `max_batch_tokens` when none is given."""

MASK_BUDGET_BYTES = 512 * 2**20
"""What the attention masks (batch tokens x readable tokens) may take: transformers checks
masks, cache and buffers against its share of the node's memory before it starts, and pages
of the masks are touched only as far as a step's real batch reaches."""

_MIN_BATCH_TOKENS = 64
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True, slots=True)
class LoadSizing:
    """A spec sized for a load, and the most concurrent requests its cache holds."""

    spec: EngineSpec
    max_concurrency: int
    source: str


@dataclass(frozen=True, slots=True)
class CpuCache:
    """A cache in tokens and the batch-token budget whose masks fit beside it."""

    tokens: int
    blocks: int
    batch_tokens: int
    mask_bytes: int
    kv_bytes: int

    def requests_held(self, input_len: int, output_len: int) -> int:
        """Requests of this size the cache holds at once (each takes whole blocks)."""
        return self.blocks // _blocks_per_request(input_len, output_len)


def cache_tokens_for_load(level: int, input_len: int, output_len: int) -> int:
    """Tokens for `level` requests of these lengths at once, in whole blocks, with headroom."""
    blocks = ceil(level * _blocks_per_request(input_len, output_len) * CACHE_HEADROOM)
    return blocks * CB_BLOCK_TOKENS


def cache_for(preset: EmbeddedPreset, tokens: int, batch_tokens: int | None = None) -> CpuCache:
    """The cache the engine builds for `tokens`, with `batch_tokens` or the largest power of
    two (at most the engine's default) whose masks fit MASK_BUDGET_BYTES."""
    blocks = cb_num_blocks(tokens)
    readable = blocks * CB_BLOCK_TOKENS
    dtype = _DTYPE_BYTES.get(preset.dtype, 4)
    if batch_tokens is None:
        batch_tokens = ENGINE_DEFAULT_BATCH_TOKENS
        while batch_tokens > _MIN_BATCH_TOKENS and (
            _mask_bytes(batch_tokens, readable, dtype) > MASK_BUDGET_BYTES
        ):
            batch_tokens //= 2
    kv_per_token = 2 * preset.num_hidden_layers * preset.num_key_value_heads * preset.head_dim
    return CpuCache(
        tokens=readable,
        blocks=blocks,
        batch_tokens=batch_tokens,
        mask_bytes=_mask_bytes(batch_tokens, readable, dtype),
        kv_bytes=readable * kv_per_token * dtype,
    )


def size_for_load(
    spec: EngineSpec,
    preset: EmbeddedPreset,
    *,
    concurrency: int | None,
    input_len: int,
    output_len: int,
) -> LoadSizing:
    """The cache for `concurrency` requests of these lengths (None: the CPU sweep's cap),
    unless the spec gives its own; the sweep then stops where that cache is full."""
    level = concurrency or EMBEDDED_CPU_MAX_CONCURRENCY
    own = spec.knobs.kv_cache_tokens
    sized = cpu_cache_knobs(spec, preset, cache_tokens_for_load(level, input_len, output_len))
    cache = cache_for(preset, sized.knobs.kv_cache_tokens or 0, sized.knobs.max_batch_tokens)
    held = cache.requests_held(input_len, output_len)
    length = f"{input_len + output_len}-token requests"
    if own is not None:
        source = f"the configured KV cache (kv_cache_tokens={own:,} holds {held:,} {length})"
    else:
        cap = "" if concurrency else f" (the embedded engine's CPU cap of {level})"
        source = f"the KV cache sized for {level:,} {length}{cap}"
    return LoadSizing(spec=sized, max_concurrency=max(1, min(level, held)), source=source)


def cpu_cache_knobs(spec: EngineSpec, preset: EmbeddedPreset, tokens: int | None) -> EngineSpec:
    """`spec` with kv_cache_tokens (the spec's, else `tokens`, else the default) and a
    max_batch_tokens whose masks fit beside it, unless the spec set one."""
    knobs = spec.knobs
    given = knobs.kv_cache_tokens or tokens or DEFAULT_CPU_KV_CACHE_TOKENS
    cache = cache_for(preset, given, knobs.max_batch_tokens)
    update = {"kv_cache_tokens": cache.tokens, "max_batch_tokens": cache.batch_tokens}
    return spec.model_copy(update={"knobs": knobs.model_copy(update=update)})


def refuse_memory_share(spec: EngineSpec) -> None:
    """A memory share for the CPU cache is one line of error, never a launch that dies later."""
    if spec.knobs.mem_fraction is None and "--cb-max-memory-percent" not in spec.extra_args:
        return
    raise ConfigError(
        "the embedded engine on the CPU takes no memory share (mem_fraction): transformers "
        "would size its cache from the NUMA node's free memory, which on a small machine "
        "leaves nothing",
        hint="size it in tokens: knobs: {kv_cache_tokens: N}",
    )


def _blocks_per_request(input_len: int, output_len: int) -> int:
    return max(1, ceil((input_len + output_len) / CB_BLOCK_TOKENS))


def _mask_bytes(batch_tokens: int, readable: int, dtype_bytes: int) -> int:
    return batch_tokens * (readable + batch_tokens) * dtype_bytes
