"""Conversations: sessions of several turns, each turn resending the whole history.

A chat deployment's traffic is sessions: a user turn, the model's reply, the next user
turn with everything before it, and so on. Each request's prompt is the previous one plus
the reply the server gave and the new turn, so its prefix is the previous prompt: what an
engine's prefix cache is for. A session is the unit of concurrency: a closed loop of N
keeps N sessions open, each sending its next turn when the previous reply is complete and
its think time has passed.

Two sources:

- `conversation` (synthetic): a number of turns per session (fixed, or uniform in A-B),
  user turns of random common words of `--input-len` tokens (with `--range-ratio`),
  replies of `--output-len`, think time between turns (exponential with the given mean,
  or none), and an optional system prompt of `--shared-prefix-len` tokens that every
  session opens with.
- `sharegpt:PATH --multi-turn`: the human turns of each conversation of a ShareGPT file,
  the lengths of its replies as max_tokens. The history sent holds the replies the server
  actually gave, not the file's.

Everything is drawn from the run's seed: the same seed gives the same sessions.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servelab.bench.endpoint import RequestItem
from servelab.bench.prompts import PromptBuilder, word_pool
from servelab.bench.tokens import Calibration, TokenCounter, count_texts
from servelab.core.errors import ConfigError

__all__ = [
    "MAX_TURNS",
    "Conversation",
    "ConversationSpec",
    "Turn",
    "TurnRange",
    "build_conversations",
    "load_sharegpt_sessions",
    "next_request",
    "parse_turns",
    "synthetic_sessions",
    "turns_needed",
]

MAX_TURNS = 1000
DEFAULT_REPLY_TOKENS = 128
"""A ShareGPT reply's length where nothing can count its tokens."""


@dataclass(frozen=True, slots=True)
class TurnRange:
    """Turns per session: uniform in [low, high]."""

    low: int
    high: int

    def describe(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


def parse_turns(text: str) -> TurnRange:
    """'4' or '2-6': the turns of a session (uniform between the two, both included)."""
    hint = "a number of turns, or a range such as 2-6"
    low_text, dash, high_text = text.strip().partition("-")
    try:
        low = int(low_text)
        high = int(high_text) if dash else low
    except ValueError:
        raise ConfigError(f"turns {text!r} is not a number or a range", hint=hint) from None
    if not 1 <= low <= high <= MAX_TURNS:
        raise ConfigError(f"turns {text!r} must be 1 <= low <= high <= {MAX_TURNS}", hint=hint)
    return TurnRange(low, high)


@dataclass(frozen=True, slots=True)
class ConversationSpec:
    """How sessions are made: turns, think time between turns (mean seconds; 0 for none)."""

    turns: TurnRange = TurnRange(4, 4)
    think_time_s: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.think_time_s) and self.think_time_s >= 0):
            raise ConfigError(
                f"think time {self.think_time_s} is not a non-negative number of seconds"
            )

    def describe(self) -> dict[str, str | float]:
        return {"turns": self.turns.describe(), "think_time_s": self.think_time_s}


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn: its text, its tokens where counted, and the reply's length."""

    text: str
    input_tokens: int | None
    max_tokens: int
    think_s: float
    """Wait before sending this turn, after the previous reply (0 for the first turn)."""


@dataclass(frozen=True, slots=True)
class Conversation:
    """A session: an optional system prompt, then its user turns in order."""

    session: int
    system: str | None
    system_tokens: int | None
    turns: tuple[Turn, ...]


def think_times(spec: ConversationSpec, count: int, rng: np.random.Generator) -> list[float]:
    """Waits before each turn: none before the first, exponential with the mean after."""
    if spec.think_time_s <= 0 or count <= 1:
        return [0.0] * count
    return [0.0, *(float(x) for x in rng.exponential(spec.think_time_s, size=count - 1))]


def synthetic_sessions(
    spec: ConversationSpec,
    count: int,
    rng: np.random.Generator,
    *,
    user_turn: list[tuple[str, int | None]],
    output_lens: list[int],
    system: tuple[str, int | None] | None,
    first_session: int = 0,
) -> list[Conversation]:
    """`count` sessions drawn from `user_turn` texts (used in order) and reply lengths.

    The caller draws enough turn texts and lengths: `turns_needed` of them."""
    sessions = []
    used = 0
    for n in range(count):
        turns = int(rng.integers(spec.turns.low, spec.turns.high + 1))
        waits = think_times(spec, turns, rng)
        made = []
        for k in range(turns):
            text, tokens = user_turn[(used + k) % len(user_turn)]
            made.append(Turn(text, tokens, output_lens[(used + k) % len(output_lens)], waits[k]))
        used += turns
        sessions.append(
            Conversation(
                session=first_session + n,
                system=system[0] if system else None,
                system_tokens=system[1] if system else None,
                turns=tuple(made),
            )
        )
    return sessions


def turns_needed(spec: ConversationSpec, count: int) -> int:
    """Most user turns `count` sessions can take."""
    return count * spec.turns.high


def load_sharegpt_sessions(path: Path) -> list[list[tuple[str, str]]]:
    """Each conversation of a ShareGPT file as (user turn, reply) pairs, in order; turns
    whose roles do not alternate human / model end the conversation there."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read ShareGPT file {path}: {exc}") from None
    if not isinstance(data, list):
        raise ConfigError(f"{path} is not a ShareGPT list of conversations")
    sessions = []
    for entry in data:
        turns = (
            entry.get("conversations") or entry.get("conversation")
            if isinstance(entry, dict)
            else None
        )
        pairs = _pairs(turns) if isinstance(turns, list) else []
        if pairs:
            sessions.append(pairs)
    if not sessions:
        raise ConfigError(f"{path} holds no conversation with a prompt and a reply")
    return sessions


_USER_ROLES = frozenset({"human", "user"})
_MODEL_ROLES = frozenset({"gpt", "assistant", "chatgpt", "bard", "bing", "model"})


def _pairs(turns: list[Any]) -> list[tuple[str, str]]:
    pairs = []
    for ask, reply in zip(turns[::2], turns[1::2], strict=False):
        if not (isinstance(ask, dict) and isinstance(reply, dict)):
            break
        roles = (ask.get("from", ask.get("role")), reply.get("from", reply.get("role")))
        texts = (ask.get("value", ask.get("content")), reply.get("value", reply.get("content")))
        if roles[0] not in _USER_ROLES or roles[1] not in _MODEL_ROLES:
            break
        if not (isinstance(texts[0], str) and texts[0] and isinstance(texts[1], str)):
            break
        pairs.append((texts[0], texts[1]))
    return pairs


@dataclass(slots=True)
class History:
    """What one session has said so far, as the server saw it."""

    conversation: Conversation
    messages: list[tuple[str, str]]
    prompt_tokens: int = 0
    """The last request's prompt tokens plus its reply's: the next prompt's shared prefix."""

    @classmethod
    def start(cls, conversation: Conversation) -> History:
        system = conversation.system
        return cls(conversation, [("system", system)] if system else [])

    def add_reply(self, turn: Turn, reply: str, prompt_tokens: int, output_tokens: int) -> None:
        self.messages += [("user", turn.text), ("assistant", reply)]
        self.prompt_tokens = prompt_tokens + output_tokens


def next_request(history: History, k: int, *, first_of_run: bool) -> RequestItem:
    """The k-th turn of the session: the history so far and the new user turn.

    Its shared prefix is the previous request's prompt and reply; a first turn shares the
    system prompt, unless it is the very first request of the run."""
    turn = history.conversation.turns[k]
    messages = (*history.messages, ("user", turn.text))
    if k > 0:
        shared = history.prompt_tokens
    else:
        shared = 0 if first_of_run else history.conversation.system_tokens or 0
    base = history.prompt_tokens if k > 0 else history.conversation.system_tokens or 0
    tokens = base + turn.input_tokens if turn.input_tokens is not None else None
    return RequestItem(
        prompt=turn.text,
        max_tokens=turn.max_tokens,
        input_tokens=tokens,
        shared_tokens=shared,
        messages=messages,
    )


def build_conversations(
    spec: ConversationSpec,
    count: int,
    *,
    input_len: int,
    output_len: int,
    range_ratio: float,
    system_len: int,
    sharegpt: Path | None,
    seed: int,
    salt: int,
    counter: TokenCounter | None,
    calibration: Calibration | None,
) -> list[Conversation]:
    """`count` sessions: synthetic, or the conversations of a ShareGPT file (cycled).

    The system prompt is drawn from the seed alone: every session of the run opens with
    the same one, as a deployment's does, so it is shared across levels too."""
    rng = np.random.default_rng([seed, salt])
    builder = PromptBuilder(word_pool(counter), rng, counter, calibration)
    system = None
    if system_len > 0:
        system_builder = PromptBuilder(
            word_pool(counter), np.random.default_rng([seed, 0x5157]), counter, calibration
        )
        system = system_builder.exact([system_len])[0]
    if sharegpt is not None:
        return _sharegpt_sessions(spec, count, sharegpt, rng, system, counter, calibration)
    needed = turns_needed(spec, count)
    low = max(int(input_len * range_ratio), 1)
    inputs = [int(x) for x in rng.integers(low, input_len + 1, size=needed)]
    out_low = max(int(output_len * range_ratio), 1)
    outputs = [int(x) for x in rng.integers(out_low, output_len + 1, size=needed)]
    return synthetic_sessions(
        spec,
        count,
        rng,
        user_turn=builder.exact(inputs),
        output_lens=outputs,
        system=system,
        first_session=salt * count,
    )


def _sharegpt_sessions(
    spec: ConversationSpec,
    count: int,
    path: Path,
    rng: np.random.Generator,
    system: tuple[str, int | None] | None,
    counter: TokenCounter | None,
    calibration: Calibration | None,
) -> list[Conversation]:
    """The file's conversations in a seeded order, each cut to at most the spec's turns."""
    loaded = load_sharegpt_sessions(path)
    order = rng.permutation(len(loaded))
    sessions = []
    for n in range(count):
        pairs = loaded[int(order[n % len(order)])][: spec.turns.high]
        asks = count_texts([ask for ask, _ in pairs], counter, calibration)
        replies = count_texts([reply for _, reply in pairs], counter, calibration)
        waits = think_times(spec, len(pairs), rng)
        turns = tuple(
            Turn(ask, tokens, reply or DEFAULT_REPLY_TOKENS, wait)
            for (ask, _), tokens, reply, wait in zip(pairs, asks, replies, waits, strict=True)
        )
        sessions.append(
            Conversation(
                session=n,
                system=system[0] if system else None,
                system_tokens=system[1] if system else None,
                turns=turns,
            )
        )
    return sessions
