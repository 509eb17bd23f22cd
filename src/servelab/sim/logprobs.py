"""Logprobs in vLLM's wire shapes, from the token model's distributions.

Each scored token is a `Scored`: its id, its text and the distribution it was drawn from
(None for a prompt's first token, which nothing predicts). Its candidates are vLLM's
`dict[int, Logprob]` in order: the token itself first, then the top ids without it, so
`k` top logprobs give k or k + 1 candidates. From those:

- completions (`logprobs: k`): `{"text_offset", "token_logprobs", "tokens",
  "top_logprobs"}`, top_logprobs a `{token: logprob}` of every candidate (vLLM's
  `_create_completion_logprobs`); text_offset starts at the text already sent and grows
  by each token's rendered length, as vLLM's does;
- chat (`logprobs: true, top_logprobs: k`): `{"content": [{"token", "logprob", "bytes",
  "top_logprobs": [{"token", "logprob", "bytes"}]}]}`, top_logprobs the first k
  candidates (vLLM's `_get_top_logprobs`);
- `prompt_logprobs: k`: `[null, {"<id>": {"logprob", "rank", "decoded_token"}}, ...]`.

`as_ids` (vLLM's return_tokens_as_token_ids) writes tokens as `token_id:<id>`. A
token marked `nan` has NaN logprobs (planted corruption); orjson writes them as null.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servelab.sim.tokenmodel import Distribution, decode

__all__ = ["Scored", "chat_logprobs", "completion_logprobs", "prompt_logprobs"]

_NAN = float("nan")


@dataclass(frozen=True, slots=True)
class Scored:
    """One token with the distribution it was drawn from."""

    token_id: int
    text: str
    dist: Distribution | None
    nan: bool = False

    def logprob(self, token_id: int) -> float:
        """A candidate's logprob at this position (NaN when corrupted)."""
        assert self.dist is not None
        return _NAN if self.nan else self.dist.logprob(token_id)

    def candidates(self, k: int) -> list[tuple[int, str]]:
        """vLLM's order: this token, then the top `k` without it; (id, text) pairs."""
        assert self.dist is not None
        others = [(i, decode(i)) for i in self.dist.top(k) if i != self.token_id]
        return [(self.token_id, self.text), *others]


def completion_logprobs(
    tokens: list[Scored], *, k: int, as_ids: bool, text_offset: int
) -> dict[str, Any]:
    """/v1/completions' logprobs object for these tokens."""
    offsets: list[int] = []
    token_logprobs: list[float | None] = []
    rendered: list[str] = []
    top: list[dict[str, float] | None] = []
    for token in tokens:
        text = _render(token.token_id, token.text, as_ids)
        offsets.append(text_offset)
        text_offset += len(text)
        rendered.append(text)
        if token.dist is None:
            token_logprobs.append(None)
            top.append(None)
            continue
        token_logprobs.append(token.logprob(token.token_id))
        top.append({_render(i, t, as_ids): token.logprob(i) for i, t in token.candidates(k)})
    return {
        "text_offset": offsets,
        "token_logprobs": token_logprobs,
        "tokens": rendered,
        "top_logprobs": top,
    }


def chat_logprobs(tokens: list[Scored], *, k: int, as_ids: bool) -> dict[str, Any]:
    """/v1/chat/completions' logprobs object for these tokens."""
    content = []
    for token in tokens:
        entry = _chat_entry(token, token.token_id, token.text, as_ids)
        entry["top_logprobs"] = [
            _chat_entry(token, i, t, as_ids) for i, t in token.candidates(k)[:k]
        ]
        content.append(entry)
    return {"content": content}


def prompt_logprobs(tokens: list[Scored], *, k: int) -> list[dict[str, Any] | None]:
    """vLLM's choices[0].prompt_logprobs: null for the first token, then per token its
    candidates keyed by id."""
    out: list[dict[str, Any] | None] = []
    for token in tokens:
        dist = token.dist
        if dist is None:
            out.append(None)
            continue
        out.append(
            {
                str(i): {"logprob": dist.logprob(i), "rank": dist.rank(i), "decoded_token": t}
                for i, t in token.candidates(k)
            }
        )
    return out


def _chat_entry(token: Scored, token_id: int, text: str, as_ids: bool) -> dict[str, Any]:
    shown = _render(token_id, text, as_ids)
    return {"token": shown, "logprob": token.logprob(token_id), "bytes": list(shown.encode())}


def _render(token_id: int, text: str, as_ids: bool) -> str:
    return f"token_id:{token_id}" if as_ids else text
