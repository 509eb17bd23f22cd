"""The ideal prefix-cache hit rate of a level, and the block size it is counted in."""

from __future__ import annotations

import pytest

from servelab.bench.prefix import block_tokens_from, prefix_cache_level, shareable_tokens
from servelab.bench.records import RequestRecord
from servelab.telemetry.summary import EngineLevel


def _record(index: int, prompt: int, shared: int, *, warmup: bool = False) -> RequestRecord:
    return RequestRecord(
        index=index,
        level=0,
        warmup=warmup,
        worker=0,
        t_send_ns=0,
        t_scheduled_ns=0,
        t_end_ns=1,
        ok=True,
        max_tokens=8,
        prompt_tokens=prompt,
        shared_tokens=shared,
    )


@pytest.mark.parametrize(
    ("shared", "prompt", "block", "hit"),
    [
        (300, 512, 16, 288),  # 18 whole blocks of 16
        (300, 512, 128, 256),
        (100, 512, 128, 0),  # less than one block
        (512, 512, 16, 496),  # a whole repeated prompt: its last token is computed
        (512, 512, 1, 511),
        (0, 512, 1, 0),
    ],
)
def test_shareable_tokens_are_whole_blocks_short_of_the_last_token(
    shared: int, prompt: int, block: int, hit: int
):
    assert shareable_tokens(shared, prompt, block) == hit


def test_the_ideal_counts_measured_requests_and_repeats_of_the_pool():
    records = [
        _record(0, 512, 0, warmup=True),  # warm-up: not in the level
        _record(0, 512, 0),
        _record(1, 512, 256),
        _record(2, 512, 256),
        _record(3, 512, 0),  # index 3 of a pool of 3: prompt 0 again, all but its last block
    ]
    engine = EngineLevel(
        available=True, engine="vllm", prefix_cache_queries=2048.0, prefix_cache_hits=640.0
    )
    level = prefix_cache_level(records, engine, 128, "test", pool=3)
    assert level is not None
    assert level.prompt_tokens == 4 * 512
    assert level.shareable_tokens == 256 + 256 + 384
    assert level.ideal_hit_rate == pytest.approx(896 / 2048)
    assert level.hit_rate == pytest.approx(640 / 2048)
    assert level.engine == "vllm"


def test_without_engine_counters_the_ideal_stands_alone():
    level = prefix_cache_level([_record(0, 64, 0), _record(1, 64, 32)], None, 16, "test")
    assert level is not None and level.ideal_hit_rate == pytest.approx(32 / 128)
    assert level.hit_rate is None and level.engine is None
    assert prefix_cache_level([_record(0, 64, 0, warmup=True)], None, 16, "t") is None


def test_the_block_size_comes_from_the_command_then_the_engine_then_its_default():
    assert block_tokens_from("vllm", ["vllm", "serve", "--block-size", "32"], 128) == (
        32,
        "engine command: --block-size 32",
    )
    assert block_tokens_from("sglang", ["--page-size=64"]) == (64, "engine command: --page-size 64")
    assert block_tokens_from("vllm", ["vllm", "serve"], 128) == (128, "the engine's own report")
    assert block_tokens_from("vllm", None) == (16, "vllm's default")
    assert block_tokens_from("vllm", None, cpu=True)[0] == 128
    assert block_tokens_from("sglang", None)[0] == 1
    block, source = block_tokens_from(None, None)
    assert block == 1 and "unknown" in source


def test_an_engine_that_counts_no_query_hit_nothing():
    """vLLM with its prefix cache off counts no query at all: its rate is 0, not unknown."""
    engine = EngineLevel(
        available=True, engine="vllm", prefix_cache_queries=0.0, prefix_cache_hits=0.0
    )
    level = prefix_cache_level([_record(0, 64, 0), _record(1, 64, 48)], engine, 16, "t")
    assert level is not None and level.hit_rate == 0.0 and level.ideal_hit_rate == 0.375
