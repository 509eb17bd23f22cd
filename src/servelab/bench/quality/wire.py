"""Reading the engines' answers: streamed greedy continuations and teacher-forced logprobs.

Pure functions over parsed bodies, so every wire format is tested with hand-written
responses. Bodies are parsed with Python's json, which accepts the NaN and Infinity
literals an engine writes when its logprobs overflow (orjson would refuse the body and
hide the very fault we look for). A `null` where a generated or forced token's logprob
is due is read as NaN too: pydantic, which vLLM and SGLang serialise with, writes NaN as
null.

Formats (docs/QUALITY.md "Wire formats"):
- completions stream: `choices[0].text`, `choices[0].logprobs.tokens/token_logprobs/
  top_logprobs` (vLLM's `return_tokens_as_token_ids` makes tokens "token_id:<id>");
- chat stream: `choices[0].delta.content` / `reasoning_content` (or `reasoning`),
  `choices[0].logprobs.content[i].token/logprob/top_logprobs`;
- vLLM `prompt_logprobs`: one entry per prompt token, None or {"<id>": {"logprob",
  "rank", "decoded_token"}};
- SGLang /generate: `meta_info.input_token_logprobs` as [logprob, id, text] per scored
  input token, `meta_info.input_top_logprobs` as a list of such triples per position;
- echo: `choices[0].logprobs.tokens/token_logprobs/top_logprobs/text_offset` over prompt
  and answer together.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from servelab.bench.quality.greedy import not_greedy
from servelab.bench.quality.results import ProbeReading, QualityErrorKind, TokenSource

__all__ = [
    "Answer",
    "ForcedParse",
    "Malformed",
    "loads",
    "parse_echo",
    "parse_prompt_logprobs",
    "parse_sglang_generate",
]

_TOKEN_ID = "token_id:"


class Malformed(ValueError):
    """A body or event that is not the JSON its wire format promises."""


def loads(data: bytes | str) -> Any:
    """JSON with NaN/Infinity literals accepted."""
    try:
        return json.loads(data)
    except ValueError as exc:
        raise Malformed(f"not JSON: {exc}") from None


@dataclass(slots=True)
class Answer:
    """A streamed answer at temperature 0, event by event, then judged (`reading`)."""

    chat: bool
    texts: list[str] = field(default_factory=list)
    reasoning_chars: int = 0
    shown: list[str] = field(default_factory=list)
    """Text per token for diffs: a chunk's text on its first token, '' on the others."""
    pieces: list[str] = field(default_factory=list)
    """The engine's token strings from logprobs ("token_id:<id>" with vLLM's ids)."""
    logprobs: list[float] = field(default_factory=list)
    tops: list[list[float] | None] = field(default_factory=list)
    """Each token's top logprobs as the engine listed them; None where it listed none."""
    saw_logprobs: bool = False
    finish_reason: str | None = None
    completion_tokens: int | None = None
    server_error: str | None = None

    def take_event(self, payload: bytes) -> None:
        """One SSE data payload; raises Malformed on a payload of the wrong shape."""
        if not payload.strip() or payload.strip() == b"[DONE]":
            return
        event = loads(payload)
        if not isinstance(event, dict):
            raise Malformed("event is not an object")
        if "error" in event and not event.get("choices"):
            self.server_error = str(event["error"])[:300]
            return
        usage = event.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.completion_tokens = usage["completion_tokens"]
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict):
                raise Malformed("choice is not an object")
            self._take_choice(choice)

    def _take_choice(self, choice: dict[str, Any]) -> None:
        if self.chat:
            delta = choice.get("delta") or choice.get("message") or {}
            text = delta.get("content") or ""
            reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
            self.reasoning_chars += len(reasoning)
        else:
            text = choice.get("text") or ""
        pieces, values, tops = _choice_logprobs(choice.get("logprobs"), chat=self.chat)
        if pieces:
            self.saw_logprobs = True
            self.shown.extend([text if i == 0 else "" for i in range(len(pieces))])
            self.pieces.extend(pieces)
            self.logprobs.extend(values)
            self.tops.extend(tops)
        elif text:
            self.shown.append(text)
        if text:
            self.texts.append(text)
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])

    def reading(self, probe_id: str, latency_ms: float) -> ProbeReading:
        """The answer as a reading, with its quality error where it has one."""
        ids = _ids(self.pieces) if self.saw_logprobs else None
        source: TokenSource = (
            "ids" if ids is not None else "logprobs" if self.saw_logprobs else "chunks"
        )
        tokens = self.shown if ids is not None or not self.saw_logprobs else self.pieces
        kind, error = self._judge()
        return ProbeReading(
            probe_id=probe_id,
            ok=kind is None,
            error_kind=kind,
            error=error,
            text="".join(self.texts),
            reasoning_chars=self.reasoning_chars,
            token_ids=ids,
            tokens=tokens,
            token_source=source,
            logprobs=self.logprobs if self.saw_logprobs else None,
            finish_reason=self.finish_reason,
            completion_tokens=self.completion_tokens,
            latency_ms=latency_ms,
        )

    def _judge(self) -> tuple[QualityErrorKind | None, str | None]:
        """The worst fault first: numbers, then tokens not greedy, then an answer not
        given, then a cut stream."""
        if self.server_error is not None:
            return "http", f"error in the stream: {self.server_error}"
        bad = [i for i, v in enumerate(self.logprobs) if not math.isfinite(v)]
        if bad:
            return "nan_logprob", f"{len(bad)} non-finite logprobs, first at token {bad[0]}"
        wrong = not_greedy(self.logprobs, self.tops)
        if wrong is not None:
            return "not_greedy", (
                f"{wrong.tokens} tokens emitted at temperature 0 below their position's best "
                f"top logprob, first at token {wrong.first} ({wrong.first_gap_nats:.3g} nats "
                "under)"
            )
        if self.chat and not self.texts and self.reasoning_chars:
            return "reasoning_only", (
                f"content empty, {self.reasoning_chars} characters in reasoning_content"
            )
        if self.finish_reason is None:
            return "no_finish_reason", "the stream ended without a finish_reason"
        streamed = len(self.pieces)
        usage = self.completion_tokens
        if self.saw_logprobs and usage is not None and streamed < usage:
            return "short_stream", (
                f"{streamed} tokens streamed, usage.completion_tokens says {usage}"
            )
        return None, None


@dataclass(frozen=True, slots=True)
class ForcedParse:
    """Logprobs of forced tokens, with whether each was the engine's own top-1."""

    logprobs: list[float]
    top1: list[bool] | None
    tokens: list[str] | None = None
    """The engine's token strings (echo only), to check alignment with the reference."""


def parse_prompt_logprobs(body: Any, forced_ids: list[int]) -> ForcedParse:
    """vLLM /v1/completions with prompt_logprobs: the last len(forced_ids) prompt entries."""
    entries = _first_choice(body).get("prompt_logprobs")
    if not isinstance(entries, list) or len(entries) < len(forced_ids):
        raise Malformed("prompt_logprobs missing or shorter than the forced tokens")
    tail = entries[len(entries) - len(forced_ids) :] if forced_ids else []
    logprobs: list[float] = []
    top1: list[bool] = []
    for token_id, entry in zip(forced_ids, tail, strict=True):
        if not isinstance(entry, dict) or str(token_id) not in entry:
            raise Malformed(f"prompt_logprobs entry lacks forced token {token_id}")
        mine = entry[str(token_id)]
        logprobs.append(_number(mine.get("logprob") if isinstance(mine, dict) else mine))
        rank = mine.get("rank") if isinstance(mine, dict) else None
        if isinstance(rank, int):
            top1.append(rank == 1)
        else:
            best = max(entry, key=lambda k: _number(_logprob_of(entry[k])))
            top1.append(best == str(token_id))
    return ForcedParse(logprobs, top1)


def parse_sglang_generate(body: Any, forced_ids: list[int]) -> ForcedParse:
    """SGLang /generate with return_logprob: the tail of meta_info.input_token_logprobs."""
    meta = body.get("meta_info") if isinstance(body, dict) else None
    entries = meta.get("input_token_logprobs") if isinstance(meta, dict) else None
    if not isinstance(entries, list) or len(entries) < len(forced_ids):
        raise Malformed("input_token_logprobs missing or shorter than the forced tokens")
    n = len(forced_ids)
    logprobs: list[float] = []
    for token_id, entry in zip(forced_ids, entries[len(entries) - n :], strict=True):
        if not isinstance(entry, list) or len(entry) < 2 or entry[1] != token_id:
            raise Malformed(f"input_token_logprobs entry {entry!r} is not token {token_id}")
        logprobs.append(_number(entry[0]))
    tops = meta.get("input_top_logprobs") if isinstance(meta, dict) else None
    top1: list[bool] | None = None
    if isinstance(tops, list) and len(tops) >= n:
        top1 = [
            bool(isinstance(top, list) and top and top[0][1] == token_id)
            for token_id, top in zip(forced_ids, tops[len(tops) - n :], strict=True)
        ]
    return ForcedParse(logprobs, top1)


def parse_echo(body: Any, *, prompt_chars: int, continuation_chars: int) -> ForcedParse:
    """echo + logprobs: the tokens whose text_offset falls within the continuation."""
    lp = _first_choice(body).get("logprobs")
    if not isinstance(lp, dict):
        raise Malformed("echo answer has no logprobs")
    tokens, values = lp.get("tokens"), lp.get("token_logprobs")
    offsets, tops = lp.get("text_offset"), lp.get("top_logprobs")
    if not (isinstance(tokens, list) and isinstance(values, list) and isinstance(offsets, list)):
        raise Malformed("echo logprobs lack tokens, token_logprobs or text_offset")
    end = prompt_chars + continuation_chars
    picked = [i for i, off in enumerate(offsets) if prompt_chars <= off < end]
    top1: list[bool] | None = None
    if isinstance(tops, list) and len(tops) == len(tokens):
        top1 = [
            isinstance(tops[i], dict)
            and bool(tops[i])
            and max(tops[i], key=lambda k: _number(tops[i][k])) == tokens[i]
            for i in picked
        ]
    return ForcedParse([_number(values[i]) for i in picked], top1, [tokens[i] for i in picked])


def _choice_logprobs(
    lp: Any, *, chat: bool
) -> tuple[list[str], list[float], list[list[float] | None]]:
    """(token strings, logprobs, top logprobs) of one choice's logprobs object; empty
    where absent, a None per token where its top logprobs are."""
    if not isinstance(lp, dict):
        return [], [], []
    if chat:
        content = lp.get("content") or []
        if not isinstance(content, list):
            raise Malformed("logprobs.content is not a list")
        return (
            [str(c.get("token", "")) for c in content],
            [_number(c.get("logprob")) for c in content],
            [_top_values(c.get("top_logprobs")) for c in content],
        )
    tokens, values = lp.get("tokens") or [], lp.get("token_logprobs") or []
    if len(tokens) != len(values):
        raise Malformed("logprobs.tokens and token_logprobs differ in length")
    tops = lp.get("top_logprobs")
    per_token = tops if isinstance(tops, list) and len(tops) == len(tokens) else []
    return (
        [str(t) for t in tokens],
        [_number(v) for v in values],
        [_top_values(t) for t in per_token] or [None] * len(tokens),
    )


def _top_values(top: Any) -> list[float] | None:
    """The logprobs of one position's top list: completions' {token: logprob}, chat's
    [{"token", "logprob"}]; None where there is none."""
    if isinstance(top, dict):
        return [_number(v) for v in top.values()]
    if isinstance(top, list):
        return [_number(_logprob_of(t)) for t in top]
    return None


def _ids(pieces: list[str]) -> list[int] | None:
    """Token ids where every piece is vLLM's "token_id:<id>"; else None."""
    if not pieces or not all(p.startswith(_TOKEN_ID) for p in pieces):
        return None
    try:
        return [int(p[len(_TOKEN_ID) :]) for p in pieces]
    except ValueError:
        return None


def _first_choice(body: Any) -> dict[str, Any]:
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise Malformed("answer has no choices")
    return choices[0]


def _logprob_of(value: Any) -> Any:
    return value.get("logprob") if isinstance(value, dict) else value


def _number(value: Any) -> float:
    """A logprob as a float; null (NaN as pydantic writes it) and non-numbers read as NaN."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)
