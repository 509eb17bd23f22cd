"""Reading OpenAI-style request bodies into what the simulator needs to answer them.

The token model is deliberately simple so a client can predict it: one token is one
whitespace-separated word of the prompt (chat: of the message contents joined), or one
id when the prompt is a list of token ids. Those words (or ids) are the prompt's units,
on which the prefix cache matches; a word's id is `word_id(word)`, as /tokenize says.
Every output token is the word `OUTPUT_WORD`, except on the quality path: a request that
asks for logprobs, prompt_logprobs or echo, or sets temperature 0 (or any request to a
simulator with corruption planted) carries a `QualityRequest`, and its answer is the
greedy text of `servelab.sim.tokenmodel` (see `servelab.sim.greedy`). Other requests
look up one set of field names more than before, and nothing else. Fields it does not
read (sampling fields such as top_k, min_p or repetition_penalty, vLLM's cache_salt, all
of which the quality probe sends at their no-op values) are accepted and ignored, unless
`reject_fields` names them.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from servelab.sim.config import DEFAULT_MAX_TOKENS

__all__ = [
    "MAX_LOGPROBS",
    "OUTPUT_WORD",
    "VOCAB_SIZE",
    "GenerationRequest",
    "QualityRequest",
    "RequestError",
    "parse_generation",
    "parse_json",
    "prompt_token_ids",
    "word_id",
]

VOCAB_SIZE = 32_000
"""Word token ids are a hash of the word modulo this; only their count matters."""
OUTPUT_WORD = "tok"
"""The word of every output token off the quality path."""
MAX_LOGPROBS = 20
"""The most top logprobs a request may ask for: vLLM's default --max-logprobs."""
_QUALITY_FIELDS = frozenset(("logprobs", "top_logprobs", "prompt_logprobs", "echo", "temperature"))
"""A body without any of these takes the fast path, whatever its values."""


class RequestError(Exception):
    """A request answered with an error status and JSON body instead of tokens."""

    def __init__(self, status: int, payload: dict[str, Any]) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.payload = payload


@dataclass(frozen=True, slots=True)
class QualityRequest:
    """What a request asks of the quality path, and its prompt as token ids.

    `logprobs`: completions, the top-k count of `logprobs`; chat, `top_logprobs` when
    `logprobs` is true; None when not asked. `prompt_words` are the prompt's words when it
    was text (None when it was ids), to spell echoed and scored prompt tokens.
    """

    prompt_ids: tuple[int, ...]
    prompt_words: tuple[str, ...] | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    echo: bool = False
    token_ids_as_text: bool = False


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One chat or completions request, reduced to what shapes the answer.

    `prompt_units` are the prompt's tokens (words, or the ids sent) for the prefix cache;
    left out of comparisons and repr, which a long prompt would drown. `quality` is None
    on the fast path.
    """

    chat: bool
    stream: bool
    include_usage: bool
    prompt_tokens: int
    max_tokens: int
    prompt_units: Sequence[Hashable] = field(default=(), compare=False, repr=False)
    quality: QualityRequest | None = field(default=None, repr=False)

    @property
    def output_unit(self) -> Hashable:
        """An output token as the prompt's units would write it: the word, or its id."""
        if self.prompt_units and isinstance(self.prompt_units[0], int):
            return word_id(OUTPUT_WORD)
        return OUTPUT_WORD


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _invalid(f"body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _invalid("body must be a JSON object")
    return body


def parse_generation(
    body: dict[str, Any], *, chat: bool, reject_fields: Collection[str], quality: bool = False
) -> GenerationRequest:
    """Validate a generation request; fields in `reject_fields` get transformers' 422.

    `quality` puts every request on the quality path (a simulator with corruption planted).
    """
    unexpected = sorted(name for name in body if name in reject_fields)
    if unexpected:
        names = ", ".join(repr(name) for name in unexpected)
        raise RequestError(422, {"detail": f"Unexpected fields in the request: {{{names}}}"})
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _invalid("'stream' must be a boolean")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise _invalid("'stream_options' must be an object")
    prompt = _prompt(body, chat=chat)
    units = prompt.split() if isinstance(prompt, str) else prompt
    return GenerationRequest(
        chat=chat,
        stream=stream,
        include_usage=options.get("include_usage") is True,
        prompt_tokens=len(units),
        max_tokens=_max_tokens(body),
        prompt_units=units,
        quality=(
            _quality(body, units, chat=chat, stream=stream, force=quality)
            if quality or not _QUALITY_FIELDS.isdisjoint(body)
            else None
        ),
    )


def prompt_token_ids(body: dict[str, Any], *, chat: bool) -> list[int]:
    """The prompt's token ids under the one-word-one-token model."""
    prompt = _prompt(body, chat=chat)
    if isinstance(prompt, str):
        return [word_id(word) for word in prompt.split()]
    return prompt


def word_id(word: str) -> int:
    """A word's token id: its CRC-32 modulo VOCAB_SIZE."""
    return zlib.crc32(word.encode()) % VOCAB_SIZE


def _quality(
    body: dict[str, Any], units: list[Any], *, chat: bool, stream: bool, force: bool
) -> QualityRequest | None:
    """The quality options of a body carrying a quality field (or `force`d), in vLLM's
    rules; None when it asks for nothing the fast path cannot give."""
    if chat:
        if not isinstance(body.get("logprobs"), bool | None):
            raise _invalid("'logprobs' must be a boolean")
        top = _count(body, "top_logprobs")
        if top is not None and body.get("logprobs") is not True:
            raise _invalid("when using `top_logprobs`, `logprobs` must be set to true.")
        logprobs = (top or 0) if body.get("logprobs") is True else None
        prompt_logprobs, echo = None, False
    else:
        logprobs = _count(body, "logprobs")
        prompt_logprobs = _count(body, "prompt_logprobs")
        if stream and prompt_logprobs:
            raise _invalid("`prompt_logprobs` are not available when `stream=True`.")
        echo = body.get("echo") is True
    temperature = body.get("temperature")
    greedy = isinstance(temperature, int | float) and not isinstance(temperature, bool)
    greedy = greedy and temperature == 0
    if not (force or greedy or echo or logprobs is not None or prompt_logprobs is not None):
        return None
    text = bool(units) and isinstance(units[0], str)
    return QualityRequest(
        prompt_ids=tuple(word_id(word) for word in units) if text else tuple(units),
        prompt_words=tuple(units) if text else None,
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
        echo=echo,
        token_ids_as_text=body.get("return_tokens_as_token_ids") is True,
    )


def _count(body: dict[str, Any], name: str) -> int | None:
    """An optional count of top logprobs, 0 to MAX_LOGPROBS."""
    value = body.get(name)
    if value is None:
        return None
    if not _is_int(value) or not 0 <= value <= MAX_LOGPROBS:
        raise _invalid(f"'{name}' must be an integer from 0 to {MAX_LOGPROBS}")
    return int(value)


def _prompt(body: dict[str, Any], *, chat: bool) -> str | list[int]:
    """The prompt as text, or as the token ids the client sent."""
    if chat:
        return _chat_text(body.get("messages"))
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(_is_int(item) for item in prompt):
        return prompt
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0]
    raise _invalid("'prompt' must be a string, a list of one string, or a list of token ids")


def _chat_text(messages: object) -> str:
    if not isinstance(messages, list) or not messages:
        raise _invalid("'messages' must be a non-empty list")
    texts: list[str] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(
                part["text"]
                for part in content
                if isinstance(part, dict) and isinstance(part.get("text"), str)
            )
    return " ".join(texts)


def _max_tokens(body: dict[str, Any]) -> int:
    value = body.get("max_completion_tokens")
    if value is None:
        value = body.get("max_tokens")
    if value is None:
        return DEFAULT_MAX_TOKENS
    if not _is_int(value) or value < 1:
        raise _invalid("'max_tokens' must be a positive integer")
    return int(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _invalid(message: str) -> RequestError:
    return RequestError(
        400, {"error": {"message": message, "type": "invalid_request_error", "code": 400}}
    )
