"""The prefix cache's data structure, and the batching engine using it, on a fake clock."""

from __future__ import annotations

import random

import pytest

from servelab.sim import Batcher, EngineRequest, LinearStepCost
from servelab.sim.blocks import RequestBlocks
from servelab.sim.parsing import OUTPUT_WORD, parse_generation
from servelab.sim.prefix_cache import PrefixCache, held_tokens

B = 4  # tokens per block


def _words(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def _blocks(units: list[str]) -> RequestBlocks:
    return RequestBlocks(units, OUTPUT_WORD, block_size=B)


def _cache(max_blocks: int = 1_000) -> PrefixCache:
    return PrefixCache(block_size=B, max_blocks=max_blocks)


def _run(cache: PrefixCache, units: list[str]) -> int:
    """One request through the cache (hit, its prompt cached, released); its hit in tokens."""
    blocks = _blocks(units)
    hit = cache.match(blocks, len(units))
    cache.pin(blocks, hit)
    cache.settle(blocks, len(units))
    cache.release(blocks)
    return B * len(hit)


def test_keys_match_only_on_a_shared_prefix_of_whole_blocks():
    shared = _words("s", 10)
    one, two = _blocks(shared + _words("a", 6)), _blocks(shared + _words("b", 6))
    assert [one.key(i) == two.key(i) for i in range(4)] == [True, True, False, False]
    # the same block of tokens after a different prefix is a different key
    assert _blocks(_words("x", 4) + shared).key(1) != _blocks(shared).key(0)


def test_output_tokens_continue_the_chain_as_the_output_word():
    answered = _blocks(_words("p", 6))  # blocks past the prompt hold output tokens
    repeated = _blocks([*_words("p", 6), *[OUTPUT_WORD] * 6])
    assert [answered.key(i) == repeated.key(i) for i in range(3)] == [True, True, True]


def test_a_hit_is_whole_blocks_and_never_the_last_prompt_token():
    cache = _cache()
    prompt = _words("w", 12)  # three full blocks
    assert _run(cache, prompt) == 0
    assert _run(cache, prompt) == 8  # the same 12 tokens: the last one is recomputed
    assert _run(cache, [*prompt, "more"]) == 12
    assert _run(cache, [*_words("w", 7), "other", *_words("z", 5)]) == 4


def test_a_request_pins_its_blocks_and_frees_them_last_block_first():
    cache = _cache()
    first = _blocks(_words("a", 8))
    cache.pin(first, cache.match(first, 8))
    assert cache.settle(first, 8) == 2
    assert (cache.blocks, cache.pinned_blocks) == (2, 2)
    second = _blocks([*_words("a", 8), "x"])
    hit = cache.match(second, 9)
    assert len(hit) == 2 and cache.free_among(hit) == 0
    cache.pin(second, hit)
    cache.release(first)
    assert cache.pinned_blocks == 2  # still used by the second
    cache.release(second)
    assert cache.pinned_blocks == 0
    cache.shrink_to(1)  # the prefix's tail goes first
    assert len(cache.match(_blocks([*_words("a", 8), "y"]), 9)) == 1
    assert cache.evicted_blocks == 1


def test_free_blocks_are_evicted_least_recently_freed_first():
    cache = _cache(max_blocks=4)
    for name in ("a", "b"):
        _run(cache, _words(name, 9))  # two blocks each, freed at once
    assert cache.blocks == 4
    assert _run(cache, _words("a", 9)) == 8  # a hit on a's blocks frees them again, last
    _run(cache, _words("c", 9))  # two more blocks evict the two least recently freed: b's
    assert cache.blocks == 4 and cache.evicted_blocks == 2
    assert _run(cache, _words("b", 9)) == 0
    assert _run(cache, _words("c", 9)) == 8


def test_pinned_blocks_are_never_evicted_and_a_copy_already_cached_is_not_added():
    cache = _cache(max_blocks=1)
    running = _blocks(_words("r", 8))
    cache.pin(running, [])
    assert cache.settle(running, 8) == 2
    cache.shrink_to(0)
    assert cache.blocks == 2  # over the bound, but both are in use
    late = _blocks(_words("r", 8))  # looked up before the first cached its blocks
    cache.pin(late, [])
    assert cache.settle(late, 8) == 0 and late.pinned == []
    cache.release(running)
    assert cache.blocks == 1


def test_held_tokens_count_a_shared_block_once():
    cache = _cache()
    first, second = _blocks(_words("a", 9)), _blocks(_words("a", 9))
    cache.pin(first, [])
    cache.settle(first, 9)  # 2 blocks, the 9th token its own
    cache.pin(second, cache.match(second, 9))
    assert held_tokens(cache, [(9, first), (9, second)]) == 8 + 1 + 1
    assert held_tokens(None, [(9, None), (9, None)]) == 18


def test_parsed_units_are_the_words_or_the_ids():
    words = parse_generation({"prompt": "a b  c", "max_tokens": 1}, chat=False, reject_fields=())
    assert list(words.prompt_units) == ["a", "b", "c"] and words.output_unit == OUTPUT_WORD
    ids = parse_generation({"prompt": [5, 6], "max_tokens": 1}, chat=False, reject_fields=())
    assert list(ids.prompt_units) == [5, 6] and isinstance(ids.output_unit, int)


COST = LinearStepCost(base_ms=10.0, per_seq_ms=0.5, per_prefill_token_ms=0.1)


def _batcher(capacity: int | None = None, **overrides) -> Batcher[int]:
    cache = PrefixCache(block_size=B, max_blocks=(capacity or 10_000) // B)
    settings = {"step_cost": COST, "chunked_prefill_size": 64, "prefix_cache": cache}
    return Batcher(**(settings | {"kv_capacity_tokens": capacity} | overrides))


def _request(units: list[str], output: int, owner: int) -> EngineRequest[int]:
    return EngineRequest(len(units), output, owner, blocks=_blocks(units))


def _drain(batcher: Batcher[int]) -> list[float]:
    """Run until idle; the duration of every step."""
    durations = []
    while (step := batcher.plan()) is not None:
        durations.append(step.duration_s)
        batcher.complete(step)
    return durations


def test_a_hit_starts_prefilled_and_its_step_charges_only_the_rest():
    batcher = _batcher()
    prefix = _words("s", 30)
    batcher.submit(_request([*prefix, *_words("a", 10)], 2, 0))
    first = _drain(batcher)[0]
    assert first == pytest.approx((10 + 0.1 * 40) / 1000)
    second = _request([*prefix, *_words("b", 10)], 2, 1)
    batcher.submit(second)
    step = batcher.plan()
    assert step is not None and step.admitted == [second]
    assert second.cached_tokens == second.prefilled == 28  # 7 whole blocks of the 30
    assert step.prefill_tokens == 12
    assert step.duration_s == pytest.approx((10 + 0.1 * 12) / 1000)


def test_a_request_admitted_later_in_a_step_hits_what_an_earlier_one_prefills():
    batcher = _batcher()
    prefix = _words("s", 16)
    first, second = (_request([*prefix, name], 1, i) for i, name in enumerate("ab"))
    batcher.submit(first)
    batcher.submit(second)
    step = batcher.plan()
    assert step is not None and step.admitted == [first, second]
    assert (first.cached_tokens, second.cached_tokens) == (0, 16)
    assert step.prefill_tokens == 17 + 1


def test_capacity_counts_shared_blocks_once_and_evicts_free_ones_for_room():
    rng = random.Random(3)
    prefixes = [_words(f"p{k}-", 24) for k in range(4)]
    batcher = _batcher(capacity=200, max_running=4)
    cache = batcher.prefix_cache
    assert cache is not None
    arrivals = []
    for owner in range(60):
        prompt = [*rng.choice(prefixes), *_words(f"u{owner}-", rng.randint(0, 9))]
        arrivals.append(_request(prompt, rng.randint(1, 12), owner))
    hits = 0
    while arrivals or batcher.running or batcher.waiting:
        for _ in range(rng.randint(0, 2)):
            if arrivals:
                batcher.submit(arrivals.pop(0))
        step = batcher.plan()
        if step is None:
            continue
        hits += sum(r.cached_tokens for r in step.admitted)
        assert batcher.kv_reserved_tokens + B * cache.blocks <= 200
        own = sum(r.reserved_tokens - B * len(r.blocks.pinned) for r in batcher.running)
        assert batcher.kv_reserved_tokens == own
        assert batcher.kv_used_tokens <= 200
        batcher.complete(step)
    assert hits > 0 and cache.evicted_blocks > 0
    assert (batcher.kv_reserved_tokens, cache.pinned_blocks, batcher.kv_used_tokens) == (0, 0, 0)


def test_without_room_for_its_own_tokens_a_hit_still_waits():
    batcher = _batcher(capacity=40)
    prefix = _words("s", 16)
    running = _request([*prefix, "a"], 20, 0)  # 37 tokens reserved, 16 of them cached
    batcher.submit(running)
    batcher.complete(batcher.plan())
    blocked = _request([*prefix, "b"], 20, 1)  # would need 21 of its own beside them
    batcher.submit(blocked)
    step = batcher.plan()
    assert step is not None and step.admitted == []
    _drain(batcher)
    assert blocked.cached_tokens == 16
