"""The embedded engine's CPU cache: sized in tokens from the load, never from memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.bench.load import LoadMode
from servelab.bench.session import BenchConfig
from servelab.bench.sweep import SweepPlan
from servelab.bench.trial import sized_for_load
from servelab.bench.workload import WorkloadSpec
from servelab.core.errors import ConfigError
from servelab.engines.base import EngineSpec
from servelab.engines.embedded import EmbeddedAdapter, get_preset
from servelab.engines.embedded.cache import (
    EMBEDDED_CPU_MAX_CONCURRENCY,
    MASK_BUDGET_BYTES,
    cache_for,
    cache_tokens_for_load,
)

TINY = get_preset("tiny")


def test_a_request_takes_whole_blocks_and_the_cache_has_a_quarter_more() -> None:
    # 128 + 64 tokens fit one 256-token block: 32 requests need 32 blocks, x1.25 = 40
    assert cache_tokens_for_load(32, 128, 64) == 40 * 256
    # 300 + 100 tokens need two blocks each
    assert cache_tokens_for_load(10, 300, 100) == 25 * 256
    assert cache_for(TINY, cache_tokens_for_load(32, 128, 64)).requests_held(128, 64) == 40


def test_batch_tokens_shrink_by_halves_until_the_masks_fit() -> None:
    small = cache_for(TINY, 4096)
    assert small.batch_tokens == 8192  # the engine's own default already fits
    big = cache_for(TINY, cache_tokens_for_load(256, 128, 64))
    assert (
        big.mask_bytes
        <= MASK_BUDGET_BYTES
        < cache_for(TINY, big.tokens, 2 * big.batch_tokens).mask_bytes
    )
    # float32 KV of 2 layers x 2 KV heads x 64 dims, K and V: 2,048 bytes a token
    assert big.kv_bytes == big.tokens * 2048
    assert cache_for(TINY, 4096, batch_tokens=100).batch_tokens == 100  # the spec's own wins


def _config(**given) -> BenchConfig:
    workload = WorkloadSpec(dataset="random", input_len=128, output_len=64)
    return BenchConfig(url="", workload=workload, **given)


def test_a_fixed_sweep_sizes_the_cache_for_its_largest_level() -> None:
    spec, config = sized_for_load(
        EngineSpec(engine="embedded"), _config(sweep=SweepPlan(fixed=(1, 8, 4)))
    )
    assert spec.knobs.kv_cache_tokens == cache_tokens_for_load(8, 128, 64)
    assert config.sweep is not None and config.sweep.fixed == (1, 8, 4)


def test_the_auto_sweep_is_capped_where_the_cache_is_full() -> None:
    spec, config = sized_for_load(EngineSpec(engine="embedded"), _config(sweep=SweepPlan()))
    assert config.sweep is not None
    assert config.sweep.max_concurrency == EMBEDDED_CPU_MAX_CONCURRENCY
    assert "CPU cap" in config.sweep.max_source
    assert spec.knobs.kv_cache_tokens == cache_tokens_for_load(256, 128, 64)

    capped = SweepPlan(max_concurrency=16, max_source="--max-concurrency")
    spec, config = sized_for_load(EngineSpec(engine="embedded"), _config(sweep=capped))
    assert spec.knobs.kv_cache_tokens == cache_tokens_for_load(16, 128, 64)
    assert config.sweep is not None and config.sweep.max_concurrency == 16


def test_a_cache_the_spec_sets_bounds_the_auto_sweep() -> None:
    own = EngineSpec(engine="embedded", knobs={"kv_cache_tokens": 10 * 256})
    spec, config = sized_for_load(own, _config(sweep=SweepPlan()))
    assert spec.knobs.kv_cache_tokens == 2560
    assert config.sweep is not None and config.sweep.max_concurrency == 10
    assert "kv_cache_tokens=2,560 holds 10" in config.sweep.max_source


def test_open_loop_and_file_workloads_keep_the_default_cache() -> None:
    rate = _config(mode=LoadMode.REQUEST_RATE, levels=[4.0])
    spec, _ = sized_for_load(EngineSpec(engine="embedded"), rate)
    assert spec.knobs.kv_cache_tokens == cache_tokens_for_load(256, 128, 64)
    sharegpt = BenchConfig(url="", workload=WorkloadSpec(dataset="sharegpt", path=Path("x")))
    spec, _ = sized_for_load(EngineSpec(engine="embedded"), sharegpt)
    assert spec.knobs.kv_cache_tokens is None  # prepare() gives the fixed default


def test_gpu_and_other_engines_are_left_to_size_their_own() -> None:
    gpu = EngineSpec(engine="embedded", model="h200-ref")
    assert sized_for_load(gpu, _config(sweep=SweepPlan()))[0] == gpu
    sim = EngineSpec(engine="sim")
    assert sized_for_load(sim, _config(sweep=SweepPlan()))[0] == sim


def test_sizing_refuses_a_cpu_memory_share() -> None:
    with pytest.raises(ConfigError, match="no memory share"):
        EmbeddedAdapter().size_for_load(
            EngineSpec(engine="embedded", knobs={"mem_fraction": 0.1}),
            concurrency=4,
            input_len=8,
            output_len=8,
        )
