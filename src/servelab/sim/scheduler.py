"""One scheduler per process sends every due chunk of every stream.

A coroutine per stream waking per token costs a task switch per chunk, which is what
limits a Python server at tens of thousands of chunks per second. Here the streams sit
in one heap keyed by due time; a single timer callback wakes at the earliest due time
(but at most once per MIN_TICK_NS) and writes every chunk that is due, each a
pre-encoded frame written straight to its transport, then re-arms for the next. Due
times come from the `TimingSource`, so they are absolute and lag never accumulates.
The batching engine (`servelab.sim.steploop`) writes its chunks through `send` too, so
faults, counters and the truth log work the same in both.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from servelab.core.clock import NS_PER_S, now_ns
from servelab.core.units import NS_PER_MS
from servelab.sim.batching import EngineRequest
from servelab.sim.blocks import RequestBlocks
from servelab.sim.faults import Fault, FaultPlan
from servelab.sim.responses import MALFORMED_FRAME
from servelab.sim.stats import SimCounters
from servelab.sim.timing import TimedRequest, TimingSource
from servelab.sim.truth import Outcome

__all__ = ["MIN_TICK_NS", "RequestInfo", "Scheduler", "Stream"]

MIN_TICK_NS = NS_PER_MS
"""Ticks are at least this far apart, so a tick sends every chunk that fell due in the
last millisecond in one pass instead of waking the loop once per chunk: at 50k chunks/s
that cuts the CPU per chunk by a third, for a send lag of about a millisecond."""


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """The facts about a request that its truth record needs."""

    request_id: str
    endpoint: str
    stream: bool
    fault: FaultPlan


class Stream:
    """One answer in flight: the frames left to send and when each one went out.

    Non-streaming answers are tracked too (with no frames) so that stopping the server
    or a client leaving ends them the same way. `timed.start_ns` is when it began
    generating (its receive time unless it waited for a running slot). `blocks` are its
    prompt's block keys when the prefix cache is on; `final_frame` re-encodes the last
    frame once the engine knows the cached tokens its usage reports (None: it reports
    none).
    """

    __slots__ = (
        "blocks",
        "cached_tokens",
        "done",
        "fault_at",
        "final_frame",
        "frames",
        "info",
        "job",
        "lag_ns",
        "next_chunk",
        "outcome",
        "ready",
        "sent_ns",
        "t_done_ns",
        "timed",
        "tokens_per_chunk",
        "transport",
    )

    def __init__(
        self,
        *,
        info: RequestInfo,
        timed: TimedRequest,
        transport: asyncio.Transport,
        frames: list[bytes],
        tokens_per_chunk: int,
        blocks: RequestBlocks | None = None,
        final_frame: Callable[[int], bytes] | None = None,
    ) -> None:
        self.info = info
        self.timed = timed
        self.transport = transport
        self.frames = frames
        self.tokens_per_chunk = tokens_per_chunk
        self.blocks = blocks
        self.final_frame = final_frame
        self.cached_tokens = 0
        """Prompt tokens the prefix cache supplied, known once the engine starts it."""
        self.fault_at = info.fault.at_chunk if info.fault.kind is not Fault.NONE else -1
        self.next_chunk = 0
        self.sent_ns: list[int] = []
        self.lag_ns: list[int] = []
        self.outcome: Outcome | None = None
        self.t_done_ns = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ready: asyncio.Future[int] | None = None
        """Non-streaming answers: resolves with the answer's due time once it is known."""
        self.job: EngineRequest[Stream] | None = None
        """Batching: the engine's record of this request."""

    @property
    def tokens_sent(self) -> int:
        """Output tokens in the text chunks written so far."""
        return min(self.timed.completion_tokens, len(self.sent_ns) * self.tokens_per_chunk)

    def started(self, cached_tokens: int) -> None:
        """The engine started it with this many prompt tokens from the prefix cache."""
        self.cached_tokens = cached_tokens
        if self.final_frame is not None and self.frames:
            self.frames[-1] = self.final_frame(cached_tokens)


class Scheduler:
    """Sends chunks at their due times; `on_finish` hears of every stream that ends.

    `on_release` hears when a stream no longer needs the engine: when it ends, and when
    it stalls; it may hear of one stream twice (a stall, then the client leaving).
    """

    def __init__(
        self,
        *,
        timing: TimingSource,
        counters: SimCounters,
        on_finish: Callable[[Stream], None],
        on_release: Callable[[Stream], None] = lambda _stream: None,
    ) -> None:
        self._timing = timing
        self._counters = counters
        self._on_finish = on_finish
        self._on_release = on_release
        self._heap: list[tuple[int, int, Stream]] = []
        self._order = itertools.count()
        self._active: set[Stream] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due_ns = 0
        self._last_tick_ns = 0

    def track(self, stream: Stream) -> None:
        """Count a stream as active without sending anything for it."""
        self._active.add(stream)
        self._counters.requests_active += 1

    def schedule(self, stream: Stream) -> None:
        """Send a tracked stream's frames at their due times, from chunk 0's on."""
        self._push(stream, self._timing.due_ns(stream.timed, 0))

    def answered(self, stream: Stream, due_ns: int) -> None:
        """Note a non-streaming answer, sent whole now, as one chunk due at `due_ns`."""
        sent_ns = now_ns()
        stream.sent_ns.append(sent_ns)
        stream.lag_ns.append(sent_ns - due_ns)
        self._counters.lag.add(sent_ns - due_ns)
        self._counters.chunks_sent += 1
        self._counters.tokens_sent += stream.timed.completion_tokens
        self._counters.prompt_tokens += stream.timed.prompt_tokens

    def finish(self, stream: Stream, outcome: Outcome) -> None:
        """End a stream once; later calls for the same stream do nothing."""
        if stream.outcome is not None:
            return
        stream.outcome = outcome
        stream.t_done_ns = now_ns()
        self._active.discard(stream)
        self._counters.requests_active -= 1
        self._on_release(stream)
        self._on_finish(stream)
        if not stream.done.done():
            stream.done.set_result(None)

    def send(self, stream: Stream, due_ns: int) -> bool:
        """Write a stream's next chunk, due at `due_ns`, or strike its fault instead.

        True while the stream has chunks left to send; False once it has ended, or
        stalled (it then stays active until the client leaves or the server stops).
        """
        k = stream.next_chunk
        frame = stream.frames[k]
        transport = stream.transport
        if transport.is_closing():
            self.finish(stream, Outcome.DISCONNECTED)
            return False
        if k == stream.fault_at:
            kind = stream.info.fault.kind
            if kind is Fault.DROP:
                transport.abort()
                self.finish(stream, Outcome.DROPPED)
                return False
            if kind is Fault.STALL:
                self._on_release(stream)
                return False
            frame = MALFORMED_FRAME + frame
        counters = self._counters
        now = now_ns()
        transport.write(frame)
        stream.sent_ns.append(now)
        stream.lag_ns.append(now - due_ns)
        counters.lag.add(now - due_ns)
        counters.chunks_sent += 1
        per_chunk = stream.tokens_per_chunk
        counters.tokens_sent += min(per_chunk, stream.timed.completion_tokens - k * per_chunk)
        if k == 0:
            counters.prompt_tokens += stream.timed.prompt_tokens
        k += 1
        stream.next_chunk = k
        if k == len(stream.frames):
            self.finish(stream, Outcome.COMPLETE)
            return False
        return True

    def stop(self) -> None:
        """Abort every connection still being answered (stalled ones included)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for stream in list(self._active):
            stream.transport.abort()
            self.finish(stream, Outcome.STOPPED)
        self._heap.clear()

    def _push(self, stream: Stream, due_ns: int) -> None:
        heapq.heappush(self._heap, (due_ns, next(self._order), stream))
        if self._timer is None or self._wake_ns(due_ns) < self._timer_due_ns:
            self._arm()

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._heap:
            wake_ns = self._wake_ns(self._heap[0][0])
            delay_s = max(wake_ns - now_ns(), 0) / NS_PER_S
            self._timer = asyncio.get_running_loop().call_later(delay_s, self._tick)
            self._timer_due_ns = wake_ns

    def _wake_ns(self, due_ns: int) -> int:
        return max(due_ns, self._last_tick_ns + MIN_TICK_NS)

    def _tick(self) -> None:
        """Write every chunk that is due, oldest first, then sleep until the next."""
        self._timer = None
        heap = self._heap
        timing = self._timing
        self._last_tick_ns = now_ns()
        while heap and heap[0][0] <= now_ns():
            due, _, stream = heapq.heappop(heap)
            if stream.outcome is None and self.send(stream, due):
                due = timing.due_ns(stream.timed, stream.next_chunk)
                heapq.heappush(heap, (due, next(self._order), stream))
        self._arm()
