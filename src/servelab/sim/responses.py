"""Response bytes, encoded once per request so sending a chunk is one transport write.

A streamed answer is a list of frames, one per text chunk, each already framed as an
HTTP/1.1 chunk (`size\\r\\n data \\r\\n`) around an SSE event (`data: {json}\\n\\n`).
Chunks of one request differ only in a few shapes (reasoning or content, first, last),
so each shape is serialized once and the list holds references to it. This is the fast
path; answers on the quality path (logprobs, greedy text, corruption) are built by
`servelab.sim.greedy` from the same pieces.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from servelab import __version__
from servelab.sim.config import MAX_MODEL_LEN, SimConfig
from servelab.sim.parsing import OUTPUT_WORD, GenerationRequest

__all__ = [
    "DONE_EVENT",
    "FINISH_REASON",
    "MALFORMED_FRAME",
    "TOKEN_TEXT",
    "StreamBody",
    "choice_chunk",
    "completion_body",
    "http_chunk",
    "models_body",
    "n_chunks",
    "response_base",
    "server_error_body",
    "server_info_body",
    "sse_event",
    "stream_body",
    "usage_fields",
]

TOKEN_TEXT = " " + OUTPUT_WORD
"""Every output token; a leading space so tokens join into words."""
FINISH_REASON = "length"
"""Outputs always run to max_tokens, as if ignore_eos were set."""
DONE_EVENT = b"data: [DONE]\n\n"


def http_chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk of a chunked body."""
    return b"%x\r\n%b\r\n" % (len(payload), payload)


MALFORMED_FRAME = http_chunk(b'data: {"choices": [\n\n')
"""The broken event of the malformed fault: JSON cut short."""


@dataclass(frozen=True, slots=True)
class StreamBody:
    """A streamed answer: `head` goes out with the headers, `frames[k]` at chunk k's due time.

    The last frame also carries the usage event (when asked for) and `[DONE]`; when that
    usage reports cached prompt tokens (`SimConfig.cache_report`), `final` encodes the
    last frame again for the count the engine found, else it is None.
    """

    head: bytes
    frames: list[bytes]
    final: Callable[[int], bytes] | None = None


def n_chunks(max_tokens: int, tokens_per_chunk: int) -> int:
    """Text chunks needed for `max_tokens` tokens; the last may carry fewer."""
    return -(-max_tokens // tokens_per_chunk)


def stream_body(
    request: GenerationRequest, *, config: SimConfig, request_id: str, created: int
) -> StreamBody:
    """All frames of one streamed answer."""
    base = response_base(
        request, config=config, request_id=request_id, created=created, stream=True
    )
    reasoning = config.reasoning_tokens if request.chat else 0
    role_in_head = request.chat and config.role_chunk
    role_in_first = request.chat and not config.role_chunk
    head = b""
    if role_in_head:
        head = sse_event(base, [choice_chunk(True, {"role": "assistant"}, None)])
    count = n_chunks(request.max_tokens, config.tokens_per_chunk)
    encoded: dict[tuple[int, int, bool, bool], bytes] = {}

    def shape_of(k: int) -> tuple[int, int, bool, bool]:
        start = k * config.tokens_per_chunk
        end = min(request.max_tokens, start + config.tokens_per_chunk)
        n_reasoning = max(0, min(end, reasoning) - start)
        return (n_reasoning, end - start - n_reasoning, role_in_first and k == 0, k == count - 1)

    def frame(k: int) -> bytes:
        shape = shape_of(k)
        if shape not in encoded:
            encoded[shape] = _text_frame(base, request, config, shape, 0)
        return encoded[shape]

    # Only the first, the last and the chunk where reasoning turns to content differ from
    # their neighbours; the runs between them repeat one frame.
    frames: list[bytes] = []
    for special in sorted({0, min(reasoning // config.tokens_per_chunk, count - 1), count - 1}):
        if len(frames) < special:
            frames += [frame(len(frames))] * (special - len(frames))
        frames.append(frame(special))
    final: Callable[[int], bytes] | None = None
    if config.cache_report and request.include_usage and config.send_usage:
        final = functools.partial(_text_frame, base, request, config, shape_of(count - 1))
    return StreamBody(head=head, frames=frames, final=final)


def completion_body(
    request: GenerationRequest,
    *,
    config: SimConfig,
    request_id: str,
    created: int,
    cached_tokens: int = 0,
) -> bytes:
    """The JSON answer of a non-streaming request; `cached_tokens` are its prompt tokens
    the prefix cache supplied."""
    body = response_base(
        request, config=config, request_id=request_id, created=created, stream=False
    )
    reasoning = min(config.reasoning_tokens, request.max_tokens) if request.chat else 0
    if request.chat:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": TOKEN_TEXT * (request.max_tokens - reasoning),
        }
        if reasoning:
            message["reasoning_content"] = TOKEN_TEXT * reasoning
        choice: dict[str, Any] = {"index": 0, "message": message}
    else:
        choice = {"index": 0, "text": TOKEN_TEXT * request.max_tokens}
    choice |= {"logprobs": None, "finish_reason": FINISH_REASON}
    body["choices"] = [choice]
    if config.send_usage:
        body["usage"] = usage_fields(request, config, cached_tokens)
    return orjson.dumps(body)


def server_error_body() -> bytes:
    """The JSON body of the fail fault's HTTP 500."""
    error = {"message": "simulated server error", "type": "server_error", "code": 500}
    return orjson.dumps({"error": error})


def models_body(config: SimConfig, *, created: int) -> bytes:
    """GET /v1/models: the one model."""
    model = {
        "id": config.model,
        "object": "model",
        "created": created,
        "owned_by": "servelab",
        "max_model_len": MAX_MODEL_LEN,
    }
    return orjson.dumps({"object": "list", "data": [model]})


def server_info_body(config: SimConfig, *, kv_capacity_tokens: int | None) -> bytes:
    """GET /server_info (and /get_server_info), SGLang-style: the server args and scheduler
    limits servelab reads from SGLang's, with the simulator's values (None where SGLang's
    default is left unset); SGLang's other fields and its per-rank internal_states are not
    simulated."""
    info = {
        "model_path": config.model,
        "served_model_name": config.model,
        "tp_size": config.tp or 1,
        "pp_size": config.pp,
        "ep_size": config.ep,
        "dp_size": config.dp,
        "max_running_requests": config.max_running_requests,
        "chunked_prefill_size": config.chunked_prefill_size,
        "max_total_tokens": config.kv_capacity_tokens,
        "max_total_num_tokens": kv_capacity_tokens,
        "disable_radix_cache": not config.prefix_cache,
        "page_size": config.block_size,
        "enable_cache_report": config.cache_report,
        "status": "ready",
        "version": f"servelab-sim {__version__}",
    }
    return orjson.dumps(info)


def response_base(
    request: GenerationRequest, *, config: SimConfig, request_id: str, created: int, stream: bool
) -> dict[str, Any]:
    """The fields every answer and chunk of one request share: id, object, created, model."""
    if request.chat:
        response_id = f"chatcmpl-{request_id}"
        kind = "chat.completion.chunk" if stream else "chat.completion"
    else:
        response_id, kind = f"cmpl-{request_id}", "text_completion"
    return {"id": response_id, "object": kind, "created": created, "model": config.model}


def _text_frame(
    base: dict[str, Any],
    request: GenerationRequest,
    config: SimConfig,
    shape: tuple[int, int, bool, bool],
    cached_tokens: int,
) -> bytes:
    n_reasoning, n_content, with_role, last = shape
    finish = FINISH_REASON if last else None
    if request.chat:
        delta: dict[str, str] = {"role": "assistant"} if with_role else {}
        if n_reasoning:
            delta["reasoning_content"] = TOKEN_TEXT * n_reasoning
        if n_content:
            delta["content"] = TOKEN_TEXT * n_content
        choice = choice_chunk(True, delta, finish)
    else:
        choice = choice_chunk(False, TOKEN_TEXT * n_content, finish)
    frame = sse_event(base, [choice])
    if not last:
        return frame
    if request.include_usage and config.send_usage:
        frame += sse_event(base, [], usage=usage_fields(request, config, cached_tokens))
    return frame + http_chunk(DONE_EVENT)


def choice_chunk(chat: bool, delta: dict[str, Any] | str, finish: str | None) -> dict[str, Any]:
    """One streamed choice: a chat delta or a completion's text, without logprobs."""
    key = "delta" if chat else "text"
    return {"index": 0, key: delta, "logprobs": None, "finish_reason": finish}


def sse_event(base: dict[str, Any], choices: list[dict[str, Any]], **extra: Any) -> bytes:
    """One SSE event in one HTTP chunk; orjson writes a NaN as null, as pydantic does."""
    return http_chunk(b"data: " + orjson.dumps({**base, "choices": choices, **extra}) + b"\n\n")


def usage_fields(
    request: GenerationRequest, config: SimConfig, cached_tokens: int
) -> dict[str, Any]:
    """The usage object: every requested token is generated (no early stop)."""
    usage: dict[str, Any] = {
        "prompt_tokens": request.prompt_tokens,
        "completion_tokens": request.max_tokens,
        "total_tokens": request.prompt_tokens + request.max_tokens,
    }
    if config.cache_report:  # vLLM's and SGLang's shape: {"cached_tokens": N}
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return usage
