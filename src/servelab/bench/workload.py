"""Workloads: the prompts and output lengths a benchmark sends.

- `random`: prompts of random common words with lengths uniform in [r*L, L] (SGLang's
  `--random-range-ratio` meaning), made exact with a token counter when one is
  available; an optional shared prefix of P tokens opens every prompt.
- `fixed`: one prompt, repeated (the single-stream test).
- `sharegpt:PATH`: the first human turn of each conversation of a local ShareGPT-format
  JSON, with the reply's length as the output length.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servelab.bench.endpoint import RequestItem
from servelab.bench.tokens import Calibration, LocalTokenizer, TokenCounter
from servelab.bench.words import COMMON_WORDS
from servelab.core.errors import ConfigError

__all__ = [
    "DEFAULT_FIXED_OUTPUT_LEN",
    "DEFAULT_FIXED_PROMPT",
    "DEFAULT_INPUT_LEN",
    "DEFAULT_OUTPUT_LEN",
    "WorkloadSpec",
    "build_requests",
    "parse_dataset",
]

DEFAULT_INPUT_LEN = 256
DEFAULT_OUTPUT_LEN = 128
DEFAULT_FIXED_OUTPUT_LEN = 512
DEFAULT_FIXED_PROMPT = "Explain quantum entanglement in detail."
_FIX_ROUNDS = 8
_MIN_SHAREGPT_TOKENS = 2


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """What to send; `output_len` None means the dataset's default."""

    dataset: str = "random"
    path: Path | None = None
    input_len: int = DEFAULT_INPUT_LEN
    output_len: int | None = None
    range_ratio: float = 1.0
    shared_prefix_len: int = 0
    seed: int = 0
    prompt: str = DEFAULT_FIXED_PROMPT

    def describe(self) -> dict[str, str | int | float | None]:
        return {
            "dataset": self.dataset if self.path is None else f"{self.dataset}:{self.path}",
            "input_len": self.input_len if self.dataset == "random" else None,
            "output_len": self.output_len,
            "range_ratio": self.range_ratio,
            "shared_prefix_len": self.shared_prefix_len,
            "seed": self.seed,
            "prompt": self.prompt if self.dataset == "fixed" else None,
        }


def parse_dataset(text: str) -> tuple[str, Path | None]:
    """'random' | 'fixed' | 'sharegpt:PATH' -> (name, path)."""
    name, _, path = text.partition(":")
    if name in ("random", "fixed") and not path:
        return name, None
    if name == "sharegpt":
        if not path:
            raise ConfigError("sharegpt needs a file", hint="--dataset sharegpt:PATH/TO/FILE.json")
        file = Path(path).expanduser()
        if not file.is_file():
            raise ConfigError(f"ShareGPT file {file} does not exist")
        return name, file
    raise ConfigError(f"unknown dataset {text!r}", hint="use random, fixed or sharegpt:PATH")


def build_requests(
    spec: WorkloadSpec,
    count: int,
    *,
    counter: TokenCounter | None,
    calibration: Calibration | None,
    salt: int = 0,
) -> list[RequestItem]:
    """`count` requests for `spec`; `salt` varies the draw between levels of a sweep."""
    rng = np.random.default_rng([spec.seed, salt])
    if spec.dataset == "fixed":
        return _fixed(spec, count, counter, calibration)
    if spec.dataset == "sharegpt":
        return _sharegpt(spec, count, rng, counter, calibration)
    return _random(spec, count, rng, counter, calibration)


def _lengths(rng: np.random.Generator, length: int, ratio: float, count: int) -> list[int]:
    low = max(int(length * ratio), 1)
    return [int(x) for x in rng.integers(low, length + 1, size=count)]


def _random(
    spec: WorkloadSpec,
    count: int,
    rng: np.random.Generator,
    counter: TokenCounter | None,
    calibration: Calibration | None,
) -> list[RequestItem]:
    inputs = _lengths(rng, spec.input_len, spec.range_ratio, count)
    outputs = _lengths(rng, spec.output_len or DEFAULT_OUTPUT_LEN, spec.range_ratio, count)
    if spec.shared_prefix_len >= min(inputs):
        raise ConfigError(
            f"--shared-prefix-len {spec.shared_prefix_len} leaves no room in a "
            f"{min(inputs)}-token prompt",
            hint="keep it below input-len x range-ratio",
        )
    words, openers = _word_pool(counter)
    builder = _PromptBuilder(words, openers, rng, counter, calibration)
    prefix = builder.exact([spec.shared_prefix_len])[0] if spec.shared_prefix_len else None
    prompts = builder.exact(inputs, prefix=prefix)
    return [
        RequestItem(prompt=text, max_tokens=out, input_tokens=n)
        for (text, n), out in zip(prompts, outputs, strict=True)
    ]


def _fixed(
    spec: WorkloadSpec,
    count: int,
    counter: TokenCounter | None,
    calibration: Calibration | None,
) -> list[RequestItem]:
    tokens = _count_one(spec.prompt, counter, calibration)
    out = spec.output_len or DEFAULT_FIXED_OUTPUT_LEN
    return [RequestItem(prompt=spec.prompt, max_tokens=out, input_tokens=tokens)] * count


def _sharegpt(
    spec: WorkloadSpec,
    count: int,
    rng: np.random.Generator,
    counter: TokenCounter | None,
    calibration: Calibration | None,
) -> list[RequestItem]:
    assert spec.path is not None
    pairs = _load_sharegpt(spec.path)
    order = rng.permutation(len(pairs))
    items: list[RequestItem] = []
    for start in range(0, len(order), max(count, 64)):
        batch = [pairs[i] for i in order[start : start + max(count, 64)]]
        prompt_lens = _count_many([p for p, _ in batch], counter, calibration)
        reply_lens = _count_many([r for _, r in batch], counter, calibration)
        for (prompt, _), n_in, n_out in zip(batch, prompt_lens, reply_lens, strict=True):
            if (n_in or 0) < _MIN_SHAREGPT_TOKENS or (n_out or 0) < _MIN_SHAREGPT_TOKENS:
                continue
            out = spec.output_len or n_out or DEFAULT_OUTPUT_LEN
            items.append(RequestItem(prompt=prompt, max_tokens=out, input_tokens=n_in))
        if len(items) >= count:
            break
    if not items:
        raise ConfigError(f"no usable conversation in {spec.path}")
    return [items[i % len(items)] for i in range(count)]


def _load_sharegpt(path: Path) -> list[tuple[str, str]]:
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read ShareGPT file {path}: {exc}") from None
    if not isinstance(data, list):
        raise ConfigError(f"{path} is not a ShareGPT list of conversations")
    pairs: list[tuple[str, str]] = []
    for entry in data:
        turns = (
            entry.get("conversations") or entry.get("conversation")
            if isinstance(entry, dict)
            else None
        )
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        texts = [t.get("value", t.get("content")) for t in turns[:2] if isinstance(t, dict)]
        match texts:
            case [str() as prompt, str() as reply] if prompt and reply:
                pairs.append((prompt, reply))
    if not pairs:
        raise ConfigError(f"{path} holds no conversation with a prompt and a reply")
    return pairs


def _count_one(
    text: str, counter: TokenCounter | None, calibration: Calibration | None
) -> int | None:
    return _count_many([text], counter, calibration)[0]


def _count_many(
    texts: list[str], counter: TokenCounter | None, calibration: Calibration | None
) -> list[int | None]:
    if counter is not None:
        return list(counter.count_batch(texts))
    if calibration is not None:
        return [round(len(t.split()) * calibration.tokens_per_word) for t in texts]
    return [None] * len(texts)


def _word_pool(counter: TokenCounter | None) -> tuple[list[str], list[str]]:
    """Words that are one token each after a space, and those also one token at the start.

    A prompt opens with a word of the second kind, so the prompt tokenizes the same alone
    and after a chat template's "user " (the template's overhead stays constant).
    """
    if isinstance(counter, LocalTokenizer):
        words = _single_token_words(counter)
        if len(words) >= 64:
            alone = counter.count_batch(words)
            openers = [w for w, n in zip(words, alone, strict=True) if n == 1]
            return words, openers or words
    return list(COMMON_WORDS), list(COMMON_WORDS)


def _single_token_words(tokenizer: LocalTokenizer) -> list[str]:
    candidates = sorted({tokenizer.decode([i]).strip() for i in tokenizer.vocabulary().values()})
    words = [w for w in candidates if w.isalpha() and w.isascii() and 2 <= len(w) <= 12]
    counts = tokenizer.count_batch([" " + w for w in words])
    return [w for w, n in zip(words, counts, strict=True) if n == 1]


class _PromptBuilder:
    """Random word prompts, adjusted until the counter agrees with the target length."""

    def __init__(
        self,
        words: list[str],
        openers: list[str],
        rng: np.random.Generator,
        counter: TokenCounter | None,
        calibration: Calibration | None,
    ) -> None:
        self.words = words
        self.openers = openers
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
        for _ in range(_FIX_ROUNDS):
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
