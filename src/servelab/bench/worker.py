"""A client worker process: one event loop, one connection pool, its share of the load.

The parent sends commands over a pipe (`Phase`, `Start`, `STOP`, `EXIT`); the worker
sends everything back over one shared queue, in order: `("ready", w)` once, then per
phase `("ack", w)` when the phase has arrived, batches of records `("records", w,
bytes)`, and `("done", w, stats)` at its end. A phase only starts with the `Start` that
follows it, which the parent sends once every worker has acknowledged its phase: a
large phase that is slow to deliver then delays the start, not one worker's arrivals.
Putting records and "done" on the same queue keeps them ordered. Workers ignore SIGINT,
SIGTERM and SIGHUP: the parent decides what they mean and tells them to stop; and a
worker whose parent died exits at once (nobody drains the queue any more). A Ray actor
runs the same `Worker` on a thread of its own (`serve`), its channels a queue and a list
(bench.cluster.actor).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.queues import Queue
from typing import Any, Protocol

import orjson

from servelab.bench.client import send_request
from servelab.bench.conversation import MAX_TURNS, Conversation, History, next_request
from servelab.bench.endpoint import EndpointConfig, RequestItem
from servelab.bench.metrics import WorkerStats
from servelab.bench.records import RequestRecord
from servelab.bench.transport import ConnectionPool, Target
from servelab.core.clock import NS_PER_S, now_ns
from servelab.core.processes import die_with_parent

__all__ = ["EXIT", "STOP", "Commands", "Outbox", "Phase", "Start", "Worker", "serve", "worker_main"]

STOP = "stop"
EXIT = "exit"
_FLUSH_EVERY_S = 0.05
_LAG_TICK_S = 0.01


@dataclass(frozen=True, slots=True)
class Phase:
    """This worker's part of one phase (a level's warm-up or its measured requests)."""

    level: int
    warmup: bool
    items: list[tuple[int, RequestItem]]
    """(request index, request) in sending order."""
    concurrency: int | None = None
    """Closed loop: requests this worker keeps in flight."""
    offsets_ns: list[int] | None = None
    """Open loop: arrival of each item, after the start."""
    duration_ns: int | None = None
    """Duration mode: no request starts this long after the start; items are reused."""
    index_stride: int = 1
    """Duration mode, closed loop: the k-th request is items[k % n], index + (k // n) * stride."""
    conversations: list[tuple[int, Conversation]] | None = None
    """Closed loop over sessions instead of `items`: (position, session) in sending order; a
    session's requests are numbered position x MAX_TURNS + turn."""


class Commands(Protocol):
    """Where a worker's commands come from (a pipe's end, or an actor's queue)."""

    def recv(self) -> Any: ...


class Outbox(Protocol):
    """Where a worker's messages go (the pool's queue, or an actor's list)."""

    def put(self, message: Any, /) -> None: ...


@dataclass(frozen=True, slots=True)
class Start:
    """Begin the phase received last, at `start_ns` on the shared monotonic clock."""

    start_ns: int


def worker_main(
    worker: int, endpoint: EndpointConfig, commands: Connection, out: Queue, parent_pid: int
) -> None:
    """Process entry point."""
    die_with_parent(parent_pid)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    serve(Worker(worker, endpoint, commands, out))


def serve(worker: Worker) -> None:
    """Run `worker` on a new event loop in this thread (uvloop's where installed) until EXIT."""
    factory = None
    with contextlib.suppress(ImportError):
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(worker.serve())


class Worker:
    """One event loop's share of the load: runs each phase it is sent, reports to `out`."""

    def __init__(
        self, worker: int, endpoint: EndpointConfig, commands: Commands, out: Outbox
    ) -> None:
        self.worker = worker
        self.endpoint = endpoint
        self.commands = commands
        self.out = out
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()
        self.stop = asyncio.Event()
        self.pending: list[RequestRecord] = []
        self.in_flight: dict[int, tuple[int, RequestItem]] = {}
        """Requests sent and not yet recorded: index -> (t_scheduled_ns, request)."""
        self.dispatched = 0
        """Open loop: the phase's items sent so far (the rest are still to come)."""
        self.run_queue = RunQueueWait()
        self.busy = _BusySpan(self.run_queue)
        self.count_tokens = _output_counter(endpoint)
        self.target = Target.parse(endpoint.url)
        self.loop: asyncio.AbstractEventLoop | None = None
        """The loop `serve` runs on, once it runs."""

    def _listen(self, loop: asyncio.AbstractEventLoop) -> None:
        """A thread blocking on the pipe: phases can be larger than a pipe buffer."""
        while True:
            try:
                message = self.commands.recv()
            except (EOFError, OSError):
                message = EXIT
            loop.call_soon_threadsafe(self._on_command, message)
            if message == EXIT:
                return

    def _on_command(self, message: Any) -> None:
        if message in (STOP, EXIT):
            self.stop.set()
        self.inbox.put_nowait(message)

    def checkpoint(self) -> dict[int, tuple[int, RequestItem]]:
        """Hand the finished records to the outbox; return the requests still in flight.

        Called on the worker's loop, so that every request sent is in exactly one of the
        two: what a lost node leaves unrecorded is then what was in flight.
        """
        self._flush()
        return dict(self.in_flight)

    async def serve(self) -> None:
        self.loop = loop = asyncio.get_running_loop()
        threading.Thread(target=self._listen, args=(loop,), daemon=True).start()
        self.pool = ConnectionPool()
        try:
            self.out.put(("ready", self.worker))
            while True:
                message = await self.inbox.get()
                if message == EXIT:
                    break
                if isinstance(message, Phase):
                    self.stop.clear()
                    self.dispatched = 0
                    self.out.put(("ack", self.worker))
                    start = await self.inbox.get()
                    if start == EXIT:
                        break
                    stats = (
                        await self._run_phase(message, start.start_ns)
                        if isinstance(start, Start)
                        else WorkerStats(self.worker, 0, 0, 0.0, 0.0)
                    )
                    self._flush()
                    self.out.put(("done", self.worker, stats))
        finally:
            await self.pool.close()

    async def _run_phase(self, phase: Phase, start_ns: int) -> WorkerStats:
        lags: list[int] = []
        self.busy = _BusySpan(self.run_queue)
        monitor = asyncio.create_task(_watch_loop_lag(lags))
        flusher = asyncio.create_task(self._flush_periodically())
        await _sleep_until(start_ns, self.stop)
        deadline_ns = None if phase.duration_ns is None else start_ns + phase.duration_ns
        tasks: set[asyncio.Task[None]] = set()
        if phase.offsets_ns is not None:
            runner = self._open_loop(phase, start_ns, deadline_ns, tasks)
        else:
            runner = self._closed_loop(phase, deadline_ns, tasks)
        main = asyncio.create_task(runner)
        stopper = asyncio.create_task(self.stop.wait())
        await asyncio.wait({main, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if self.stop.is_set():
            main.cancel()
            for task in tasks:
                task.cancel()
        await asyncio.gather(main, *tasks, return_exceptions=True)
        stopper.cancel()
        monitor.cancel()
        flusher.cancel()
        lags.sort()
        p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))] if lags else 0
        return WorkerStats(
            worker=self.worker,
            loop_lag_p99_ns=p99,
            loop_lag_max_ns=lags[-1] if lags else 0,
            cpu_s=self.busy.cpu_s,
            wall_s=self.busy.wall_s,
            wait_s=self.busy.wait_s,
            preempted_share=self.busy.preempted_share(),
        )

    async def _one(self, phase: Phase, index: int, item: RequestItem, t_scheduled_ns: int) -> None:
        self.busy.sent()
        self.in_flight[index] = (t_scheduled_ns, item)
        record = await send_request(
            self.pool,
            self.target,
            self.endpoint,
            item,
            index=index,
            level=phase.level,
            warmup=phase.warmup,
            worker=self.worker,
            t_scheduled_ns=t_scheduled_ns,
            count_tokens=self.count_tokens,
        )
        self.busy.completed()
        del self.in_flight[index]
        self.pending.append(record)

    async def _session(
        self, phase: Phase, position: int, conversation: Conversation, deadline_ns: int | None
    ) -> None:
        """Every turn of one session in order, each sent when the previous reply is in and
        the turn's think time has passed; a failed turn ends the session, and so does the
        level's end (no request starts after it)."""
        history = History.start(conversation)
        for k, turn in enumerate(conversation.turns):
            if turn.think_s > 0:
                await _sleep_until(now_ns() + int(turn.think_s * NS_PER_S), self.stop)
            if self.stop.is_set() or (deadline_ns is not None and now_ns() >= deadline_ns):
                return
            first = phase.level == 0 and conversation.session == 0 and k == 0
            item = next_request(history, k, first_of_run=first)
            reply: list[str] = []
            self.busy.sent()
            t_scheduled = now_ns()
            self.in_flight[position * MAX_TURNS + k] = (t_scheduled, item)
            record = await send_request(
                self.pool,
                self.target,
                self.endpoint,
                item,
                index=position * MAX_TURNS + k,
                level=phase.level,
                warmup=phase.warmup,
                worker=self.worker,
                t_scheduled_ns=t_scheduled,
                count_tokens=self.count_tokens,
                reply=reply,
            )
            self.busy.completed()
            del self.in_flight[position * MAX_TURNS + k]
            record.session, record.turn = conversation.session, k
            self.pending.append(record)
            if not record.ok:
                return
            prompt = record.prompt_tokens or record.input_tokens_target or 0
            history.add_reply(turn, "".join(reply), prompt, record.output_tokens)

    async def _sessions(
        self, phase: Phase, deadline_ns: int | None, tasks: set[asyncio.Task[None]]
    ) -> None:
        """Closed loop over sessions: each slot runs one session after another."""
        sessions = phase.conversations or []
        next_k = 0

        async def slot() -> None:
            nonlocal next_k
            while not self.stop.is_set() and sessions:
                if deadline_ns is not None and now_ns() >= deadline_ns:
                    return
                k = next_k
                if deadline_ns is None and k >= len(sessions):
                    return
                next_k += 1
                position, conversation = sessions[k % len(sessions)]
                position += (k // len(sessions)) * phase.index_stride
                await self._session(phase, position, conversation, deadline_ns)

        for _ in range(phase.concurrency or 1):
            tasks.add(asyncio.create_task(slot()))
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _closed_loop(
        self, phase: Phase, deadline_ns: int | None, tasks: set[asyncio.Task[None]]
    ) -> None:
        if phase.conversations is not None:
            await self._sessions(phase, deadline_ns, tasks)
            return
        items = phase.items
        next_k = 0

        async def slot() -> None:
            nonlocal next_k
            while not self.stop.is_set():
                t_free = now_ns()
                if deadline_ns is not None and t_free >= deadline_ns:
                    return
                k = next_k
                if deadline_ns is None and k >= len(items):
                    return
                next_k += 1
                base_index, item = items[k % len(items)]
                index = base_index + (k // len(items)) * phase.index_stride
                await self._one(phase, index, item, t_free)

        for _ in range(phase.concurrency or 1):
            tasks.add(asyncio.create_task(slot()))
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _open_loop(
        self,
        phase: Phase,
        start_ns: int,
        deadline_ns: int | None,
        tasks: set[asyncio.Task[None]],
    ) -> None:
        assert phase.offsets_ns is not None
        for (index, item), offset in zip(phase.items, phase.offsets_ns, strict=True):
            due = start_ns + offset
            if deadline_ns is not None and due >= deadline_ns:
                break
            await _sleep_until(due, self.stop)
            if self.stop.is_set():
                return
            task = asyncio.create_task(self._one(phase, index, item, due))
            self.dispatched += 1
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        while tasks:
            await asyncio.gather(*list(tasks), return_exceptions=True)

    def _flush(self) -> None:
        if self.pending:
            batch, self.pending = self.pending, []
            payload = orjson.dumps([r.to_json() for r in batch])
            self.out.put(("records", self.worker, payload))

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(_FLUSH_EVERY_S)
            self._flush()


class _BusySpan:
    """CPU, run-queue wait and wall time from a worker's first send to the last completion
    it saw.

    A worker that waits for its first arrival, or idles while others finish, is not
    busy then; dividing by the whole phase would hide a saturated burst. The wait is what
    its CPU time cannot show on a shared machine: a worker that wanted a core all along
    but got half of one (another program on it) ran 50% and waited 50%.
    """

    __slots__ = (
        "cpu_first_s",
        "cpu_last_s",
        "switches_first",
        "t_first_ns",
        "t_last_ns",
        "wait_first_s",
        "wait_last_s",
        "waits",
    )

    def __init__(self, waits: RunQueueWait) -> None:
        self.t_first_ns: int | None = None
        self.cpu_first_s = self.cpu_last_s = 0.0
        self.wait_first_s = self.wait_last_s = 0.0
        self.t_last_ns = 0
        self.waits = waits
        self.switches_first: tuple[int, int] | None = None

    def sent(self) -> None:
        if self.t_first_ns is None:
            self.t_first_ns, self.cpu_first_s = now_ns(), time.process_time()
            self.wait_first_s = self.waits.read_s()
            self.switches_first = context_switches()

    def completed(self) -> None:
        self.t_last_ns, self.cpu_last_s = now_ns(), time.process_time()
        self.wait_last_s = self.waits.read_s()

    @property
    def cpu_s(self) -> float:
        return max(self.cpu_last_s - self.cpu_first_s, 0.0)

    @property
    def wait_s(self) -> float:
        return max(self.wait_last_s - self.wait_first_s, 0.0)

    def preempted_share(self) -> float | None:
        """Of the loop thread's context switches since the first send, the share that were
        involuntary (it lost the core with work to do, rather than waiting for I/O)."""
        first, now = self.switches_first, context_switches()
        if first is None or now is None:
            return None
        voluntary, involuntary = now[0] - first[0], now[1] - first[1]
        total = voluntary + involuntary
        return involuntary / total if total > 0 else None

    @property
    def wall_s(self) -> float:
        if self.t_first_ns is None:
            return 0.0
        return max(self.t_last_ns - self.t_first_ns, 0) / NS_PER_S


class RunQueueWait:
    """The time the thread that reads it spent runnable but not running (the second field
    of /proc/thread-self/schedstat, in ns), from a file opened on the first read by that
    thread and kept open: a read costs under a microsecond. Always 0 where the kernel does
    not keep it."""

    __slots__ = ("fd",)

    def __init__(self) -> None:
        self.fd: int | None = None

    def read_s(self) -> float:
        try:
            if self.fd is None:
                self.fd = os.open(_SCHEDSTAT, os.O_RDONLY)
            return int(os.pread(self.fd, 128, 0).split()[1]) / NS_PER_S
        except (OSError, IndexError, ValueError):
            return 0.0


_SCHEDSTAT = "/proc/thread-self/schedstat"
_STATUS = "/proc/thread-self/status"


def context_switches() -> tuple[int, int] | None:
    """The calling thread's voluntary and involuntary context switches so far (its
    /proc/thread-self/status); None where the kernel does not say."""
    found: dict[str, int] = {}
    try:
        with open(_STATUS) as status:
            for line in status:
                name, _, value = line.partition(":")
                if name.endswith("ctxt_switches"):
                    found[name] = int(value)
    except (OSError, ValueError):
        return None
    if len(found) != 2:
        return None
    return found["voluntary_ctxt_switches"], found["nonvoluntary_ctxt_switches"]


async def _sleep_until(t_ns: int, stop: asyncio.Event) -> None:
    """Sleep to an absolute time on the monotonic clock (early if asked to stop)."""
    delay = (t_ns - now_ns()) / NS_PER_S
    if delay > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=delay)


async def _watch_loop_lag(lags: list[int]) -> None:
    """Every 10 ms, how long a callback made ready waits to run: the event loop's own lag.

    A chunk's arrival is stamped when its callback runs, so stamps are late by as much.
    A timer's overshoot would not do: timers fire with millisecond granularity, a floor
    that reads as lag against a fast engine's ITL on an idle client.
    """
    while True:
        await asyncio.sleep(_LAG_TICK_S)
        t0 = now_ns()
        await asyncio.sleep(0)
        lags.append(now_ns() - t0)


def _output_counter(endpoint: EndpointConfig) -> Callable[[str], int] | None:
    if endpoint.tokenizer_path is None:
        return None
    from servelab.bench.tokens import load_local_tokenizer

    return load_local_tokenizer(endpoint.tokenizer_path).count
