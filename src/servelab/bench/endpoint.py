"""How to talk to one OpenAI-compatible endpoint: the settings every worker shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = [
    "DEFAULT_STALL_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "Api",
    "EndpointConfig",
    "RequestItem",
    "build_body",
]

DEFAULT_TIMEOUT_S = 600.0
DEFAULT_STALL_TIMEOUT_S = 60.0


class Api(StrEnum):
    CHAT = "chat"
    COMPLETIONS = "completions"

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self is Api.CHAT else "/v1/completions"


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    """Target and request shape; picklable so worker processes receive it whole."""

    base_url: str
    model: str
    api: Api = Api.CHAT
    stream: bool = True
    headers: dict[str, str] = field(default_factory=dict)
    pinning_fields: frozenset[str] = frozenset()
    """Output-length fields the endpoint accepts (ignore_eos, min_tokens)."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_S
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S
    tokenizer_path: str | None = None
    """A local tokenizer.json, to count output tokens when the server sends no usage."""

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + self.api.path


@dataclass(frozen=True, slots=True)
class RequestItem:
    """One request of a workload: its prompt and how many tokens it asks for."""

    prompt: str
    max_tokens: int
    input_tokens: int | None = None
    """Prompt tokens, when they could be counted or calibrated."""
    shared_tokens: int = 0
    """Leading prompt tokens that repeat the prompt of a request sent before it in this
    workload: what a prefix cache of unbounded size could hit (before block alignment)."""
    messages: tuple[tuple[str, str], ...] | None = None
    """A conversation's history and new turn as (role, content); None for one prompt."""


def build_body(endpoint: EndpointConfig, item: RequestItem) -> dict[str, Any]:
    """The JSON body for one request: usage asked for, pinning fields only where accepted."""
    body: dict[str, Any] = {"model": endpoint.model, "max_tokens": item.max_tokens}
    turns = item.messages if item.messages is not None else (("user", item.prompt),)
    if endpoint.api is Api.CHAT:
        body["messages"] = [{"role": role, "content": content} for role, content in turns]
    else:
        body["prompt"] = "\n\n".join(content for _, content in turns)
    if endpoint.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if "ignore_eos" in endpoint.pinning_fields:
        body["ignore_eos"] = True
    if "min_tokens" in endpoint.pinning_fields:
        body["min_tokens"] = item.max_tokens
    body.update(endpoint.extra_body)
    return body
