"""The requests of a trace replay: prompts of the trace's lengths, equal where its blocks are.

Mooncake: every block id is written once, as words drawn from a generator seeded by
(seed, salt, id): 512 tokens, or for a prompt's last block the rest of its length, as the
first words of the same text. A prompt is its blocks joined by spaces, so equal ids are
equal text and the prefixes the trace shares are real: an engine's prefix cache can hit
them. With a token counter each block is counted where it stands (after a space, unless
it opens the prompt) and lengthened or shortened until the count agrees; the prompt then
has the trace's input length whenever the tokenizer splits at spaces (byte-level BPE, the
simulator). BurstGPT has no ids: random prompts of its lengths. Output lengths are the
trace's, as max_tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servelab.bench.endpoint import RequestItem
from servelab.bench.prompts import FIX_ROUNDS, PromptBuilder, WordPool, word_pool
from servelab.bench.tokens import Calibration, TokenCounter
from servelab.bench.traces import MOONCAKE_BLOCK_TOKENS, Trace, TraceRequest, shared_block_prefix

__all__ = ["trace_requests"]

_SEED_MASK = (1 << 64) - 1
"""Seeds must be non-negative: a block id is taken modulo 2**64."""


def trace_requests(
    trace: Trace,
    count: int,
    *,
    seed: int,
    salt: int,
    counter: TokenCounter | None,
    calibration: Calibration | None,
) -> list[RequestItem]:
    """The window's first `count` requests (again from its start when it has fewer).

    `salt` changes every word, so a warm-up built with another salt shares no text with
    the measured requests and primes no prefix cache for them.
    """
    requests = [trace.requests[i % len(trace.requests)] for i in range(count)]
    pool = word_pool(counter)
    if trace.format == "mooncake":
        writer = _BlockWriter(pool, seed=seed, salt=salt, counter=counter, calibration=calibration)
        return _mooncake(requests, writer)
    builder = PromptBuilder(pool, np.random.default_rng([seed, salt]), counter, calibration)
    prompts = builder.exact([r.input_len for r in requests])
    return [
        RequestItem(prompt=text, max_tokens=r.output_len, input_tokens=tokens)
        for (text, tokens), r in zip(prompts, requests, strict=True)
    ]


@dataclass(frozen=True, slots=True)
class _Block:
    hash_id: int
    tokens: int
    opens: bool
    """The block opens its prompt: no space before it, an opener word first."""


def _blocks(request: TraceRequest) -> list[_Block]:
    """Every block holds 512 tokens but the last, which holds the rest of the prompt."""
    whole = len(request.hash_ids) - 1
    sizes = [MOONCAKE_BLOCK_TOKENS] * whole + [request.input_len - MOONCAKE_BLOCK_TOKENS * whole]
    return [
        _Block(hash_id, tokens, opens=i == 0)
        for i, (hash_id, tokens) in enumerate(zip(request.hash_ids, sizes, strict=True))
    ]


def _mooncake(requests: list[TraceRequest], writer: _BlockWriter) -> list[RequestItem]:
    layouts = [_blocks(r) for r in requests]
    texts = writer.write(list(dict.fromkeys(b for blocks in layouts for b in blocks)))
    items = []
    for request, blocks, shared in zip(
        requests, layouts, shared_block_prefix(requests), strict=True
    ):
        counts = [texts[b][1] for b in blocks]
        items.append(
            RequestItem(
                prompt=" ".join(texts[b][0] for b in blocks),
                max_tokens=request.output_len,
                input_tokens=None if None in counts else sum(c or 0 for c in counts),
                shared_tokens=min(shared * MOONCAKE_BLOCK_TOKENS, request.input_len),
            )
        )
    return items


class _BlockWriter:
    """The text of each block: the first words of its id's own word stream."""

    def __init__(
        self,
        pool: WordPool,
        *,
        seed: int,
        salt: int,
        counter: TokenCounter | None,
        calibration: Calibration | None,
    ) -> None:
        self.pool = pool
        self.seed = seed
        self.salt = salt
        self.counter = counter
        self.per_word = calibration.tokens_per_word if calibration else None

    def write(self, blocks: list[_Block]) -> dict[_Block, tuple[str, int | None]]:
        """(text, tokens) per block; tokens None when nothing can count or estimate them."""
        streams = {b: self._stream(b) for b in blocks}
        cut = {b: self._clamp(round(b.tokens / (self.per_word or 1.0))) for b in blocks}
        if self.counter is None:
            per_word = self.per_word
            return {
                b: (
                    " ".join(streams[b][: cut[b]]),
                    None if per_word is None else round(cut[b] * per_word),
                )
                for b in blocks
            }
        counts = dict(zip(blocks, self._count(blocks, streams, cut), strict=True))
        for _ in range(FIX_ROUNDS):
            wrong = []
            for b in blocks:
                moved = self._clamp(cut[b] + b.tokens - counts[b])
                if counts[b] != b.tokens and moved != cut[b]:
                    cut[b] = moved
                    wrong.append(b)
            if not wrong:
                break
            counts.update(zip(wrong, self._count(wrong, streams, cut), strict=True))
        return {b: (" ".join(streams[b][: cut[b]]), counts[b]) for b in blocks}

    def _count(
        self, blocks: list[_Block], streams: dict[_Block, list[str]], cut: dict[_Block, int]
    ) -> list[int]:
        assert self.counter is not None
        texts = [("" if b.opens else " ") + " ".join(streams[b][: cut[b]]) for b in blocks]
        return self.counter.count_batch(texts)

    def _stream(self, block: _Block) -> list[str]:
        """512 words from a generator of this id alone: every word is at least a token."""
        rng = np.random.default_rng([self.seed, self.salt, block.hash_id & _SEED_MASK])
        words = self.pool.words
        stream = [words[i] for i in rng.integers(0, len(words), size=MOONCAKE_BLOCK_TOKENS)]
        if block.opens:
            stream[0] = self.pool.openers[int(rng.integers(0, len(self.pool.openers)))]
        return stream

    @staticmethod
    def _clamp(words: int) -> int:
        return min(max(words, 1), MOONCAKE_BLOCK_TOKENS)
