"""One pass over the probe set against an OpenAI-compatible endpoint, at temperature 0.

A pass is an async method, so a caller can run it beside its own load (the loaded pass)
as one more task on its loop. It never raises for a bad answer: an HTTP error, a cut
connection or an answer that is not one is a reading with its quality error. aiohttp
carries it: a pass is a few dozen requests, and the bench's own transport is built for
thousands of streams, not for the JSON bodies and the /tokenize calls a pass needs.

What each engine is asked (docs/QUALITY.md "Wire formats"):
- free-running: a stream with usage; `logprobs` (TOP_LOGPROBS on completions, true with
  `top_logprobs: TOP_LOGPROBS` on chat, so the not_greedy check sees each position's
  best) except on transformers serve, which rejects it; vLLM also
  `return_tokens_as_token_ids`, so the tokens come back as exact ids. A 400 to the first
  request that asks for logprobs, whose error mentions them, turns them off for the
  client, with the reason; another 400 (a context overflow) is that probe's http error.
- neutral sampling (NEUTRAL_SAMPLING): to vLLM and SGLang, which apply the model's
  generation_config.json (a repetition_penalty, a top_k) under a request's own fields and
  report logprobs from before those penalties, every sampling field at its no-op value;
  to other OpenAI endpoints only the penalties OpenAI itself accepts, at 0.
- prefix cache: each pass's vLLM requests carry their own `cache_salt`
  (`servelab-quality-<run>-<pass>`, forced sets `...-<pass>-forced<i>`), so a pass that
  resends the before pass's prompts prefills them cold, as before did. SGLang has no
  salt: quality.json says so (bench.quality.session).
- teacher-forced, given a reference pass: vLLM `prompt_logprobs` on the prompt's ids (its
  /tokenize) followed by the reference's ids; SGLang's /generate with `input_ids`,
  `return_logprob`, `logprob_start_len`; other OpenAI endpoints `echo` with `logprobs`
  on the prompt text followed by the reference's text. A 400 to the first one whose
  error mentions logprobs, prompt_logprobs or echo turns teacher forcing off for the
  client, with the reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp

from servelab.bench.endpoint import Api
from servelab.bench.quality.greedy import TOP_LOGPROBS
from servelab.bench.quality.probes import Probe
from servelab.bench.quality.results import (
    EngineName,
    ForcedMethod,
    ForcedReading,
    ForcedSet,
    ProbeReading,
    QualityErrorKind,
    QualityPass,
)
from servelab.bench.quality.wire import (
    Answer,
    ForcedParse,
    Malformed,
    loads,
    parse_echo,
    parse_prompt_logprobs,
    parse_sglang_generate,
)
from servelab.bench.sse import SSEDecoder

__all__ = [
    "CACHE_SALT_DIALECTS",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_TIMEOUT_S",
    "FORCED_METHODS",
    "NEUTRAL_SAMPLING",
    "QualityClient",
    "QualityTarget",
    "cache_salt",
]

DEFAULT_CONCURRENCY = 4
"""Probe requests in flight at most: a pass alone stays near batch 1-4, so 'before' and
'after' measure the engine unloaded."""
DEFAULT_TIMEOUT_S = 120.0
"""Per request; a probe asks for at most 64 tokens."""
FORCED_METHODS: dict[EngineName, ForcedMethod | None] = {
    "vllm": "prompt_logprobs",
    "sglang": "sglang_generate",
    "openai": "echo",
    "transformers": None,
}
_ALL_SAMPLING_OFF: dict[str, float | int] = {
    "top_p": 1,
    "top_k": -1,
    "min_p": 0,
    "repetition_penalty": 1.0,
    "frequency_penalty": 0,
    "presence_penalty": 0,
}
"""vLLM and SGLang take the same names for every sampling setting a model's
generation_config.json may turn on."""
NEUTRAL_SAMPLING: dict[EngineName, dict[str, float | int]] = {
    "vllm": _ALL_SAMPLING_OFF,
    "sglang": _ALL_SAMPLING_OFF,
    "openai": {"frequency_penalty": 0, "presence_penalty": 0},
    "transformers": {},
}
"""Sampling fields sent beside `temperature: 0` on free-running requests. vLLM (its
default `--generation-config auto`) and SGLang apply the model's generation_config.json
where a request leaves a field out, and vLLM reports logprobs from before the penalties:
a repetition_penalty of 1.05 would make a healthy engine emit tokens below its own
reported best (not_greedy). Names as vLLM's CompletionRequest and ChatCompletionRequest
and SGLang's take them; top_k -1 and 0 both mean off in both."""
CACHE_SALT_DIALECTS: frozenset[EngineName] = frozenset(("vllm",))
"""Dialects that take `cache_salt` (vLLM's CompletionRequest and ChatCompletionRequest)."""
_SALT_MAX_CHARS = 128
_SALT_FORBIDDEN = frozenset("@/\\\x00")
"""vLLM's validate_cache_salt: at most 128 characters, none of '@', '/', '\\', NUL."""
_ERROR_CHARS = 300
_ERROR_BODY_CHARS = 4000
_LOGPROBS_WORDS = ("logprob",)
_FORCED_WORDS = ("logprob", "echo")
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True, kw_only=True)
class QualityTarget:
    """Where the passes go and which wire dialect to speak for logprobs."""

    base_url: str
    model: str
    engine: EngineName = "openai"
    api: Api | None = None
    """None: chat for transformers serve (it serves no /v1/completions), else completions."""
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_S
    run_id: str | None = None
    """Names the run in each pass's cache_salt; None: a random id per client."""

    @property
    def chat(self) -> bool:
        return (self.api or (Api.CHAT if self.engine == "transformers" else Api.COMPLETIONS)) is (
            Api.CHAT
        )

    def url(self, path: str) -> str:
        return self.base_url.rstrip("/") + path


class _Failed(Exception):
    """A request that ended in a quality error (kind, message, HTTP status)."""

    def __init__(
        self, kind: QualityErrorKind, message: str, status: int | None = None, body: str = ""
    ) -> None:
        super().__init__(message)
        self.kind: QualityErrorKind = kind
        self.status = status
        self.body = body

    def refuses(self, words: Sequence[str]) -> bool:
        """A 400 whose error message (not an echo of the request) names one of `words`."""
        if self.status != 400:
            return False
        said = _error_message(self.body).lower()
        return any(word in said for word in words)


class QualityClient:
    """Passes against one endpoint; remembers what the engine refused across passes.

    Use as `async with QualityClient(target) as client: await client.run_pass(...)`.
    """

    def __init__(self, target: QualityTarget) -> None:
        self.target = target
        self.logprobs_available = target.engine != "transformers"
        self.logprobs_reason: str | None = (
            None if self.logprobs_available else "transformers serve rejects `logprobs`"
        )
        self.forced_method: ForcedMethod | None = FORCED_METHODS[target.engine]
        self.forced_reason: str | None = None
        if self.forced_method is None:
            self.forced_reason = "no teacher forcing without logprobs"
        elif target.chat and self.forced_method != "prompt_logprobs":
            self.forced_method = None
            self.forced_reason = (
                f"{target.engine}: teacher forcing needs the completions prompt; chat "
                "probes are scored only on vLLM (its /tokenize applies the chat template)"
            )
        self._logprobs_checked = not self.logprobs_available
        self._forced_checked = self.forced_method is None
        self._prompt_ids: dict[str, list[int]] = {}
        self._run_id = target.run_id or uuid.uuid4().hex[:12]
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> QualityClient:
        timeout = aiohttp.ClientTimeout(total=self.target.timeout_s)
        self._session = aiohttp.ClientSession(headers=self.target.headers, timeout=timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def run_pass(
        self,
        probes: Sequence[Probe],
        *,
        name: str,
        concurrency: int = DEFAULT_CONCURRENCY,
        forced_on: Mapping[str, QualityPass] | None = None,
        force_own: bool = True,
        loaded: bool = False,
    ) -> QualityPass:
        """Greedy answers to every probe, then teacher-forced readings.

        `forced_on` maps a label ('before', '<run>:before') to a reference pass whose
        continuations this engine scores; `force_own` adds this pass's own continuations
        under its own name (a pass that is itself a reference needs them).
        """
        limit = asyncio.Semaphore(max(concurrency, 1))
        t0 = time.perf_counter()
        readings = await self._first_then_rest(
            probes, lambda p: self._free(p, name), limit, lambda: self._logprobs_checked
        )
        own = QualityPass(
            name=name,
            concurrency=concurrency,
            loaded=loaded,
            wall_s=0.0,
            readings=readings,
        )
        references = dict(forced_on or {})
        if force_own:
            references[name] = own
        forced: list[ForcedSet] = []
        for index, (label, reference) in enumerate(references.items()):
            if self.forced_method is None:
                break
            salt = f"{name}-forced{index}"
            forced_set = await self._forced_set(probes, label, reference, limit, salt)
            if forced_set is not None:
                forced.append(forced_set)
        errors = Counter(r.error_kind for r in readings if r.error_kind is not None)
        for forced_set in forced:
            errors.update(r.error_kind for r in forced_set.readings if r.error_kind is not None)
        return own.model_copy(
            update={
                "wall_s": time.perf_counter() - t0,
                "forced": forced,
                "errors": dict(sorted(errors.items())),
            }
        )

    # Free-running.

    async def _free(self, probe: Probe, pass_name: str) -> ProbeReading:
        t0 = time.perf_counter()
        ask = self.logprobs_available
        try:
            body = self._free_body(probe, logprobs=ask, pass_name=pass_name)
            answer = await self._stream(body, probe, pass_name)
        except _Failed as exc:
            if ask and not self._logprobs_checked and exc.refuses(_LOGPROBS_WORDS):
                self.logprobs_available = False
                self.logprobs_reason = f"HTTP 400 to a request with logprobs: {exc}"
                self._logprobs_checked = True
                return await self._free(probe, pass_name)
            self._logprobs_checked = True
            return _failed_reading(probe.id, exc, t0)
        self._logprobs_checked = True
        if ask and not answer.saw_logprobs and answer.texts:
            self.logprobs_available = False
            self.logprobs_reason = "the server answered a request for logprobs without them"
        return answer.reading(probe.id, (time.perf_counter() - t0) * 1e3)

    def _free_body(self, probe: Probe, *, logprobs: bool, pass_name: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.target.model,
            "max_tokens": probe.max_tokens,
            "temperature": 0,
            **NEUTRAL_SAMPLING[self.target.engine],
            "stream": True,
            "stream_options": {"include_usage": True},
            **self._salted(pass_name),
        }
        if self.target.chat:
            body["messages"] = [{"role": "user", "content": probe.prompt}]
        else:
            body["prompt"] = probe.prompt
        if logprobs:
            if self.target.chat:
                body |= {"logprobs": True, "top_logprobs": TOP_LOGPROBS}
            else:
                body["logprobs"] = TOP_LOGPROBS
            if self.target.engine == "vllm":
                body["return_tokens_as_token_ids"] = True
        return body

    async def _stream(self, body: dict[str, Any], probe: Probe, pass_name: str) -> Answer:
        path = "/v1/chat/completions" if self.target.chat else "/v1/completions"
        answer = Answer(chat=self.target.chat)
        decoder = SSEDecoder()
        headers = {"X-Request-Id": f"servelab-quality-{pass_name}-{probe.id}"}
        async with self._request(path, body, headers) as response:
            await _check_status(response)
            try:
                async for chunk in response.content.iter_any():
                    for payload in decoder.feed(chunk):
                        answer.take_event(payload)
                for payload in decoder.close():
                    answer.take_event(payload)
            except Malformed as exc:
                raise _Failed("malformed", str(exc)) from None
        return answer

    # Teacher-forced.

    async def _forced_set(
        self,
        probes: Sequence[Probe],
        label: str,
        reference: QualityPass,
        limit: asyncio.Semaphore,
        salt: str,
    ) -> ForcedSet | None:
        by_id = {r.probe_id: r for r in reference.readings}
        t0 = time.perf_counter()
        readings = await self._first_then_rest(
            probes,
            lambda p: self._forced(p, by_id.get(p.id), salt),
            limit,
            lambda: self._forced_checked,
        )
        if self.forced_method is None:
            return None
        return ForcedSet(
            on=label,
            method=self.forced_method,
            readings=readings,
            wall_s=time.perf_counter() - t0,
        )

    async def _forced(
        self, probe: Probe, reference: ProbeReading | None, salt: str
    ) -> ForcedReading:
        method = self.forced_method
        if reference is None or not reference.ok:
            return ForcedReading(probe_id=probe.id, ok=True, note="no usable reference answer")
        if method is None:
            return ForcedReading(probe_id=probe.id, ok=True, note=self.forced_reason)
        try:
            if method == "echo":
                parsed = await self._echo(probe, reference, salt)
            else:
                parsed = await self._by_ids(probe, reference, method, salt)
        except _Failed as exc:
            if not self._forced_checked and exc.refuses(_FORCED_WORDS):
                self.forced_method = None
                self.forced_reason = f"HTTP 400 to a teacher-forced request: {exc}"
                self._forced_checked = True
                return ForcedReading(probe_id=probe.id, ok=True, note=self.forced_reason)
            self._forced_checked = True
            return ForcedReading(probe_id=probe.id, ok=False, error_kind=exc.kind, error=str(exc))
        except Malformed as exc:
            self._forced_checked = True
            return ForcedReading(
                probe_id=probe.id, ok=False, error_kind="malformed", error=str(exc)
            )
        self._forced_checked = True
        if isinstance(parsed, str):
            return ForcedReading(probe_id=probe.id, ok=True, note=parsed)
        bad = [i for i, v in enumerate(parsed.logprobs) if not math.isfinite(v)]
        return ForcedReading(
            probe_id=probe.id,
            ok=not bad,
            error_kind="nan_logprob" if bad else None,
            error=f"{len(bad)} non-finite forced logprobs, first at token {bad[0]}"
            if bad
            else None,
            logprobs=parsed.logprobs,
            top1=parsed.top1,
        )

    async def _by_ids(
        self, probe: Probe, reference: ProbeReading, method: ForcedMethod, salt: str
    ) -> ForcedParse | str:
        """vLLM prompt_logprobs or SGLang /generate over prompt ids + reference ids."""
        continuation = reference.token_ids
        if continuation is None:
            continuation = await self._tokenize({"prompt": reference.text}, special=False)
            if len(continuation) != len(reference.tokens):
                return (
                    f"the reference's {len(reference.tokens)} tokens re-tokenize to "
                    f"{len(continuation)}"
                )
        if not continuation:
            return ForcedParse([], [])
        prompt = await self._probe_ids(probe)
        if method == "prompt_logprobs":
            body: dict[str, Any] = {
                "model": self.target.model,
                "prompt": prompt + continuation,
                "max_tokens": 1,
                "temperature": 0,
                "prompt_logprobs": 1,
                **self._salted(salt),
            }
            return parse_prompt_logprobs(await self._json("/v1/completions", body), continuation)
        body = {
            "input_ids": prompt + continuation,
            "sampling_params": {"max_new_tokens": 1, "temperature": 0},
            "return_logprob": True,
            "logprob_start_len": max(len(prompt) - 1, 0),
            "top_logprobs_num": 1,
        }
        return parse_sglang_generate(await self._json("/generate", body), continuation)

    async def _echo(self, probe: Probe, reference: ProbeReading, salt: str) -> ForcedParse | str:
        """echo + logprobs over the prompt text followed by the reference's text."""
        if not reference.text:
            return ForcedParse([], [])
        body = {
            "model": self.target.model,
            "prompt": probe.prompt + reference.text,
            "max_tokens": 1,
            "temperature": 0,
            "echo": True,
            "logprobs": 1,
            **self._salted(salt),
        }
        parsed = parse_echo(
            await self._json("/v1/completions", body),
            prompt_chars=len(probe.prompt),
            continuation_chars=len(reference.text),
        )
        same = (
            parsed.tokens == reference.tokens
            if reference.token_source == "logprobs"
            else len(parsed.logprobs) == len(reference.tokens)
        )
        if reference.token_source != "chunks" and not same:
            return (
                f"the reference's {len(reference.tokens)} tokens echo back as "
                f"{len(parsed.logprobs)} other tokens"
            )
        return parsed

    async def _probe_ids(self, probe: Probe) -> list[int]:
        """The prompt's ids as the engine tokenizes its free-running request."""
        if probe.id not in self._prompt_ids:
            if self.target.chat:
                request = {
                    "messages": [{"role": "user", "content": probe.prompt}],
                    "add_generation_prompt": True,
                }
                self._prompt_ids[probe.id] = await self._tokenize(request, special=None)
            else:
                self._prompt_ids[probe.id] = await self._tokenize(
                    {"prompt": probe.prompt}, special=True
                )
        return self._prompt_ids[probe.id]

    async def _tokenize(self, request: dict[str, Any], *, special: bool | None) -> list[int]:
        body = {"model": self.target.model, **request}
        if special is not None:
            body["add_special_tokens"] = special
        answer = await self._json("/tokenize", body)
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise _Failed("malformed", "/tokenize answered without a list of token ids")
        return tokens

    def _salted(self, scope: str) -> dict[str, str]:
        """`cache_salt` for one pass (or forced set) where the dialect takes it."""
        if self.target.engine not in CACHE_SALT_DIALECTS:
            return {}
        return {"cache_salt": cache_salt(self._run_id, scope)}

    # HTTP.

    def _request(
        self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> _Exchange:
        if self._session is None:
            raise RuntimeError("QualityClient is used outside `async with`")
        return _Exchange(self._session, self.target.url(path), body, headers or {})

    async def _json(self, path: str, body: dict[str, Any]) -> Any:
        async with self._request(path, body) as response:
            await _check_status(response)
            try:
                return loads(await response.read())
            except Malformed as exc:
                raise _Failed("malformed", f"{path}: {exc}") from None

    async def _first_then_rest(
        self,
        probes: Sequence[Probe],
        one: Callable[[Probe], Awaitable[_T]],
        limit: asyncio.Semaphore,
        checked: Callable[[], bool],
    ) -> list[_T]:
        """Send probes one by one until the engine has shown what it accepts, then fan out."""
        results: list[_T] = []
        index = 0
        while index < len(probes) and not checked():
            results.append(await one(probes[index]))
            index += 1

        async def bounded(probe: Probe) -> _T:
            async with limit:
                return await one(probe)

        results.extend(await asyncio.gather(*(bounded(p) for p in probes[index:])))
        return results


class _Exchange:
    """One POST, with aiohttp's and the clock's failures turned into `_Failed`."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        body: dict[str, Any],
        headers: dict[str, str],
    ) -> None:
        self._call = session.post(url, json=body, headers=headers)
        self._response: aiohttp.ClientResponse | None = None

    async def __aenter__(self) -> aiohttp.ClientResponse:
        try:
            self._response = await self._call.__aenter__()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise _Failed("transport", _describe(exc)) from None
        return self._response

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self._call.__aexit__(None, None, None)
        if isinstance(exc, aiohttp.ClientError | TimeoutError | OSError):
            raise _Failed("transport", _describe(exc)) from None


def cache_salt(run_id: str, scope: str) -> str:
    """'servelab-quality-<run>-<scope>' as vLLM takes it: its forbidden characters made
    '-', and a name too long cut with a digest of the whole, so it stays unique."""
    salt = "".join("-" if c in _SALT_FORBIDDEN else c for c in f"servelab-quality-{run_id}-{scope}")
    if len(salt) <= _SALT_MAX_CHARS:
        return salt
    digest = hashlib.sha256(salt.encode()).hexdigest()[:16]
    return f"{salt[: _SALT_MAX_CHARS - len(digest) - 1]}-{digest}"


async def _check_status(response: aiohttp.ClientResponse) -> None:
    if response.status >= 300:
        text = (await response.read()).decode("utf-8", "replace")
        raise _Failed(
            "http",
            f"HTTP {response.status}: {text[:_ERROR_CHARS]}",
            response.status,
            text[:_ERROR_BODY_CHARS],
        )


def _error_message(body: str) -> str:
    """The messages of an error body, without any echo of the request (pydantic's
    `input`, which would name every field sent); the raw text where it is not JSON."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body
    said: list[str] = []

    def walk(node: object, key: str = "") -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k != "input":
                    walk(v, k)
        elif isinstance(node, list):
            for item in node:
                walk(item, key)
        elif isinstance(node, str) and key in ("message", "msg", "detail", "error", "param"):
            said.append(node)
        elif key == "loc" and node is not None:
            said.append(str(node))

    walk(parsed)
    return " ".join(said)


def _failed_reading(probe_id: str, exc: _Failed, t0: float) -> ProbeReading:
    return ProbeReading(
        probe_id=probe_id,
        ok=False,
        error_kind=exc.kind,
        error=str(exc),
        latency_ms=(time.perf_counter() - t0) * 1e3,
    )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
