"""A trace's prompts: equal block ids are equal text, lengths are exact, and every dataset
says how much of each prompt repeats an earlier one (`shared_tokens`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from servelab.bench.endpoint import RequestItem
from servelab.bench.tokens import Calibration, LocalTokenizer
from servelab.bench.trace_prompts import trace_requests
from servelab.bench.traces import MOONCAKE_BLOCK_TOKENS, load_replay, read_trace
from servelab.bench.workload import SentPrompts, WorkloadSpec, build_requests, parse_dataset
from servelab.core.errors import ConfigError
from servelab.engines.embedded.tokenizer import train_tokenizer
from tests.traces import MOONCAKE, TRACES

BURSTGPT = TRACES / "burstgpt_1.csv"
BLOCK = MOONCAKE_BLOCK_TOKENS
SMALL_SHARED_BLOCKS = [0, 1, 0, 1, 1, 0, 2, 1, 1, 2, 0, 1, 0, 2, 3, 3, 2, 3, 4, 4]
"""Leading blocks each request of mooncake_small.jsonl shares with one before it."""


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded model's tokenizer (byte-level BPE trained on the bundled corpus)."""
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    train_tokenizer().save(str(path))
    return path


@pytest.fixture(scope="module")
def counter(tokenizer_path: Path) -> LocalTokenizer:
    return LocalTokenizer(tokenizer_path)


@pytest.fixture(scope="module")
def encode(tokenizer_path: Path):
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    return lambda text: tokenizer.encode(text, add_special_tokens=False).ids


def _mooncake(counter=None, calibration=None, *, count: int = 20, seed: int = 0, salt: int = 0):
    trace = read_trace(MOONCAKE)
    items = trace_requests(
        trace, count, seed=seed, salt=salt, counter=counter, calibration=calibration
    )
    return trace.requests, items


class WideWords:
    """A server-like counter: a word longer than five letters is two tokens."""

    method = "server"

    def count_batch(self, texts: list[str]) -> list[int]:
        return [sum(1 + (len(w) > 5) for w in t.split()) for t in texts]


def test_mooncake_prompts_have_the_traces_lengths_exactly(counter):
    requests, items = _mooncake(counter)
    assert [counter.count(i.prompt) for i in items] == [r.input_len for r in requests]
    assert [i.input_tokens for i in items] == [r.input_len for r in requests]
    assert [i.max_tokens for i in items] == [r.output_len for r in requests]


def test_equal_ids_are_equal_tokens_and_the_next_block_differs(encode, counter):
    requests, items = _mooncake(counter)
    tokens = [encode(i.prompt) for i in items]
    for b in range(len(items)):
        for a in range(b):
            ids_a, ids_b = requests[a].hash_ids, requests[b].hash_ids
            k = next(
                (i for i, (x, y) in enumerate(zip(ids_a, ids_b, strict=False)) if x != y), None
            )
            k = min(len(ids_a), len(ids_b)) if k is None else k
            head = min(k * BLOCK, len(tokens[a]), len(tokens[b]))
            assert tokens[a][:head] == tokens[b][:head], (a, b)
            if k < min(len(ids_a), len(ids_b)):  # a block of each, with different ids
                assert (
                    tokens[a][k * BLOCK : k * BLOCK + 16] != tokens[b][k * BLOCK : k * BLOCK + 16]
                )


def test_shared_tokens_are_the_leading_shared_blocks_and_really_repeat(encode, counter):
    requests, items = _mooncake(counter)
    expected = [
        min(b * BLOCK, r.input_len) for b, r in zip(SMALL_SHARED_BLOCKS, requests, strict=True)
    ]
    assert [i.shared_tokens for i in items] == expected
    tokens = [encode(i.prompt) for i in items]
    for b, item in enumerate(items):
        if item.shared_tokens:
            assert any(
                tokens[a][: item.shared_tokens] == tokens[b][: item.shared_tokens] for a in range(b)
            )


def test_without_a_counter_blocks_are_one_word_a_token_and_counts_unknown():
    requests, items = _mooncake()
    assert [len(i.prompt.split()) for i in items] == [r.input_len for r in requests]
    assert all(i.input_tokens is None for i in items)
    assert [i.shared_tokens for i in items] == [
        min(b * BLOCK, r.input_len) for b, r in zip(SMALL_SHARED_BLOCKS, requests, strict=True)
    ]
    # Text-level: a request sending a whole earlier prompt again sends the same text.
    assert items[16].prompt == items[4].prompt and items[19].prompt == items[11].prompt


def test_a_counter_whose_words_are_not_one_token_is_met_block_by_block():
    """Words are added or trimmed at each block's end; a block whose next word is two
    tokens can miss by one, and its count says so."""
    requests, items = _mooncake(WideWords())
    counted = WideWords().count_batch([i.prompt for i in items])
    assert [i.input_tokens for i in items] == counted
    misses = [abs(n - r.input_len) for n, r in zip(counted, requests, strict=True)]
    assert all(miss <= len(r.hash_ids) for miss, r in zip(misses, requests, strict=True))
    assert misses.count(0) >= len(requests) // 2


def test_a_calibration_estimates_each_block_within_a_token():
    calibration = Calibration(overhead_tokens=0.0, tokens_per_word=1.25)
    requests, items = _mooncake(calibration=calibration)
    for request, item in zip(requests, items, strict=True):
        assert item.input_tokens is not None
        assert abs(item.input_tokens - request.input_len) <= len(request.hash_ids)
        assert len(item.prompt.split()) == pytest.approx(request.input_len / 1.25, rel=0.01)


def test_the_salt_changes_every_block_and_the_seed_is_reproducible():
    _, measured = _mooncake()
    _, again = _mooncake()
    _, warmup = _mooncake(salt=10_000)
    _, other_seed = _mooncake(seed=1)
    assert [i.prompt for i in again] == [i.prompt for i in measured]
    for item, salted, seeded in zip(measured, warmup, other_seed, strict=True):
        heads = {" ".join(i.prompt.split()[:8]) for i in (item, salted, seeded)}
        assert len(heads) == 3


def test_more_requests_than_the_window_start_it_again_and_repeat_whole():
    requests, items = _mooncake(count=23)
    assert [i.prompt for i in items[20:]] == [i.prompt for i in items[:3]]
    assert [i.shared_tokens for i in items[20:]] == [r.input_len for r in requests[:3]]


def test_burstgpt_prompts_are_random_with_the_traces_lengths(counter):
    trace = read_trace(BURSTGPT)
    items = trace_requests(trace, 10, seed=0, salt=0, counter=counter, calibration=None)
    assert [counter.count(i.prompt) for i in items] == [r.input_len for r in trace.requests]
    assert [i.max_tokens for i in items] == [r.output_len for r in trace.requests]
    assert all(i.shared_tokens == 0 for i in items)
    assert len({i.prompt.split()[0] for i in items}) > 1


def _build(spec: WorkloadSpec, count: int, counter, *, salt: int = 0) -> list[RequestItem]:
    return build_requests(spec, count, counter=counter, calibration=None, salt=salt)


def test_random_prompts_share_their_prefix_after_the_first(counter, encode):
    items = _build(WorkloadSpec(input_len=64, output_len=4, shared_prefix_len=16), 5, counter)
    assert [i.shared_tokens for i in items] == [0, 16, 16, 16, 16]
    heads = {tuple(encode(i.prompt)[:16]) for i in items}
    assert len(heads) == 1
    # Each level draws its own prefix (the salt): its first prompt repeats nothing.
    other = _build(WorkloadSpec(input_len=64, shared_prefix_len=16), 2, counter, salt=1)
    assert tuple(encode(other[0].prompt)[:16]) not in heads


def test_random_prompts_without_a_prefix_share_nothing(counter):
    items = _build(WorkloadSpec(input_len=32, output_len=4), 4, counter)
    assert [i.shared_tokens for i in items] == [0, 0, 0, 0]


def test_fixed_prompt_is_shared_whole_after_the_first(counter):
    items = _build(WorkloadSpec(dataset="fixed"), 3, counter)
    n = counter.count(items[0].prompt)
    assert [i.shared_tokens for i in items] == [0, n, n]


def test_sharegpt_conversations_used_again_are_shared_whole(tmp_path, counter):
    conversations = [
        {"conversations": [{"value": f"question {i} " * 4}, {"value": "an answer " * 3}]}
        for i in range(2)
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(conversations), encoding="utf-8")
    items = _build(WorkloadSpec(dataset="sharegpt", path=path), 5, counter)
    shared = [i.shared_tokens for i in items]
    assert shared[:2] == [0, 0] and shared[2:] == [i.input_tokens for i in items[2:]]
    assert all(s > 0 for s in shared[2:])


def test_a_run_counts_prompts_sent_by_earlier_builds_as_shared():
    run = SentPrompts()
    warmup = run.mark([RequestItem("fixed prompt", 8, input_tokens=2)])
    measured = run.mark([RequestItem("fixed prompt", 8, input_tokens=2)] * 2)
    fresh = run.mark([RequestItem("new prompt", 8, input_tokens=2, shared_tokens=1)])
    assert [i.shared_tokens for i in warmup + measured + fresh] == [0, 2, 2, 1]


def test_a_trace_workload_builds_from_its_replay(counter):
    replay = load_replay(MOONCAKE, window=(1.0, 2.0))
    spec = WorkloadSpec(dataset="trace", path=MOONCAKE, replay=replay)
    items = _build(spec, len(replay.arrivals_ns), counter)
    assert [i.input_tokens for i in items] == [r.input_len for r in replay.trace.requests]
    # Within the window, request 1.004 s is the first to send block 0: nothing before it.
    assert [i.shared_tokens for i in items] == [0, 0, 512, 0, 512]
    assert spec.describe()["trace_requests"] == 5
    with pytest.raises(ConfigError, match="needs its replay"):
        _build(WorkloadSpec(dataset="trace", path=MOONCAKE), 1, counter)


def test_parse_dataset_takes_a_trace_file(tmp_path):
    assert parse_dataset(f"trace:{MOONCAKE}") == ("trace", MOONCAKE)
    with pytest.raises(ConfigError, match=r"trace file .* does not exist"):
        parse_dataset(f"trace:{tmp_path / 'absent.jsonl'}")
    with pytest.raises(ConfigError, match="trace needs a file"):
        parse_dataset("trace")
