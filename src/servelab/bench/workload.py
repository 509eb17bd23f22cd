"""Workloads: the prompts and output lengths a benchmark sends.

- `random`: prompts of random common words with lengths uniform in [r*L, L] (SGLang's
  `--random-range-ratio` meaning), made exact with a token counter when one is
  available; an optional shared prefix of P tokens opens every prompt.
- `fixed`: one prompt, repeated (the single-stream test).
- `sharegpt:PATH`: the first human turn of each conversation of a local ShareGPT-format
  JSON, with the reply's length as the output length.
- `conversation` (and `sharegpt:PATH` with `--multi-turn`): sessions of several turns,
  each resending the history (bench.conversation); a session is the unit of concurrency.
- `trace:PATH`: a Mooncake or BurstGPT trace's window (bench.traces), sent at its
  timestamps; its prompts are made by bench.trace_prompts.

Every request says how many of its leading tokens repeat an earlier request's prompt
(`shared_tokens`): what an unbounded prefix cache could hit. Within one build the dataset
knows (a random prompt's shared prefix, a trace's blocks, a repeated prompt); across the
builds of a run (warm-up, later levels) `SentPrompts` finds the prompts sent again whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from servelab.bench.conversation import (
    Conversation,
    ConversationSpec,
    History,
    build_conversations,
    next_request,
)
from servelab.bench.endpoint import RequestItem
from servelab.bench.prompts import PromptBuilder, word_pool
from servelab.bench.tokens import Calibration, TokenCounter, count_texts
from servelab.bench.trace_prompts import trace_requests
from servelab.bench.traces import Replay
from servelab.core.errors import ConfigError

__all__ = [
    "DEFAULT_FIXED_OUTPUT_LEN",
    "DEFAULT_FIXED_PROMPT",
    "DEFAULT_INPUT_LEN",
    "DEFAULT_OUTPUT_LEN",
    "SentPrompts",
    "WorkloadSpec",
    "build_requests",
    "build_sessions",
    "parse_dataset",
]

DEFAULT_INPUT_LEN = 256
DEFAULT_OUTPUT_LEN = 128
DEFAULT_FIXED_OUTPUT_LEN = 512
DEFAULT_FIXED_PROMPT = "Explain quantum entanglement in detail."
_MIN_SHAREGPT_TOKENS = 2
_DATASETS_HINT = "use random, fixed, conversation, sharegpt:PATH or trace:PATH"


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
    replay: Replay | None = None
    """trace: the window to replay and its planned send times (bench.traces.load_replay)."""
    conversation: ConversationSpec | None = None
    """Sessions of turns (the `conversation` dataset, or ShareGPT's with --multi-turn)."""

    def describe(self) -> dict[str, str | int | float | None]:
        described: dict[str, str | int | float | None] = {
            "dataset": self.dataset if self.path is None else f"{self.dataset}:{self.path}",
            "input_len": self.input_len if self.dataset == "random" else None,
            "output_len": self.output_len,
            "range_ratio": self.range_ratio,
            "shared_prefix_len": self.shared_prefix_len,
            "seed": self.seed,
            "prompt": self.prompt if self.dataset == "fixed" else None,
        }
        if self.replay is not None:
            described.update(self.replay.describe())
        if self.conversation is not None:
            described.update(self.conversation.describe())
            described["input_len"] = self.input_len if self.path is None else None
        return described


def parse_dataset(text: str) -> tuple[str, Path | None]:
    """'random' | 'fixed' | 'sharegpt:PATH' | 'trace:PATH' -> (name, path)."""
    name, _, path = text.partition(":")
    if name in ("random", "fixed", "conversation") and not path:
        return name, None
    if name in ("sharegpt", "trace"):
        if not path:
            raise ConfigError(f"{name} needs a file", hint=f"--dataset {name}:PATH/TO/FILE")
        file = Path(path).expanduser()
        if not file.is_file():
            what = "ShareGPT" if name == "sharegpt" else "trace"
            raise ConfigError(f"{what} file {file} does not exist")
        return name, file
    raise ConfigError(f"unknown dataset {text!r}", hint=_DATASETS_HINT)


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
    if spec.conversation is not None:
        return [
            next_request(History.start(session), 0, first_of_run=False)
            for session in build_sessions(
                spec, count, counter=counter, calibration=calibration, salt=salt
            )
        ]
    if spec.dataset == "fixed":
        return _fixed(spec, count, counter, calibration)
    if spec.dataset == "sharegpt":
        return _sharegpt(spec, count, rng, counter, calibration)
    if spec.dataset == "trace":
        if spec.replay is None:
            raise ConfigError("a trace workload needs its replay (bench.traces.load_replay)")
        return trace_requests(
            spec.replay.trace,
            count,
            seed=spec.seed,
            salt=salt,
            counter=counter,
            calibration=calibration,
        )
    return _random(spec, count, rng, counter, calibration)


def build_sessions(
    spec: WorkloadSpec,
    count: int,
    *,
    counter: TokenCounter | None,
    calibration: Calibration | None,
    salt: int = 0,
) -> list[Conversation]:
    """`count` conversations for a workload of sessions (`spec.conversation` set)."""
    if spec.conversation is None:
        raise ConfigError(f"the {spec.dataset} dataset has no sessions")
    return build_conversations(
        spec.conversation,
        count,
        input_len=spec.input_len,
        output_len=spec.output_len or DEFAULT_OUTPUT_LEN,
        range_ratio=spec.range_ratio,
        system_len=spec.shared_prefix_len,
        sharegpt=spec.path if spec.dataset == "sharegpt" else None,
        seed=spec.seed,
        salt=salt,
        counter=counter,
        calibration=calibration,
    )


class SentPrompts:
    """The prompts of a run so far: one sent again shares all its tokens with the first.

    Kept as hashes of the text, so a long sweep does not keep every prompt alive.
    """

    def __init__(self) -> None:
        self._seen: set[int] = set()

    def mark(self, items: list[RequestItem]) -> list[RequestItem]:
        """`items`, in sending order, with a prompt seen before counted as shared whole."""
        marked = []
        for item in items:
            key = hash(item.prompt)
            if key in self._seen and item.input_tokens is not None:
                item = replace(item, shared_tokens=item.input_tokens)
            self._seen.add(key)
            marked.append(item)
        return marked


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
    builder = PromptBuilder(word_pool(counter), rng, counter, calibration)
    prefix = builder.exact([spec.shared_prefix_len])[0] if spec.shared_prefix_len else None
    prompts = builder.exact(inputs, prefix=prefix)
    # The prefix is drawn anew with each build's salt: only this build's later prompts share it.
    shared = 0 if prefix is None else (prefix[1] or spec.shared_prefix_len)
    return [
        RequestItem(prompt=text, max_tokens=out, input_tokens=n, shared_tokens=shared if i else 0)
        for i, ((text, n), out) in enumerate(zip(prompts, outputs, strict=True))
    ]


def _fixed(
    spec: WorkloadSpec,
    count: int,
    counter: TokenCounter | None,
    calibration: Calibration | None,
) -> list[RequestItem]:
    tokens = count_texts([spec.prompt], counter, calibration)[0]
    out = spec.output_len or DEFAULT_FIXED_OUTPUT_LEN
    return SentPrompts().mark(
        [RequestItem(prompt=spec.prompt, max_tokens=out, input_tokens=tokens)] * count
    )


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
        prompt_lens = count_texts([p for p, _ in batch], counter, calibration)
        reply_lens = count_texts([r for _, r in batch], counter, calibration)
        for (prompt, _), n_in, n_out in zip(batch, prompt_lens, reply_lens, strict=True):
            if (n_in or 0) < _MIN_SHAREGPT_TOKENS or (n_out or 0) < _MIN_SHAREGPT_TOKENS:
                continue
            out = spec.output_len or n_out or DEFAULT_OUTPUT_LEN
            items.append(RequestItem(prompt=prompt, max_tokens=out, input_tokens=n_in))
        if len(items) >= count:
            break
    if not items:
        raise ConfigError(f"no usable conversation in {spec.path}")
    return SentPrompts().mark([items[i % len(items)] for i in range(count)])


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
