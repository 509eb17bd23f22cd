"""The KV cache an engine sizes from its configured memory share, by that engine's own rule.

`perf.kv_capacity` applies one rule to every engine (memory x mem_fraction - weights -
activation reserve). The three engines servelab launches each read their share
differently, and a share set far from the default (0.4% of free memory, say) makes the
difference decisive. Read in each engine's source (no code copied):

- vLLM `gpu_memory_utilization` (vllm-project/vllm `vllm/v1/worker/gpu_worker.py`
  `Worker.determine_available_memory`, `vllm/v1/worker/utils.py` `request_memory`,
  `vllm/utils/mem_utils.py` `memory_profiling`; vLLM 0.32): a share of the GPU's TOTAL
  memory for the whole instance. The pool is total x util - the memory the instance took
  from its start to the end of its profiling run (weights, non-torch memory such as NCCL)
  - the transient activation peak - the CUDA-graph estimate. Memory other processes held
  before it started is not subtracted; vLLM refuses to start when less than total x util
  is free.
- SGLang `mem_fraction_static` (sgl-project/sglang
  `python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py`
  `ModelRunnerKVCacheMixin.profile_max_num_token`, with `ModelRunner.init_torch_distributed`
  for its argument): the memory free after the weights are loaded minus
  free-before-the-weights x (1 - mem_fraction_static), so the pool is
  free-before x share - weights; the (1 - share) rest is where activations and CUDA
  graphs live, so servelab's activation reserve is not taken again.
- transformers serve `--cb-max-memory-percent` (huggingface/transformers 5.24
  `src/transformers/generation/continuous_batching/cache.py`
  `PagedAttentionMemoryHandler.get_available_memory` and
  `infer_max_batch_tokens_and_num_sectors`, `PagedAttentionCache.__init__`; its
  `initialization.py` `decide_use_async_batching`): a share of the memory FREE after the
  weights (torch's `mem_get_info`). Out of it come, first, two never-used "trash" sectors,
  the logit rows of the requests of one batch, and the per-batch-token buffers of
  `max_batch_tokens` (8,192 by default: activations at the attention peak and the input
  tensors); the rest is divided into sectors, each costing its cache plus the K and V it
  reads back at the attention peak; then as many sectors are removed as pay for the
  attention masks (`max_batch_tokens` x (cache tokens + `max_batch_tokens`) elements each,
  none with a flash attention implementation; two sets with asynchronous batching).

Every figure is per GPU, for one replica; the result is in whole blocks where the engine
allocates whole blocks (transformers' sectors; for a model of full-attention layers only a
sector is one block of 256 tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servelab.core.errors import ConfigError
from servelab.core.units import GIB
from servelab.model.configs import ModelConfig

__all__ = [
    "SHARE_ENGINES",
    "TRANSFORMERS_BATCH_TOKENS",
    "TRANSFORMERS_BLOCK_TOKENS",
    "ConfiguredCache",
    "TransformersBuffers",
    "configured_cache",
]

TRANSFORMERS_BATCH_TOKENS = 8192
"""transformers 5.24's `max_batch_tokens` when none is given (`_default_max_batch_tokens`)."""
TRANSFORMERS_BLOCK_TOKENS = 256
"""transformers 5.24's default `page_size`: tokens per cache block."""
TRANSFORMERS_LOGIT_ROWS = 1024
"""The requests of one batch whose logit rows transformers reserves when the model slices
its hidden states (`max_requests_per_batch`'s fallback)."""
TRANSFORMERS_FAST_DECODE_BLOCKS = 32
"""Blocks per request in the block table of the flash fast-decode path
(`max_blocks_per_request`'s fallback); the path, and the table, exist only with flash."""
SHARE_ENGINES = ("vllm", "sglang", "transformers")
"""The engines whose share rule is known."""

_INT32_BYTES = 4
_INT64_BYTES = 8
_FP32_BYTES = 4
_BULK_INPUT_ROWS = 7
"""transformers packs its per-token inputs as 7 int32 rows."""


@dataclass(frozen=True)
class ConfiguredCache:
    """The KV cache one GPU holds at a configured share, and the rule that sized it."""

    engine: str
    share: float
    pool_bytes: float
    """The memory the rule leaves the cache (transformers: before its masks are paid)."""
    capacity_tokens: int
    rule: str
    """One line: the rule with this run's numbers."""


@dataclass(frozen=True)
class TransformersBuffers:
    """What transformers' memory handler pays out of its share besides the cache.

    The defaults are the masks alone (an sdpa or eager attention, bf16, 8,192 batch
    tokens); `of` adds the per-token buffers a model config implies.
    """

    batch_tokens: int = TRANSFORMERS_BATCH_TOKENS
    batch_token_bytes: float = 0.0
    """Activations at the larger of the attention and LM-head peaks, plus input tensors."""
    cache_token_bytes: float = 0.0
    """Per readable cache token: the K and V read back at the attention peak, its index."""
    fixed_bytes: float = 0.0
    """Reserved once besides the two trash sectors: the logit rows of one batch."""
    mask_entry_bytes: float = 2.0
    """Bytes per attention-mask element over all mask copies (0 with flash attention)."""
    block_tokens: int = TRANSFORMERS_BLOCK_TOKENS

    @classmethod
    def of(
        cls,
        config: ModelConfig,
        *,
        batch_tokens: int = TRANSFORMERS_BATCH_TOKENS,
        flash_attention: bool = False,
        async_batching: bool = False,
        activation_bytes: float = 2.0,
        logits_to_keep: bool = True,
    ) -> TransformersBuffers:
        """The buffers of a full-attention model on one GPU. Eager and sdpa attention
        repeat the KV heads to every query head while V is still held; flash reads GQA
        heads as they are and needs no mask. Asynchronous batching doubles the input
        tensors and the masks. `logits_to_keep` (most causal LMs): the LM-head peak is a
        fixed reservation of one batch's logit rows, not a per-token cost."""
        heads_at_peak = (
            2 * config.kv_heads if flash_attention else 2 * config.heads + config.kv_heads
        )
        io = 2 if async_batching else 1
        lm_head_row = config.hidden * activation_bytes + config.vocab * _FP32_BYTES
        # hidden states, the query, the new K and V, and the K and V read back
        attention_peak = activation_bytes * (
            config.hidden + (config.heads + 2 * config.kv_heads + heads_at_peak) * config.head_dim
        )
        # packed inputs, output ids, write and read indices, and the fast-decode block table
        block_table = TRANSFORMERS_FAST_DECODE_BLOCKS * _INT32_BYTES if flash_attention else 0
        inputs = io * (
            _BULK_INPUT_ROWS * _INT32_BYTES + _INT32_BYTES + 2 * _INT64_BYTES + block_table
        )
        return cls(
            batch_tokens=batch_tokens,
            batch_token_bytes=max(0.0 if logits_to_keep else lm_head_row, attention_peak) + inputs,
            cache_token_bytes=heads_at_peak * config.head_dim * activation_bytes
            + io * _INT64_BYTES,
            fixed_bytes=TRANSFORMERS_LOGIT_ROWS * lm_head_row if logits_to_keep else 0.0,
            mask_entry_bytes=0.0 if flash_attention else io * activation_bytes,
        )


def configured_cache(
    engine: str,
    share: float,
    *,
    total_bytes: float,
    weights_bytes: float,
    activation_reserve_bytes: float,
    kv_bytes_per_token: float,
    in_use_bytes: float = 0.0,
    buffers: TransformersBuffers | None = None,
) -> ConfiguredCache:
    """The cache one GPU holds when `engine` is given `share` of its memory.

    `total_bytes` is the GPU's memory, `in_use_bytes` what other processes held before
    the engine started (0 when unknown), `weights_bytes` and `kv_bytes_per_token` this
    GPU's share of the weights and of one token's cache, `activation_reserve_bytes` the
    model's allowance for activations, CUDA graphs and NCCL (vLLM only: SGLang keeps
    them in its 1 - share rest, transformers outside its share). `buffers` are
    transformers' (the masks alone if not given). A ConfigError for another engine or a
    share outside (0, 1].
    """
    if not 0 < share <= 1:
        raise ConfigError(f"a memory share must be in (0, 1], got {share:g}")
    if kv_bytes_per_token <= 0:
        raise ConfigError(f"KV bytes per token must be positive, got {kv_bytes_per_token:g}")
    if engine == "vllm":
        return _vllm(
            share,
            total_bytes,
            in_use_bytes,
            weights_bytes,
            activation_reserve_bytes,
            kv_bytes_per_token,
        )
    if engine == "sglang":
        return _sglang(share, total_bytes - in_use_bytes, weights_bytes, kv_bytes_per_token)
    if engine == "transformers":
        free = total_bytes - in_use_bytes - weights_bytes
        return _transformers(share, free, kv_bytes_per_token, buffers or TransformersBuffers())
    raise ConfigError(
        f"no memory-share rule for engine {engine!r}", hint=f"one of {', '.join(SHARE_ENGINES)}"
    )


def _vllm(
    share: float, total: float, in_use: float, weights: float, reserve: float, kv: float
) -> ConfiguredCache:
    pool = share * total - weights - reserve
    rule = (
        f"vLLM: {_pct(share)} of the {_gib(total)} total, less {_gib(weights)} of weights and "
        f"{_gib(reserve)} of activations, graphs and NCCL"
    )
    if share * total > total - in_use:
        rule += f" (it refuses to start: only {_gib(total - in_use)} is free)"
    return ConfiguredCache("vllm", share, pool, _tokens(pool, kv), rule)


def _sglang(share: float, free_before: float, weights: float, kv: float) -> ConfiguredCache:
    pool = share * free_before - weights
    rule = (
        f"SGLang: {_pct(share)} of the {_gib(free_before)} free before the weights, less "
        f"{_gib(weights)} of weights (the rest holds activations and graphs)"
    )
    return ConfiguredCache("sglang", share, pool, _tokens(pool, kv), rule)


def _transformers(
    share: float, free: float, kv: float, buffers: TransformersBuffers
) -> ConfiguredCache:
    """Sectors of one block each (full attention only); sliding-window layers make a
    sector hold more, so the count is then a lower bound."""
    block = buffers.block_tokens
    sector = block * kv
    per_sector = sector + block * buffers.cache_token_bytes
    batch = buffers.batch_tokens
    available = math.floor(share * free)
    pool = available - 2 * sector - buffers.fixed_bytes - batch * buffers.batch_token_bytes
    sectors = math.floor(pool / per_sector) if pool > 0 else 0
    mask_per_sector = buffers.mask_entry_bytes * batch * block
    masks = buffers.mask_entry_bytes * batch * (sectors * block + batch)
    sectors -= math.ceil(masks / (per_sector + mask_per_sector))
    spent = "buffers and masks" if buffers.batch_token_bytes else "masks"
    rule = (
        f"transformers: {_pct(share)} of the {_gib(free)} free after the weights, less the "
        f"{spent} of {batch:,} batch tokens, in blocks of {block} tokens"
    )
    return ConfiguredCache("transformers", share, pool, max(sectors, 0) * block, rule)


def _tokens(pool: float, kv: float) -> int:
    return max(math.floor(pool / kv), 0)


def _pct(share: float) -> str:
    return f"{100 * share:.3g}%"


def _gib(nbytes: float) -> str:
    return f"{nbytes / GIB:,.1f} GiB"
