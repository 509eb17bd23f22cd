"""The simulator's HTTP surface: OpenAI-compatible routes on top of the engine.

Handlers only decide what to answer; an accepted answer is handed to the engine (an
`Admission`: fixed timing, or the batching `StepLoop`), which starts it now or once there
is room; its frames are then written at their due times while the handler waits for it
to end.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import orjson
from aiohttp import web

from servelab.core.clock import NS_PER_S, now_ns
from servelab.core.units import MS_PER_S
from servelab.sim.admission import Admission, FixedAdmission
from servelab.sim.batching import Batcher
from servelab.sim.blocks import RequestBlocks
from servelab.sim.config import (
    MAX_MODEL_LEN,
    UNBOUNDED_PREFIX_CACHE_TOKENS,
    MetricsStyle,
    SimConfig,
)
from servelab.sim.corruption import CorruptionPicker
from servelab.sim.faults import NO_FAULT, Fault, FaultPicker
from servelab.sim.greedy import UNENCODABLE_BODY, Answer, plan_answer
from servelab.sim.metrics import CONTENT_TYPE, EngineMetrics
from servelab.sim.parsing import (
    GenerationRequest,
    RequestError,
    parse_generation,
    parse_json,
    prompt_token_ids,
)
from servelab.sim.policy import policy_for
from servelab.sim.prefix_cache import PrefixCache
from servelab.sim.profiles import step_cost_for
from servelab.sim.responses import (
    completion_body,
    models_body,
    n_chunks,
    server_error_body,
    server_info_body,
    stream_body,
)
from servelab.sim.scheduler import RequestInfo, Scheduler, Stream
from servelab.sim.stats import SimCounters, SimStats
from servelab.sim.stepcost import ScaledStepCost, StepCost
from servelab.sim.steploop import StepLoop
from servelab.sim.timing import FixedTiming, TimedRequest, TimingSource
from servelab.sim.truth import Outcome, TruthLog

__all__ = ["REQUEST_ID_HEADER", "SimApp"]

REQUEST_ID_HEADER = "X-Request-Id"
MAX_BODY_BYTES = 64 * 1024 * 1024
"""Long prompts are a legitimate workload; aiohttp's 1 MiB default is not enough."""
_SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


class SimApp:
    """One process's simulator: routes, fault picker, engine, counters, truth log.

    `timing` replaces the fixed ttft/itl schedule the config describes; `step_cost`
    (or the config's profile) makes the engine a batching one.
    """

    def __init__(
        self,
        config: SimConfig,
        *,
        worker: int = 0,
        record_path: Path | None,
        timing: TimingSource | None = None,
        step_cost: StepCost | None = None,
    ) -> None:
        self._config = config
        self._worker = worker
        self._reject = frozenset(config.reject_fields)
        self._timing = timing or FixedTiming.from_ms(ttft_ms=config.ttft_ms, itl_ms=config.itl_ms)
        self._faults = FaultPicker(config, worker=worker)
        self._corruptions = CorruptionPicker(
            config.corruption, rate=config.corruption_rate, seed=config.seed, worker=worker
        )
        self._ids = itertools.count()
        self._counters = SimCounters(worker=worker)
        self._truth = TruthLog(record_path) if record_path is not None else None
        self._scheduler = Scheduler(
            timing=self._timing,
            counters=self._counters,
            on_finish=self._on_finish,
            on_release=self._release,
        )
        cost = step_cost or step_cost_for(config)
        self._kv_capacity_tokens = (
            (config.kv_capacity_tokens or cost.kv_capacity_tokens) if cost is not None else None
        )
        """Batching: tokens of KV cache (the config's, else the profile's); None: unbounded."""
        self._cache = self._prefix_cache(config)
        self._admission = self._engine(config, cost)
        self._metrics = EngineMetrics(
            style=config.metrics_style,
            model=config.model,
            counters=self._counters,
            load=self._admission.load,
            block_size=config.block_size,
            prefix_cache=config.prefix_cache,
        )
        self._closing = False

    def _prefix_cache(self, config: SimConfig) -> PrefixCache | None:
        """The prefix cache, in the KV capacity (fixed timing: the config's, if any)."""
        if not config.prefix_cache:
            return None
        capacity = self._kv_capacity_tokens or config.kv_capacity_tokens
        tokens = capacity or UNBOUNDED_PREFIX_CACHE_TOKENS
        return PrefixCache(block_size=config.block_size, max_blocks=tokens // config.block_size)

    def _engine(self, config: SimConfig, step_cost: StepCost | None) -> Admission:
        if step_cost is None:
            return FixedAdmission(
                scheduler=self._scheduler,
                timing=self._timing,
                max_running=config.max_running_requests,
                counters=self._counters,
                prefix_cache=self._cache,
            )
        batcher: Batcher[Stream] = Batcher(
            step_cost=ScaledStepCost(step_cost, config.time_scale),
            chunked_prefill_size=config.chunked_prefill_size,
            max_running=config.max_running_requests,
            kv_capacity_tokens=self._kv_capacity_tokens,
            step_overhead_s=config.step_overhead_ms / MS_PER_S / config.time_scale,
            prefix_cache=self._cache,
            policy=policy_for(config.batch_policy),
        )
        return StepLoop(
            batcher=batcher,
            scheduler=self._scheduler,
            counters=self._counters,
            admit_delay_s=config.request_overhead_ms / MS_PER_S / config.time_scale,
        )

    def application(self) -> web.Application:
        """The aiohttp application serving every route."""
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_get("/sim/stats", self._stats)
        app.router.add_get("/metrics", self._prometheus)
        if self._config.metrics_style is MetricsStyle.SGLANG:
            app.router.add_get("/server_info", self._server_info)
            app.router.add_get("/get_server_info", self._server_info)  # SGLang's old name
        return app

    def stats(self) -> SimStats:
        """What this process has done so far."""
        return self._counters.snapshot(self._admission.load())

    def abort_all(self) -> None:
        """Refuse new work and cut every connection still being answered."""
        self._closing = True
        self._admission.stop()
        self._scheduler.stop()

    def close(self) -> None:
        """Flush and close the truth log."""
        if self._truth is not None:
            self._truth.close()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        t_recv_ns = now_ns()
        if self._closing:
            return web.json_response({"error": {"message": "shutting down"}}, status=503)
        request_id = request.headers.get(REQUEST_ID_HEADER) or self._new_request_id()
        headers = {REQUEST_ID_HEADER: request_id}
        self._counters.requests_total += 1
        try:
            body = parse_json(await request.read())
            generation = parse_generation(
                body, chat=chat, reject_fields=self._reject, quality=self._corruptions.planted
            )
        except RequestError as exc:
            info = RequestInfo(request_id, request.path, False, NO_FAULT)
            self._record_unanswered(info, t_recv_ns, exc.status, Outcome.REJECTED)
            return web.json_response(exc.payload, status=exc.status, headers=headers)
        count = n_chunks(generation.max_tokens, self._config.tokens_per_chunk)
        timed = TimedRequest(t_recv_ns, generation.prompt_tokens, generation.max_tokens, count)
        refusal = self._admission.refuse(timed)
        if refusal is not None:
            info = RequestInfo(request_id, request.path, False, NO_FAULT)
            self._record_unanswered(info, t_recv_ns, 400, Outcome.REJECTED, timed.prompt_tokens)
            error = {"message": refusal, "type": "invalid_request_error", "code": 400}
            return web.json_response({"error": error}, status=400, headers=headers)
        fault = self._faults.pick(stream=generation.stream, n_chunks=count)
        info = RequestInfo(request_id, request.path, generation.stream, fault)
        if fault.kind is not Fault.NONE:
            self._counters.faults[fault.kind.value] += 1
        if fault.kind is Fault.FAIL:
            self._record_unanswered(info, t_recv_ns, 500, Outcome.FAILED, timed.prompt_tokens)
            return web.Response(
                status=500,
                body=server_error_body(),
                content_type="application/json",
                headers=headers,
            )
        transport = request.transport
        if transport is None or transport.is_closing():  # left while we read the body
            self._record_unanswered(info, t_recv_ns, 0, Outcome.DISCONNECTED, timed.prompt_tokens)
            return web.Response(status=499)  # never delivered
        answer = None
        if generation.quality is not None:  # off the fast path: greedy text, logprobs
            answer = plan_answer(
                generation,
                corruption=self._corruptions.pick(),
                after_tokens=self._config.corrupt_after_tokens,
            )
        if generation.stream:
            return await self._stream(request, transport, generation, info, timed, headers, answer)
        return await self._answer(request, transport, generation, info, timed, headers, answer)

    async def _stream(
        self,
        request: web.Request,
        transport: asyncio.Transport,
        generation: GenerationRequest,
        info: RequestInfo,
        timed: TimedRequest,
        headers: dict[str, str],
        answer: Answer | None,
    ) -> web.StreamResponse:
        config, request_id, created = self._config, info.request_id, int(time.time())
        if answer is None:
            body = stream_body(generation, config=config, request_id=request_id, created=created)
        else:
            body = answer.stream_body(config=config, request_id=request_id, created=created)
        response = web.StreamResponse(headers=_SSE_HEADERS | headers)
        response.enable_chunked_encoding()
        await response.prepare(request)  # sends the headers now: a stream answers at once
        if body.head:
            transport.write(body.head)
        stream = Stream(
            info=info,
            timed=timed,
            transport=transport,
            frames=body.frames,
            tokens_per_chunk=self._config.tokens_per_chunk,
            blocks=self._blocks(generation),
            final_frame=body.final,
        )
        self._scheduler.track(stream)
        self._admission.admit(stream)
        await self._until_done(stream)
        return response  # aiohttp ends the chunked body (or notes the aborted connection)

    async def _answer(
        self,
        request: web.Request,
        transport: asyncio.Transport,
        generation: GenerationRequest,
        info: RequestInfo,
        timed: TimedRequest,
        headers: dict[str, str],
        answer: Answer | None,
    ) -> web.StreamResponse:
        """A non-streaming answer, sent whole when its last token is due."""
        stream = Stream(
            info=info,
            timed=timed,
            transport=transport,
            frames=[],
            tokens_per_chunk=generation.max_tokens,
            blocks=self._blocks(generation),
        )
        self._scheduler.track(stream)
        if info.fault.kind is Fault.STALL:
            await self._until_done(stream)  # only a disconnect or shutdown ends it
            return web.Response(status=503)  # never delivered: the connection is gone
        ready = stream.ready = asyncio.get_running_loop().create_future()
        self._admission.admit(stream)
        try:
            due_ns = await ready
            await asyncio.sleep(max(due_ns - now_ns(), 0) / NS_PER_S)
        except asyncio.CancelledError:
            self._scheduler.finish(stream, Outcome.DISCONNECTED)
            raise
        if answer is not None and answer.unencodable:
            return await self._unencodable(request, stream, headers)
        config, request_id, created = self._config, info.request_id, int(time.time())
        cached = stream.cached_tokens
        if answer is None:
            body = completion_body(
                generation,
                config=config,
                request_id=request_id,
                created=created,
                cached_tokens=cached,
            )
        else:
            body = answer.completion_body(
                config=config, request_id=request_id, created=created, cached_tokens=cached
            )
        response = web.Response(body=body, content_type="application/json", headers=headers)
        self._scheduler.answered(stream, due_ns)
        await response.prepare(request)
        await response.write_eof()
        self._scheduler.finish(stream, Outcome.COMPLETE)
        return response

    async def _unencodable(
        self, request: web.Request, stream: Stream, headers: dict[str, str]
    ) -> web.StreamResponse:
        """vLLM's 500 for a non-streamed answer holding a NaN logprob: no tokens delivered."""
        response = web.Response(
            status=500, body=UNENCODABLE_BODY, content_type="text/plain", headers=headers
        )
        await response.prepare(request)
        await response.write_eof()
        self._scheduler.finish(stream, Outcome.FAILED)
        return response

    def _blocks(self, generation: GenerationRequest) -> RequestBlocks | None:
        if self._cache is None:
            return None
        return RequestBlocks(
            generation.prompt_units, generation.output_unit, block_size=self._cache.block_size
        )

    def _new_request_id(self) -> str:
        return f"sim-{self._worker}-{next(self._ids)}"

    async def _until_done(self, stream: Stream) -> None:
        try:
            await stream.done
        except asyncio.CancelledError:  # the client left (aiohttp cancels the handler)
            self._scheduler.finish(stream, Outcome.DISCONNECTED)
            raise

    async def _models(self, _request: web.Request) -> web.Response:
        body = models_body(self._config, created=int(time.time()))
        return web.Response(body=body, content_type="application/json")

    async def _server_info(self, _request: web.Request) -> web.Response:
        body = server_info_body(self._config, kv_capacity_tokens=self._kv_capacity_tokens)
        return web.Response(body=body, content_type="application/json")

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _tokenize(self, request: web.Request) -> web.Response:
        try:
            body = parse_json(await request.read())
            ids = prompt_token_ids(body, chat="messages" in body)
        except RequestError as exc:
            return web.json_response(exc.payload, status=exc.status)
        payload = {"tokens": ids, "count": len(ids), "max_model_len": MAX_MODEL_LEN}
        return web.Response(body=orjson.dumps(payload), content_type="application/json")

    async def _stats(self, _request: web.Request) -> web.Response:
        return web.Response(body=self.stats().model_dump_json(), content_type="application/json")

    async def _prometheus(self, _request: web.Request) -> web.Response:
        return web.Response(body=self._metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    def _release(self, stream: Stream) -> None:
        self._admission.release(stream)

    def _on_finish(self, stream: Stream) -> None:
        outcome = stream.outcome
        assert outcome is not None
        if outcome is Outcome.COMPLETE:
            self._metrics.observe(stream)
        self._record(
            stream.info,
            status=_status(stream.info.stream, outcome),
            outcome=outcome,
            t_recv_ns=stream.timed.t_recv_ns,
            t_done_ns=stream.t_done_ns,
            prompt_tokens=stream.timed.prompt_tokens,
            stream=stream,
        )

    def _record_unanswered(
        self,
        info: RequestInfo,
        t_recv_ns: int,
        status: int,
        outcome: Outcome,
        prompt_tokens: int = 0,
    ) -> None:
        self._record(
            info,
            status=status,
            outcome=outcome,
            t_recv_ns=t_recv_ns,
            t_done_ns=now_ns(),
            prompt_tokens=prompt_tokens,
            stream=None,
        )

    def _record(
        self,
        info: RequestInfo,
        *,
        status: int,
        outcome: Outcome,
        t_recv_ns: int,
        t_done_ns: int,
        prompt_tokens: int,
        stream: Stream | None,
    ) -> None:
        self._counters.outcomes[outcome.value] += 1
        if self._truth is None:
            return
        self._truth.add(
            request_id=info.request_id,
            endpoint=info.endpoint,
            stream=info.stream,
            status=status,
            fault=info.fault.kind,
            outcome=outcome,
            t_recv_ns=t_recv_ns,
            t_done_ns=t_done_ns,
            prompt_tokens=prompt_tokens,
            cached_tokens=stream.cached_tokens if stream else 0,
            completion_tokens=stream.tokens_sent if stream else 0,
            tokens_per_chunk=(stream or self._config).tokens_per_chunk,
            chunk_sent_ns=stream.sent_ns if stream else [],
            chunk_lag_ns=stream.lag_ns if stream else [],
        )


def _status(streamed: bool, outcome: Outcome) -> int:
    """The HTTP status a tracked answer went out with (0: none did)."""
    if outcome is Outcome.FAILED:
        return 500
    return 200 if streamed or outcome is Outcome.COMPLETE else 0
