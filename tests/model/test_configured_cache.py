"""The KV cache each engine sizes from its memory share, against arithmetic done by hand.

Each expectation is the engine's rule written out with the case's numbers (see
servelab.model.configured_cache for where each rule was read), not a second call.
"""

from __future__ import annotations

import math
import re

import pytest

from servelab.core.errors import ConfigError
from servelab.core.units import GIB, MIB
from servelab.model import deploy
from servelab.model.configured_cache import TransformersBuffers, configured_cache

KIB = 1024


def test_vllm_takes_its_share_of_total_memory_less_weights_and_the_reserve():
    # 0.5 x 80 GiB = 40 GiB for the instance; - 16 GiB weights - 2 GiB activations = 22 GiB
    # 22 GiB / 128 KiB per token = 22 x 8,192 tokens
    cache = configured_cache(
        "vllm",
        0.5,
        total_bytes=80 * GIB,
        in_use_bytes=4 * GIB,
        weights_bytes=16 * GIB,
        activation_reserve_bytes=2 * GIB,
        kv_bytes_per_token=128 * KIB,
    )
    assert cache.pool_bytes == 22 * GIB
    assert cache.capacity_tokens == 22 * 8192
    assert cache.rule.startswith("vLLM: 50% of the 80.0 GiB total, less 16.0 GiB of weights")
    assert "refuses" not in cache.rule  # 40 GiB asked, 76 GiB free


def test_vllm_does_not_start_when_its_share_of_total_is_not_free():
    # 0.5 x 80 = 40 GiB asked, 80 - 50 = 30 GiB free
    cache = configured_cache(
        "vllm",
        0.5,
        total_bytes=80 * GIB,
        in_use_bytes=50 * GIB,
        weights_bytes=16 * GIB,
        activation_reserve_bytes=2 * GIB,
        kv_bytes_per_token=128 * KIB,
    )
    assert "it refuses to start: only 30.0 GiB is free" in cache.rule


def test_sglang_takes_its_share_of_the_memory_free_before_the_weights():
    # free before the weights: 80 - 4 = 76 GiB; rest = (76 - 16) - 76 x (1 - 0.5) = 22 GiB;
    # the reserve lives in SGLang's 1 - share rest and is not taken again
    cache = configured_cache(
        "sglang",
        0.5,
        total_bytes=80 * GIB,
        in_use_bytes=4 * GIB,
        weights_bytes=16 * GIB,
        activation_reserve_bytes=2 * GIB,
        kv_bytes_per_token=128 * KIB,
    )
    assert cache.pool_bytes == 22 * GIB
    assert cache.capacity_tokens == 22 * 8192
    assert "76.0 GiB free before the weights" in cache.rule


def test_transformers_pays_the_masks_out_of_its_share_of_free_memory():
    # free after the weights: 110 - 10 = 100 GiB; 1% of it: 1 GiB (1,024 MiB)
    # a block of 256 tokens x 32 KiB = 8 MiB; two trash blocks: 16 MiB; 1,008 MiB left
    # 1,008 / 8 = 126 sectors; masks: 2 bytes x 8,192 x (126 x 256 + 8,192) = 662,700,032
    # each sector removed frees 8 MiB + 2 x 8,192 x 256 (4 MiB) of masks:
    # ceil(662,700,032 / 12,582,912) = 53 removed, 73 sectors of 256 tokens
    cache = configured_cache(
        "transformers",
        0.01,
        total_bytes=110 * GIB,
        weights_bytes=10 * GIB,
        activation_reserve_bytes=2 * GIB,
        kv_bytes_per_token=32 * KIB,
    )
    assert cache.pool_bytes == 1008 * MIB
    assert math.ceil(2 * 8192 * (126 * 256 + 8192) / (12 * MIB)) == 53
    assert cache.capacity_tokens == 73 * 256
    assert cache.rule == (
        "transformers: 1% of the 100.0 GiB free after the weights, less the masks of 8,192 "
        "batch tokens, in blocks of 256 tokens"
    )


def test_transformers_buffers_of_the_h200_reference_model():
    # h200-ref: hidden 2048, 16 heads, 4 KV heads of 128, vocabulary 2048, bf16, sdpa
    # the attention peak holds hidden + (16 queries + 2 x 4 new K/V + 36 read-back heads:
    # K and V repeated to 16 heads each, plus V) x 128, at 2 bytes: 2 x (2048 + 60 x 128)
    # inputs per token: 7 + 1 int32 rows, a write and a read index of int64: 48 bytes
    # per cache token: 36 heads x 128 x 2 bytes read back, plus an int64 index
    # logit rows: 1,024 requests x (2048 x 2 + 2048 x 4 fp32 logits) bytes
    buffers = TransformersBuffers.of(deploy("h200-ref").model)
    assert buffers.batch_token_bytes == 2 * (2048 + 60 * 128) + 48 == 19_504
    assert buffers.cache_token_bytes == 36 * 128 * 2 + 8 == 9_224
    assert buffers.fixed_bytes == 1024 * (2048 * 2 + 2048 * 4) == 12_582_912
    assert buffers.mask_entry_bytes == 2


def test_flash_attention_needs_no_masks_and_async_batching_doubles_the_inputs():
    # flash holds the 8 new and 8 read-back K/V heads only; two sets of inputs (2 x 48 bytes)
    # and, on the fast-decode path, a block table of 32 int32 per token (2 x 128)
    buffers = TransformersBuffers.of(
        deploy("h200-ref").model, flash_attention=True, async_batching=True
    )
    assert buffers.batch_token_bytes == 2 * (2048 + (16 + 8 + 8) * 128) + 2 * (48 + 128)
    assert buffers.cache_token_bytes == 8 * 128 * 2 + 2 * 8
    assert buffers.mask_entry_bytes == 0


def test_transformers_with_its_buffers_on_the_kept_h200_run():
    # benchmarks/gpu/results/h200-planted/kv: an H200 of 150,754,820,096 bytes, 644,939,776
    # in use before the engine, 5,186,400,256 bytes of weights, 32 KiB per token
    # free: 144,923,480,064; 0.4% of it: 579,693,920
    # less 2 x 8 MiB trash, 12,582,912 logit rows and 8,192 x 19,504 batch buffers:
    # 579,693,920 - 16,777,216 - 12,582,912 - 159,776,768 = 390,557,024
    # a sector: 8 MiB + 256 x 9,224 = 10,749,952 -> 36 sectors
    # masks: 2 x 8,192 x (36 x 256 + 8,192) = 285,212,672, each sector 4,194,304 of them
    # ceil(285,212,672 / (10,749,952 + 4,194,304)) = 20 removed: 16 sectors, 4,096 tokens
    buffers = TransformersBuffers.of(deploy("h200-ref").model)
    cache = configured_cache(
        "transformers",
        0.004,
        total_bytes=150_754_820_096,
        in_use_bytes=644_939_776,
        weights_bytes=5_186_400_256,
        activation_reserve_bytes=2 * GIB,
        kv_bytes_per_token=32 * KIB,
        buffers=buffers,
    )
    assert cache.pool_bytes == 390_557_024
    assert 390_557_024 // 10_749_952 == 36
    assert math.ceil(285_212_672 / (10_749_952 + 4_194_304)) == 20
    assert cache.capacity_tokens == 16 * 256
    assert "less the buffers and masks of 8,192 batch tokens" in cache.rule


def test_a_share_too_small_for_the_buffers_leaves_no_cache():
    cache = configured_cache(
        "transformers",
        0.0001,
        total_bytes=10 * GIB,
        weights_bytes=9 * GIB,
        activation_reserve_bytes=0,
        kv_bytes_per_token=32 * KIB,
    )
    assert cache.capacity_tokens == 0


@pytest.mark.parametrize(
    ("engine", "share", "message"),
    [
        ("vllm", 0.0, "a memory share must be in (0, 1]"),
        ("sglang", 1.5, "a memory share must be in (0, 1]"),
        ("sim", 0.5, "no memory-share rule for engine 'sim'"),
    ],
)
def test_bad_inputs_are_config_errors(engine: str, share: float, message: str):
    with pytest.raises(ConfigError, match=re.escape(message)):
        configured_cache(
            engine,
            share,
            total_bytes=80 * GIB,
            weights_bytes=GIB,
            activation_reserve_bytes=GIB,
            kv_bytes_per_token=KIB,
        )
