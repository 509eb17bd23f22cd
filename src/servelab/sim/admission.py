"""When a request may start generating: the engine side of the simulator, behind one protocol.

Every answer the app accepts goes to an `Admission`, which starts it now or once there is
room. `FixedAdmission` is the fixed-timing engine: with no cap every request starts when
it is received (the ground-truth mode); with `max_running_requests` the rest wait in
arrival order for a running slot. The batching engine (`servelab.sim.steploop.StepLoop`)
meets the same protocol.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Protocol

from servelab.core.clock import now_ns
from servelab.sim.prefix_cache import PrefixCache, held_tokens
from servelab.sim.scheduler import Scheduler, Stream
from servelab.sim.stats import EngineLoad, SimCounters
from servelab.sim.timing import TimedRequest, TimingSource

__all__ = ["Admission", "FixedAdmission"]


class Admission(Protocol):
    """Starts tracked streams generating, now or once there is room."""

    def refuse(self, timed: TimedRequest) -> str | None:
        """Why a request this size can never run (answered 400), or None."""
        ...

    def admit(self, stream: Stream) -> None:
        """Start a stream now or queue it; a non-streaming one has its `ready` future."""
        ...

    def release(self, stream: Stream) -> None:
        """The stream no longer needs the engine (ended or stalled); safe to repeat."""
        ...

    def load(self) -> EngineLoad:
        """What the engine holds now."""
        ...

    def stop(self) -> None:
        """Start nothing more."""
        ...


class FixedAdmission:
    """Fixed timing: at most `max_running` streams generating, the rest in arrival order.

    A stream that waited starts generating (its `timed.t_start_ns`) when a slot frees up;
    its chunks are due from then, so its TTFT counted from receive includes the wait.
    A stalled stream gives its slot back, as if the engine had moved on without it.
    With a prefix cache a stream looks its prompt up and caches its blocks when it
    starts, pins them while it runs, and caches the blocks its output filled when it
    ends; the timing does not change, as fixed timing has no prefill to save.
    """

    def __init__(
        self,
        *,
        scheduler: Scheduler,
        timing: TimingSource,
        max_running: int | None,
        counters: SimCounters,
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._timing = timing
        self._max_running = max_running
        self._counters = counters
        self._cache = prefix_cache
        self._running: set[Stream] = set()
        self._waiting: deque[Stream] = deque()
        self._stopped = False

    def refuse(self, timed: TimedRequest) -> str | None:
        return None

    def admit(self, stream: Stream) -> None:
        if self._has_room():
            self._start(stream)
        else:
            self._waiting.append(stream)

    def release(self, stream: Stream) -> None:
        if stream in self._running:
            self._running.discard(stream)
            decoded = max(stream.tokens_sent - 1, 0)
            self._counters.decode_tokens += decoded
            if self._cache is not None and stream.blocks is not None:
                # the last token sent was sampled, never computed: its KV does not exist
                self._cache.settle(stream.blocks, stream.timed.prompt_tokens + decoded)
                self._cache.release(stream.blocks)
            while self._waiting and not self._stopped and self._has_room():
                waiting = self._waiting.popleft()
                waiting.timed = dataclasses.replace(waiting.timed, t_start_ns=now_ns())
                self._start(waiting)
        elif stream in self._waiting:
            self._waiting.remove(stream)

    def load(self) -> EngineLoad:
        cache = self._cache
        held = held_tokens(
            cache, ((s.timed.prompt_tokens + s.tokens_sent, s.blocks) for s in self._running)
        )
        return EngineLoad(
            running=len(self._running),
            waiting=len(self._waiting),
            kv_used_tokens=held,
            cached_tokens=cache.blocks * cache.block_size if cache else 0,
            evicted_tokens=cache.evicted_blocks * cache.block_size if cache else 0,
        )

    def stop(self) -> None:
        self._stopped = True

    def _has_room(self) -> bool:
        return self._max_running is None or len(self._running) < self._max_running

    def _start(self, stream: Stream) -> None:
        self._running.add(stream)
        prompt, cache, blocks = stream.timed.prompt_tokens, self._cache, stream.blocks
        cached = queried = 0
        if cache is not None and blocks is not None:
            hit = cache.match(blocks, prompt)
            cache.pin(blocks, hit)
            cache.settle(blocks, prompt)
            queried, cached = prompt, cache.block_size * len(hit)
        self._counters.count_prefill(queried=queried, hit=cached, computed=prompt - cached)
        stream.started(cached)
        if stream.ready is None:
            self._scheduler.schedule(stream)
        else:
            stream.ready.set_result(self._timing.due_ns(stream.timed, stream.timed.n_chunks - 1))
