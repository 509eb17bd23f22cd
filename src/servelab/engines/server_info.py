"""What the engine says about its own settings: /v1/models' context length, SGLang's args.

Read once, at the bench's preflight, so a run records the limits the engine resolved (its
defaults filled in) beside what was asked for, each with the URL it came from. Every GET
is best effort: HTTP 404 means the engine has no such endpoint (`absent`); anything else
that stops a read (refused, timed out, another status, a body that is not the expected
JSON) is `unavailable` with its reason. Neither stops the run.

What the engines answer (read from their sources):

- vLLM, `GET /v1/models`: a `ModelList` whose `data` holds one `ModelCard` per model
  (`id`, `root`, `parent`, `max_model_len`, ...; vllm/entrypoints/openai/engine/protocol.py).
  A base model's card carries the engine's `model_config.max_model_len`; a LoRA adapter's
  has none (vllm/entrypoints/openai/models/serving.py).
- SGLang, `GET /v1/models`: the same card, `max_model_len` being the model's context
  length. `GET /server_info` (named `/get_server_info` before; newer releases keep that as
  a deprecated alias) returns one flat object: every `ServerArgs` field, the scheduler's
  limits (`max_total_num_tokens`, `max_req_input_len`, `status`), `internal_states` (one
  copy of the args per data-parallel rank, with live counters) and `version`
  (python/sglang/srt/entrypoints/http_server.py). vLLM's development-mode `/server_info`
  (`{"vllm_config": ...}`) is not SGLang's and is recorded as unavailable.
"""

from __future__ import annotations

from typing import Any, Literal

import aiohttp
import orjson
from pydantic import BaseModel, ConfigDict, Field

from servelab.core.redact import redact_document, redact_url

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MODELS_PATH",
    "SERVER_INFO_PATHS",
    "EndpointRead",
    "ReadOutcome",
    "ServerInfo",
    "endpoint_read",
    "read_server_info",
]

MODELS_PATH = "/v1/models"
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")
"""SGLang's name for it now, then its old one: the old one is asked only when the new one is
absent (an SGLang from before the rename)."""
DEFAULT_TIMEOUT_S = 10.0
"""Per GET: an engine slow to describe itself must not hold the run's start for long."""
_SGLANG_KEYS = ("model_path", "tp_size")
"""ServerArgs fields every SGLang release has had: an object without them is not its."""
_PER_RANK_KEY = "internal_states"

ReadOutcome = Literal["read", "absent", "unavailable"]


class EndpointRead(BaseModel):
    """One GET and what came of it."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="The URL asked (a password in it masked).")
    outcome: ReadOutcome = Field(
        description="read; absent (HTTP 404: the engine has no such endpoint); unavailable "
        "(any other failure, see reason)."
    )
    reason: str | None = Field(default=None, description="Why it is unavailable; else None.")


class ServerInfo(BaseModel):
    """The settings the engine reported about itself at the bench's preflight."""

    model_config = ConfigDict(extra="forbid")

    models: EndpointRead = Field(description="GET /v1/models.")
    max_model_len: dict[str, int | None] = Field(
        default_factory=dict,
        description="Each model card's max_model_len (the context length it serves, in "
        "tokens), by model id; None on a card without one (a vLLM LoRA adapter's).",
    )
    server_args_reads: list[EndpointRead] = Field(
        default_factory=list,
        description="GET /server_info, then /get_server_info where the first was absent.",
    )
    server_args: dict[str, Any] = Field(
        default_factory=dict,
        description="SGLang's server args as its server-info endpoint gave them, with the "
        "scheduler's limits and version; internal_states (per-rank copies) left out, "
        "secret values masked. Empty when no endpoint gave them.",
    )

    @property
    def server_args_url(self) -> str | None:
        """The URL server_args was read from; None when none gave them."""
        return next((r.url for r in self.server_args_reads if r.outcome == "read"), None)


async def read_server_info(
    base_url: str,
    session: aiohttp.ClientSession,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    models_read: tuple[EndpointRead, Any] | None = None,
) -> ServerInfo:
    """GET /v1/models and SGLang's server-info endpoint at `base_url`; never raises for what
    the server does (each failure is an `EndpointRead` with its reason). `models_read` is a
    GET /v1/models the caller already made (its read and parsed body), not asked again."""
    root = base_url.rstrip("/")
    models, body = models_read or await _get_json(session, root + MODELS_PATH, timeout_s)
    lengths = _max_model_len(body) if body is not None else None
    if body is not None and lengths is None:
        models = _unavailable(models.url, "not a model list (no data array of model cards)")
    reads: list[EndpointRead] = []
    args: dict[str, Any] = {}
    for path in SERVER_INFO_PATHS:
        read, body = await _get_json(session, root + path, timeout_s)
        if body is not None:
            found = _server_args(body)
            if found is None:
                keys = " and ".join(_SGLANG_KEYS)
                read = _unavailable(read.url, f"not SGLang's server info (no {keys})")
            else:
                args = found
        reads.append(read)
        if read.outcome != "absent":
            break
    return ServerInfo(
        models=models, max_model_len=lengths or {}, server_args_reads=reads, server_args=args
    )


async def _get_json(
    session: aiohttp.ClientSession, url: str, timeout_s: float
) -> tuple[EndpointRead, Any]:
    """The read and the parsed body (None unless it was read)."""
    shown = redact_url(url)
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            status, payload = response.status, await response.read()
    except TimeoutError:
        return _unavailable(shown, f"no answer within {timeout_s:g} s"), None
    except aiohttp.ClientError as exc:
        return _unavailable(shown, f"{type(exc).__name__}: {exc}"), None
    read = endpoint_read(url, status)
    if read.outcome != "read":
        return read, None
    try:
        body = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return _unavailable(shown, "the body is not JSON"), None
    return read, body


def _unavailable(url: str, reason: str) -> EndpointRead:
    return EndpointRead(url=url, outcome="unavailable", reason=reason)


def endpoint_read(url: str, status: int) -> EndpointRead:
    """What a GET of `url` that answered `status` was: read, absent (404) or unavailable."""
    shown = redact_url(url)
    if status == 404:
        return EndpointRead(url=shown, outcome="absent")
    if status != 200:
        return _unavailable(shown, f"HTTP {status}")
    return EndpointRead(url=shown, outcome="read")


def _max_model_len(body: Any) -> dict[str, int | None] | None:
    """Each card's max_model_len by id; None when the body is not a model list."""
    cards = body.get("data") if isinstance(body, dict) else None
    if not isinstance(cards, list):
        return None
    lengths: dict[str, int | None] = {}
    for card in cards:
        if isinstance(card, dict) and isinstance(card.get("id"), str):
            value = card.get("max_model_len")
            ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
            lengths[card["id"]] = value if ok else None
    return lengths


def _server_args(body: Any) -> dict[str, Any] | None:
    """SGLang's args without the per-rank copies, secrets masked; None when not SGLang's."""
    if not isinstance(body, dict) or not all(key in body for key in _SGLANG_KEYS):
        return None
    args = {key: value for key, value in body.items() if key != _PER_RANK_KEY}
    masked: dict[str, Any] = redact_document(args)
    return masked
