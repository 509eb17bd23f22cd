"""Answers on the quality path: the token model's greedy text, with logprobs and corruption.

A request comes here when it carries a `QualityRequest` (it asked for logprobs,
prompt_logprobs or echo, or set temperature 0), or when the simulator has corruption
planted; every other request keeps the fast path of `servelab.sim.responses` and its
" tok" text. Its output token i is the argmax of `servelab.sim.tokenmodel` after the
prompt and tokens 0..i-1, so the answer is a function of the prompt's ids alone.
Unlike the fast path's shared frames, each chunk is encoded once on its own when the
request is accepted: one hash and one small JSON encoding per output token. Timing,
chunk count and usage are the fast path's, so the engine cannot tell the paths apart.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import orjson

from servelab.sim.config import SimConfig
from servelab.sim.corruption import Corruption
from servelab.sim.logprobs import Scored, chat_logprobs, completion_logprobs, prompt_logprobs
from servelab.sim.parsing import GenerationRequest, QualityRequest
from servelab.sim.responses import (
    DONE_EVENT,
    FINISH_REASON,
    StreamBody,
    choice_chunk,
    http_chunk,
    n_chunks,
    response_base,
    sse_event,
    usage_fields,
)
from servelab.sim.tokenmodel import Distribution, advance, context_state, decode, predictions

__all__ = ["UNENCODABLE_BODY", "Answer", "plan_answer"]

UNENCODABLE_BODY = b"Internal Server Error"
"""vLLM's answer (text/plain, HTTP 500) when a non-streamed body holds a NaN logprob."""


@dataclass(frozen=True, slots=True)
class Answer:
    """One request's greedy tokens (scored), its scored prompt when asked, its corruption.

    `prompt` is filled only for echo or prompt_logprobs, which need the prompt scored.
    """

    request: GenerationRequest
    quality: QualityRequest
    tokens: list[Scored]
    prompt: list[Scored]
    corruption: Corruption

    @property
    def unencodable(self) -> bool:
        """A non-streamed answer vLLM cannot encode: NaN logprobs it was asked for."""
        return (
            not self.request.stream
            and self.quality.logprobs is not None
            and any(token.nan for token in self.tokens)
        )

    def stream_body(self, *, config: SimConfig, request_id: str, created: int) -> StreamBody:
        """All frames of the streamed answer (the shape of `responses.stream_body`'s)."""
        request = self.request
        base = response_base(
            request, config=config, request_id=request_id, created=created, stream=True
        )
        head = b""
        if request.chat and config.role_chunk:
            head = sse_event(base, [choice_chunk(True, {"role": "assistant"}, None)])
        per = config.tokens_per_chunk
        count = n_chunks(request.max_tokens, per)
        reasoning = self._reasoning_tokens(config)
        choices: list[dict[str, Any]] = []
        sent_chars = 0
        for k in range(count):
            start, end = k * per, min(request.max_tokens, (k + 1) * per)
            choice = self._chunk_choice(start, end, reasoning, config, sent_chars, k == count - 1)
            sent_chars += len(choice.get("text", ""))
            choices.append(choice)
        frames = [sse_event(base, [choice]) for choice in choices[:-1]]
        last = functools.partial(self._last_frame, base, choices[-1], config)
        frames.append(last(0))
        final = (
            last if config.cache_report and request.include_usage and config.send_usage else None
        )
        return StreamBody(head=head, frames=frames, final=final)

    def completion_body(
        self, *, config: SimConfig, request_id: str, created: int, cached_tokens: int
    ) -> bytes:
        """The JSON answer of the non-streamed request (see `unencodable` first)."""
        request, quality = self.request, self.quality
        body = response_base(
            request, config=config, request_id=request_id, created=created, stream=False
        )
        scored = self._echoed(self.tokens)
        choice: dict[str, Any] = {"index": 0}
        if request.chat:
            reasoning = self._reasoning_tokens(config)
            content = "".join(token.text for token in self.tokens[reasoning:])
            message: dict[str, Any] = {
                "role": "assistant",
                "content": None if self.corruption is Corruption.REASONING_ONLY else content,
            }
            if reasoning:
                message["reasoning_content"] = "".join(t.text for t in self.tokens[:reasoning])
            choice["message"] = message
        else:
            choice["text"] = "".join(token.text for token in scored)
        choice["logprobs"] = self._logprobs(scored, 0)
        choice["finish_reason"] = self._finish(last=True)
        prompt_k = _prompt_logprobs_k(quality)
        if prompt_k is not None and not request.chat:
            choice["prompt_logprobs"] = prompt_logprobs(self.prompt, k=prompt_k)
        body["choices"] = [choice]
        if config.send_usage:
            body["usage"] = self._usage(config, cached_tokens)
        return orjson.dumps(body)

    def _reasoning_tokens(self, config: SimConfig) -> int:
        if not self.request.chat:
            return 0
        if self.corruption is Corruption.REASONING_ONLY:
            return self.request.max_tokens
        return min(config.reasoning_tokens, self.request.max_tokens)

    def _chunk_choice(
        self, start: int, end: int, reasoning: int, config: SimConfig, sent_chars: int, last: bool
    ) -> dict[str, Any]:
        tokens = self.tokens[start:end]
        finish = self._finish(last=last)
        if not self.request.chat:
            scored = self._echoed(tokens) if start == 0 else tokens
            choice = choice_chunk(False, "".join(token.text for token in scored), finish)
            choice["logprobs"] = self._logprobs(scored, sent_chars)
            return choice
        delta: dict[str, Any] = {}
        if start == 0 and not config.role_chunk:
            delta["role"] = "assistant"
        split = max(start, min(end, reasoning))
        if split > start:
            delta["reasoning_content"] = "".join(t.text for t in self.tokens[start:split])
        if end > split:
            delta["content"] = "".join(t.text for t in self.tokens[split:end])
        choice = choice_chunk(True, delta, finish)
        choice["logprobs"] = self._logprobs(tokens, sent_chars)
        return choice

    def _echoed(self, tokens: list[Scored]) -> list[Scored]:
        """Completions with echo: the prompt's tokens go first."""
        if self.request.chat or not self.quality.echo:
            return tokens
        return [*self.prompt, *tokens]

    def _logprobs(self, tokens: list[Scored], sent_chars: int) -> dict[str, Any] | None:
        k, as_ids = self.quality.logprobs, self.quality.token_ids_as_text
        if k is None:
            return None
        if self.request.chat:
            return chat_logprobs(tokens, k=k, as_ids=as_ids)
        return completion_logprobs(tokens, k=k, as_ids=as_ids, text_offset=sent_chars)

    def _finish(self, *, last: bool) -> str | None:
        if not last or self.corruption is Corruption.NO_FINISH_REASON:
            return None
        return FINISH_REASON

    def _usage(self, config: SimConfig, cached_tokens: int) -> dict[str, Any]:
        usage = usage_fields(self.request, config, cached_tokens)
        if self.corruption is Corruption.USAGE_OVERCOUNT:
            usage["completion_tokens"] *= 2
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return usage

    def _last_frame(
        self, base: dict[str, Any], choice: dict[str, Any], config: SimConfig, cached: int
    ) -> bytes:
        frame = sse_event(base, [choice])
        if self.request.include_usage and config.send_usage:
            frame += sse_event(base, [], usage=self._usage(config, cached))
        return frame + http_chunk(DONE_EVENT)


def plan_answer(request: GenerationRequest, *, corruption: Corruption, after_tokens: int) -> Answer:
    """The greedy answer to a quality-path request, with `corruption` planted in it."""
    quality = request.quality
    assert quality is not None
    prompt: list[Scored] = []
    if quality.echo or quality.prompt_logprobs is not None:
        dists, state = predictions(quality.prompt_ids)
        prompt = [
            Scored(token_id, _prompt_piece(quality, i), dists[i] if i else None)
            for i, token_id in enumerate(quality.prompt_ids)
        ]
    else:
        state = context_state(quality.prompt_ids)
    depart = after_tokens if corruption is Corruption.WRONG_TOKEN else -1
    nan_from = after_tokens if corruption is Corruption.NAN_LOGPROBS else request.max_tokens
    tokens: list[Scored] = []
    for i in range(request.max_tokens):
        dist = Distribution(state)
        token_id = dist.top(2)[1] if i == depart else dist.greedy()
        tokens.append(Scored(token_id, decode(token_id), dist, nan=i >= nan_from))
        state = advance(state, token_id)
    return Answer(request, quality, tokens, prompt, corruption)


def _prompt_piece(quality: QualityRequest, index: int) -> str:
    """A prompt token's text: its word (after a space but the first), else its decoding."""
    if quality.prompt_words is None:
        return decode(quality.prompt_ids[index])
    return (" " if index else "") + quality.prompt_words[index]


def _prompt_logprobs_k(quality: QualityRequest) -> int | None:
    """vLLM scores the prompt for prompt_logprobs, and for echo with the logprobs' k."""
    if quality.prompt_logprobs is not None:
        return quality.prompt_logprobs
    return quality.logprobs if quality.echo else None
