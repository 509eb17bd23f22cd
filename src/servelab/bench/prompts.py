"""Prompts of random words made to exact token lengths, for the random and trace workloads.

With a local tokenizer the words are those that are one token after a space, so a prompt
of n words is n tokens and prompts join without merging tokens across the joint; with a
server's /tokenize every prompt is counted and its words added or trimmed until the count
agrees; with only a calibration (tokens per word) lengths are close, not exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servelab.bench.tokens import Calibration, LocalTokenizer, TokenCounter
from servelab.bench.words import COMMON_WORDS

__all__ = ["FIX_ROUNDS", "PromptBuilder", "WordPool", "word_pool"]

FIX_ROUNDS = 8
"""Rounds of adding or trimming words before a count that will not agree is accepted."""
_MIN_TOKENIZER_WORDS = 64


@dataclass(frozen=True, slots=True)
class WordPool:
    """Words to draw from, and those of them that may open a prompt."""

    words: list[str]
    openers: list[str]
    """One token at the start of a text too, so a prompt tokenizes the same alone and after
    a chat template's "user " (the template's overhead stays constant)."""


def word_pool(counter: TokenCounter | None) -> WordPool:
    """The local tokenizer's single-token words, else common English words."""
    if isinstance(counter, LocalTokenizer):
        words = _single_token_words(counter)
        if len(words) >= _MIN_TOKENIZER_WORDS:
            alone = counter.count_batch(words)
            openers = [w for w, n in zip(words, alone, strict=True) if n == 1]
            return WordPool(words, openers or words)
    return WordPool(list(COMMON_WORDS), list(COMMON_WORDS))


def _single_token_words(tokenizer: LocalTokenizer) -> list[str]:
    candidates = sorted({tokenizer.decode([i]).strip() for i in tokenizer.vocabulary().values()})
    words = [w for w in candidates if w.isalpha() and w.isascii() and 2 <= len(w) <= 12]
    counts = tokenizer.count_batch([" " + w for w in words])
    return [w for w, n in zip(words, counts, strict=True) if n == 1]


class PromptBuilder:
    """Random word prompts, adjusted until the counter agrees with the target length."""

    def __init__(
        self,
        pool: WordPool,
        rng: np.random.Generator,
        counter: TokenCounter | None,
        calibration: Calibration | None,
    ) -> None:
        self.words = pool.words
        self.openers = pool.openers
        self.rng = rng
        self.counter = counter
        self.calibration = calibration
        self.per_word = calibration.tokens_per_word if calibration else 1.0

    def _draw(self, n: int) -> list[str]:
        return [self.words[i] for i in self.rng.integers(0, len(self.words), size=max(n, 0))]

    def _opening(self, n: int) -> list[str]:
        """n words, the first one of the openers."""
        if n <= 0:
            return []
        first = self.openers[int(self.rng.integers(0, len(self.openers)))]
        return [first, *self._draw(n - 1)]

    def _estimate(self, head_tokens: int, words: int) -> int | None:
        if self.calibration is None:
            return None
        return round(head_tokens + words * self.per_word)

    def exact(
        self, targets: list[int], *, prefix: tuple[str, int | None] | None = None
    ) -> list[tuple[str, int | None]]:
        """(text, counted tokens) per target; counted is None when nothing can count."""
        head = prefix[0] + " " if prefix else ""
        head_tokens = (prefix[1] or 0) if prefix else 0
        draw = self._draw if prefix else self._opening
        bodies = [draw(round((t - head_tokens) / self.per_word)) for t in targets]
        if self.counter is None:
            return [(head + " ".join(b), self._estimate(head_tokens, len(b))) for b in bodies]
        counts = self.counter.count_batch([head + " ".join(b) for b in bodies])
        for _ in range(FIX_ROUNDS):
            wrong = [i for i, (c, t) in enumerate(zip(counts, targets, strict=True)) if c != t]
            if not wrong:
                break
            for i in wrong:
                diff = targets[i] - counts[i]
                bodies[i] = bodies[i] + self._draw(diff) if diff > 0 else bodies[i][:diff]
            fixed = self.counter.count_batch([head + " ".join(bodies[i]) for i in wrong])
            for i, c in zip(wrong, fixed, strict=True):
                counts[i] = c
        return [(head + " ".join(b), c) for b, c in zip(bodies, counts, strict=True)]
