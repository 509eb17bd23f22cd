"""The batching engine on the event loop: a `Batcher` stepped against the wall clock.

One timer callback per step, no task per stream: at a step's planned end it applies the
step, writes each stream's pre-encoded frame for the token it just received straight to
its transport (through `Scheduler.send`, so faults and the truth log behave as in fixed
mode), then plans the next step to end at this step's planned end plus its duration.
Boundaries are absolute, so a late callback shortens the next wait instead of shifting
every later step; how late each callback ran is the step lag (`SimStats.step_lag_*`).
A stream's chunk is due at the planned end of the step that produced its last token.
"""

from __future__ import annotations

import asyncio
import dataclasses

from servelab.core.clock import NS_PER_S, now_ns
from servelab.sim.batching import Batcher, EngineRequest, Phase, Step
from servelab.sim.scheduler import Scheduler, Stream
from servelab.sim.stats import EngineLoad, SimCounters
from servelab.sim.timing import TimedRequest

__all__ = ["StepLoop"]


class StepLoop:
    """Runs one Batcher of Streams; meets the `Admission` protocol."""

    def __init__(
        self,
        *,
        batcher: Batcher[Stream],
        scheduler: Scheduler,
        counters: SimCounters,
        admit_delay_s: float = 0.0,
    ) -> None:
        self._batcher = batcher
        self._admit_delay_s = admit_delay_s
        self._scheduler = scheduler
        self._counters = counters
        self._step: Step[Stream] | None = None
        self._step_end_ns = 0
        self._timer: asyncio.Handle | None = None
        self._stopped = False

    def refuse(self, timed: TimedRequest) -> str | None:
        if self._batcher.fits(timed.prompt_tokens, timed.completion_tokens):
            return None
        return (
            f"prompt ({timed.prompt_tokens} tokens) plus max_tokens ({timed.completion_tokens})"
            f" exceed the KV cache capacity of {self._batcher.kv_capacity_tokens} tokens"
        )

    def admit(self, stream: Stream) -> None:
        if self._admit_delay_s > 0:  # the HTTP server and tokenizer before the scheduler
            asyncio.get_running_loop().call_later(self._admit_delay_s, self._submit, stream)
        else:
            self._submit(stream)

    def _submit(self, stream: Stream) -> None:
        if self._stopped or stream.done.done():  # it left while it was on its way
            return
        timed = stream.timed
        job = EngineRequest(
            timed.prompt_tokens, timed.completion_tokens, stream, blocks=stream.blocks
        )
        stream.job = job
        self._batcher.submit(job)
        if self._step is None and self._timer is None and not self._stopped:
            self._timer = asyncio.get_running_loop().call_soon(self._on_step_end)

    def release(self, stream: Stream) -> None:
        if stream.job is not None:
            self._batcher.cancel(stream.job)

    def load(self) -> EngineLoad:
        batcher, cache = self._batcher, self._batcher.prefix_cache
        return EngineLoad(
            running=len(batcher.running),
            waiting=len(batcher.waiting),
            kv_used_tokens=batcher.kv_used_tokens,
            kv_capacity_tokens=batcher.kv_capacity_tokens,
            cached_tokens=cache.blocks * cache.block_size if cache else 0,
            evicted_tokens=cache.evicted_blocks * cache.block_size if cache else 0,
        )

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_step_end(self) -> None:
        """Hand out the finished step's tokens, then start the next step."""
        self._timer = None
        step = self._step
        if step is None:  # idle until now: the next step starts at once
            self._begin(now_ns())
            return
        planned_ns = self._step_end_ns
        self._counters.step_lag.add(now_ns() - planned_ns)
        self._counters.steps += 1
        self._deliver(self._batcher.complete(step), planned_ns)
        self._begin(planned_ns)

    def _begin(self, start_ns: int) -> None:
        step = self._step = None if self._stopped else self._batcher.plan()
        if step is None:
            return
        for job in step.admitted:
            if job.preemptions:  # back after a preemption: it started long ago
                continue
            stream = job.owner
            stream.timed = dataclasses.replace(stream.timed, t_start_ns=start_ns)
            stream.started(job.cached_tokens)
        self._count(step)
        self._step_end_ns = end_ns = start_ns + round(step.duration_s * NS_PER_S)
        delay_s = max(end_ns - now_ns(), 0) / NS_PER_S
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._on_step_end)

    def _count(self, step: Step[Stream]) -> None:
        """The step's tokens by kind, and the cache lookups of the requests it admits."""
        counters = self._counters
        counters.decode_tokens += len(step.decode)
        if step.prefill:
            looked_up = self._batcher.prefix_cache is not None
            counters.count_prefill(
                queried=sum(job.prompt_tokens for job in step.admitted) if looked_up else 0,
                hit=sum(job.cached_tokens for job in step.admitted),
                computed=step.prefill_tokens,
            )

    def _deliver(self, tokens: list[EngineRequest[Stream]], due_ns: int) -> None:
        """Send each stream the chunk its new token completes; answer finished requests."""
        send = self._scheduler.send
        done = Phase.DONE
        for job in tokens:
            stream = job.owner
            ready = stream.ready
            if ready is not None:  # a non-streaming answer goes out whole at the end
                if job.phase is done and not ready.done():
                    ready.set_result(due_ns)
                continue
            generated = job.generated
            if generated % stream.tokens_per_chunk == 0 or generated == job.max_tokens:
                send(stream, due_ns)
