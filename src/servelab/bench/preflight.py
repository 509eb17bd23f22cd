"""Before the first level: find the model, check the endpoint answers, learn what it accepts.

Every question is asked once, here, so the levels themselves send only requests the
endpoint takes: the model name (from /v1/models unless given), which output-pinning
fields it accepts (dropped once, with a note, when a 4xx names them), whether it serves
/tokenize, and, when nothing can count tokens, a calibration of tokens per word from
`usage.prompt_tokens`. It also reads what the engine reports about its own settings
(`engines.server_info`: context length, SGLang's server args), which the run records.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
import orjson

from servelab.bench.endpoint import EndpointConfig, RequestItem, build_body
from servelab.bench.tokens import Calibration
from servelab.bench.words import COMMON_WORDS
from servelab.core.errors import EndpointRejected, EndpointUnreachable
from servelab.engines.server_info import EndpointRead, ServerInfo, endpoint_read, read_server_info

__all__ = ["Preflight", "run_preflight"]

_PROBE_TIMEOUT_S = 60.0
_SERVER_ERROR_RETRIES = 5
_CALIBRATION_REPEATS = (1, 2)
"""The calibration prompts hold every common word once, then twice: their difference is the
pool's mean tokens per word, which is what random prompts drawn from it average."""


@dataclass(frozen=True, slots=True)
class Preflight:
    """What the endpoint turned out to be."""

    endpoint: EndpointConfig
    models: list[str]
    has_tokenize: bool
    calibration: Calibration | None
    server_info: ServerInfo
    notes: list[str] = field(default_factory=list)


def run_preflight(
    endpoint: EndpointConfig,
    *,
    try_fields: frozenset[str],
    probe_tokenize: bool,
    calibrate: bool,
) -> Preflight:
    """Resolve the model and accepted fields; `endpoint.model` may be empty (ask the server)."""
    return asyncio.run(_preflight(endpoint, try_fields, probe_tokenize, calibrate))


async def _preflight(
    endpoint: EndpointConfig, try_fields: frozenset[str], probe_tokenize: bool, calibrate: bool
) -> Preflight:
    timeout = aiohttp.ClientTimeout(
        total=min(endpoint.timeout_s, _PROBE_TIMEOUT_S), sock_read=endpoint.stall_timeout_s
    )
    notes: list[str] = []
    async with aiohttp.ClientSession(headers=endpoint.headers, timeout=timeout) as session:
        models, models_read = await _list_models(session, endpoint)
        if not endpoint.model:
            if not models:
                raise EndpointRejected(
                    "the endpoint lists no model; pass --model",
                    url=endpoint.base_url,
                    status=200,
                    body="",
                )
            endpoint = replace(endpoint, model=models[0])
        endpoint, dropped = await _accepted_fields(session, endpoint, try_fields)
        for name in sorted(dropped):
            notes.append(
                f"the endpoint rejected {name!r}; sent without it, so outputs may stop early "
                "at end-of-sequence instead of running to max_tokens"
            )
        has_tokenize = probe_tokenize and await _has_tokenize(session, endpoint)
        calibration = None
        if calibrate and not has_tokenize:
            calibration = await _calibrate(session, endpoint)
            if calibration is None:
                notes.append("no usage.prompt_tokens from the endpoint: input lengths unknown")
        server_info = await read_server_info(endpoint.base_url, session, models_read=models_read)
    return Preflight(endpoint, models, has_tokenize, calibration, server_info, notes)


async def _list_models(
    session: aiohttp.ClientSession, endpoint: EndpointConfig
) -> tuple[list[str], tuple[EndpointRead, Any]]:
    """The model ids, and the read and body the run's server info records (one GET)."""
    url = endpoint.base_url.rstrip("/") + "/v1/models"
    try:
        async with session.get(url) as response:
            if response.status >= 400:
                if endpoint.model:
                    return [], (endpoint_read(url, response.status), None)
                raise EndpointRejected(
                    f"GET /v1/models answered HTTP {response.status}; pass --model",
                    url=url,
                    status=response.status,
                    body=(await response.text())[:300],
                )
            data = await response.json(content_type=None)
    except (aiohttp.ClientConnectionError, TimeoutError) as exc:
        raise EndpointUnreachable(
            f"nothing answers at {endpoint.base_url}: {exc}", url=url
        ) from None
    except (aiohttp.ContentTypeError, ValueError):
        raise EndpointRejected(
            "GET /v1/models did not return JSON: is this an OpenAI-compatible server?",
            url=url,
            status=200,
            body="",
        ) from None
    entries = data.get("data", []) if isinstance(data, dict) else []
    ids = [e["id"] for e in entries if isinstance(e, dict) and "id" in e]
    return ids, (endpoint_read(url, 200), data)


async def _post(
    session: aiohttp.ClientSession, endpoint: EndpointConfig, body: dict
) -> tuple[int, bytes]:
    """POST, again after a 5xx, a timeout or a cut (a flaky server is measured, not refused)."""
    failure = ""
    last: tuple[int, bytes] | None = None
    for _ in range(_SERVER_ERROR_RETRIES):
        try:
            async with session.post(
                endpoint.url, data=orjson.dumps(body), headers={"Content-Type": "application/json"}
            ) as response:
                status, payload = response.status, await response.read()
        except aiohttp.ClientConnectorError as exc:
            raise EndpointUnreachable(
                f"cannot connect to {endpoint.url}: {exc.os_error or exc}", url=endpoint.url
            ) from None
        except TimeoutError:
            failure = f"no answer within {endpoint.stall_timeout_s:g} s"
            continue
        except aiohttp.ClientError as exc:
            failure = f"{type(exc).__name__}: {exc}"
            continue
        if status < 500:
            return status, payload
        last = (status, payload)
    if last is not None:
        return last
    raise EndpointUnreachable(
        f"{_SERVER_ERROR_RETRIES} test requests to {endpoint.url} failed: {failure}",
        url=endpoint.url,
    )


async def _accepted_fields(
    session: aiohttp.ClientSession, endpoint: EndpointConfig, try_fields: frozenset[str]
) -> tuple[EndpointConfig, set[str]]:
    """Send one short request with the fields; drop each one a 4xx names, once."""
    fields = set(try_fields)
    dropped: set[str] = set()
    probe = replace(endpoint, stream=False)
    while True:
        probe = replace(probe, pinning_fields=frozenset(fields))
        status, body = await _post(session, probe, build_body(probe, RequestItem("Hello", 1)))
        if status < 400:
            return replace(endpoint, pinning_fields=frozenset(fields)), dropped
        text = body.decode("utf-8", "replace")
        named = {f for f in fields if f in text} if 400 <= status < 500 else set()
        if not named:
            raise EndpointRejected(
                f"the endpoint rejected a test request: HTTP {status}: {text[:200]}",
                url=endpoint.url,
                status=status,
                body=text,
            )
        fields -= named
        dropped |= named


async def _has_tokenize(session: aiohttp.ClientSession, endpoint: EndpointConfig) -> bool:
    url = endpoint.base_url.rstrip("/") + "/tokenize"
    body = {"model": endpoint.model, "prompt": "hello world", "add_special_tokens": False}
    try:
        async with session.post(url, json=body) as response:
            if response.status >= 400:
                return False
            data = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return False
    return isinstance(data, dict) and ("count" in data or "tokens" in data)


async def _calibrate(
    session: aiohttp.ClientSession, endpoint: EndpointConfig
) -> Calibration | None:
    """Fit prompt_tokens = overhead + per_word * words from two probe prompts."""
    probe = replace(endpoint, stream=False)
    counts: list[int] = []
    for repeats in _CALIBRATION_REPEATS:
        words = " ".join(COMMON_WORDS * repeats)
        status, body = await _post(session, probe, build_body(probe, RequestItem(words, 1)))
        try:
            usage = orjson.loads(body).get("usage") if status < 400 else None
        except (orjson.JSONDecodeError, AttributeError):
            usage = None
        if not isinstance(usage, dict) or not isinstance(usage.get("prompt_tokens"), int):
            return None
        counts.append(usage["prompt_tokens"])
    (n1, n2), (p1, p2) = (len(COMMON_WORDS) * r for r in _CALIBRATION_REPEATS), counts
    per_word = (p2 - p1) / (n2 - n1)
    if per_word <= 0:
        return None
    return Calibration(overhead_tokens=p1 - per_word * n1, tokens_per_word=per_word)
