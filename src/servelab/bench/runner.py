"""Runs one load level on a pool of worker processes and collects its records.

Concurrency is split evenly over the workers and an open-loop schedule (drawn, or a
trace's own arrivals) round-robin;
workers start together at an absolute time on the shared monotonic clock, set once every
worker has acknowledged its phase. Records are
handed to `on_records` as they arrive, so they can be written before the level ends.
Ctrl-C stops the workers, keeps what finished, and marks the level interrupted. With a
cluster (bench.cluster) the workers are Ray actors spread over its nodes, driven the same way.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import queue
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from servelab.bench.conversation import Conversation
from servelab.bench.endpoint import EndpointConfig, RequestItem
from servelab.bench.events import BenchEvent, LevelProgress, LevelStarted
from servelab.bench.load import LevelSpec, LoadMode, arrival_offsets_ns
from servelab.bench.metrics import WorkerStats
from servelab.bench.records import RequestRecord
from servelab.bench.worker import EXIT, STOP, Phase, Start, worker_main
from servelab.core.clock import NS_PER_S, now_ns
from servelab.core.errors import ConfigError, ServelabError

if TYPE_CHECKING:
    from servelab.bench.cluster.fleet import ClientFleet

__all__ = [
    "STREAMS_PER_WORKER",
    "LevelOutcome",
    "default_workers",
    "run_level",
]

STREAMS_PER_WORKER = 256
RATE_PER_WORKER = 64.0
_START_MARGIN_NS = 20_000_000
"""From the last acknowledgement to the start: time for a small Start to reach every worker."""
_READY_TIMEOUT_S = 60.0
_STOP_GRACE_S = 15.0
_PROGRESS_EVERY_NS = 100_000_000
_POLL_STOP_NS = 100_000_000


@dataclass(frozen=True, slots=True)
class LevelOutcome:
    records: list[RequestRecord]
    workers: list[WorkerStats]
    interrupted: bool
    stopped: str | None = None
    """Why `stop_when` ended the level early (the engine died), if it did."""


def default_workers(level: LevelSpec, *, cpus: int | None = None) -> int:
    """One worker per 256 streams (closed loop) or 64 requests/s (open loop), at most one
    per CPU (this machine's, or the `cpus` given).

    A trace's rate is its busiest second's, not its mean: a burst is what a worker must
    keep up with.
    """
    if level.mode is LoadMode.CONCURRENCY:
        wanted = math.ceil(level.value / STREAMS_PER_WORKER)
    elif level.arrivals_ns is not None:
        wanted = math.ceil(_busiest_second(level.arrivals_ns) / RATE_PER_WORKER)
    else:
        wanted = math.ceil(level.value / RATE_PER_WORKER)
    return max(1, min(cpus or os.cpu_count() or 1, wanted))


def _busiest_second(arrivals_ns: Sequence[int]) -> int:
    """The most arrivals in any one-second bucket counted from the first."""
    return max(Counter(t // NS_PER_S for t in arrivals_ns).values(), default=0)


def run_level(
    level: LevelSpec,
    *,
    endpoint: EndpointConfig,
    items: Sequence[RequestItem],
    warmup_items: Sequence[RequestItem],
    workers: int | None,
    seed: int,
    on_records: Callable[[list[RequestRecord]], None],
    on_event: Callable[[BenchEvent], None],
    stop_when: Callable[[], str | None] | None = None,
    sessions: Sequence[Conversation] | None = None,
    cluster: ClientFleet | None = None,
) -> LevelOutcome:
    """Run the level's warm-up then its measured requests; never raises on Ctrl-C.

    `stop_when`, polled every 100 ms, ends the level early when it returns a reason.
    `sessions`, in a closed loop, replace `items`: each slot runs one conversation after
    another. `cluster` runs the workers on its nodes instead of this machine.
    """
    if sessions is not None and level.mode is not LoadMode.CONCURRENCY:
        raise ConfigError(
            "conversations run in a closed loop: a session is the unit of concurrency",
            hint="use --concurrency with --dataset conversation or --multi-turn",
        )
    if cluster is not None:
        count = cluster.worker_count(level, workers)
    else:
        count = workers or default_workers(level)
    if level.mode is LoadMode.CONCURRENCY:
        count = min(count, int(level.value))
    collector = _Collector(level, on_records, on_event)
    collector.stop_when = stop_when
    with cluster.pool(count) if cluster is not None else _pool(count, endpoint) as pool:
        if warmup_items:
            on_event(LevelStarted(level, len(warmup_items), None, count, warmup=True))
            warm = _warmup_phases(level, warmup_items, count)
            collector.warmup = True
            pool.run(warm, collector)
            collector.warmup = False
        if collector.interrupted or collector.stopped:
            return collector.outcome([])
        total = None if level.duration_s is not None or sessions else len(items)
        on_event(LevelStarted(level, total, level.duration_s, count, warmup=False))
        if sessions is not None:
            measured = _session_phases(level, sessions, count)
        else:
            measured = _measured_phases(level, items, count, seed)
        stats = pool.run(measured, collector)
    return collector.outcome(stats)


def _deal(n: int, slots: int, workers: int) -> list[list[int]]:
    """Item i goes to slot i % slots, slot j to worker j % workers: shares follow slots."""
    shares: list[list[int]] = [[] for _ in range(workers)]
    for i in range(n):
        shares[(i % slots) % workers].append(i)
    return shares


def _split(total: int, workers: int) -> list[int]:
    return [total // workers + (1 if w < total % workers else 0) for w in range(workers)]


def _warmup_phases(level: LevelSpec, items: Sequence[RequestItem], workers: int) -> list[Phase]:
    concurrency = min(len(items), level.concurrency or 8)
    return _closed_phases(level, items, workers, concurrency, warmup=True, duration_ns=None)


def _measured_phases(
    level: LevelSpec, items: Sequence[RequestItem], workers: int, seed: int
) -> list[Phase]:
    duration = None if level.duration_s is None else int(level.duration_s * NS_PER_S)
    if level.mode is LoadMode.CONCURRENCY:
        return _closed_phases(
            level, items, workers, int(level.value), warmup=False, duration_ns=duration
        )
    offsets = _arrivals_ns(level, len(items), seed)
    phases = []
    for w in range(workers):
        mine = range(w, len(offsets), workers)
        phases.append(
            Phase(
                level=level.index,
                warmup=False,
                items=[(j, items[j % len(items)]) for j in mine],
                offsets_ns=[offsets[j] for j in mine],
                duration_ns=duration,
            )
        )
    return phases


def _arrivals_ns(level: LevelSpec, count: int, seed: int) -> Sequence[int]:
    """The level's own arrivals (a trace's), else a gamma draw of `count` or its duration."""
    if level.arrivals_ns is not None:
        return level.arrivals_ns
    return arrival_offsets_ns(
        level.value,
        burstiness=level.burstiness,
        seed=seed + level.index,
        count=None if level.duration_s is not None else count,
        duration_s=level.duration_s,
    )


def _closed_phases(
    level: LevelSpec,
    items: Sequence[RequestItem],
    workers: int,
    concurrency: int,
    *,
    warmup: bool,
    duration_ns: int | None,
) -> list[Phase]:
    shares = _deal(len(items), concurrency, workers)
    slots = _split(concurrency, workers)
    return [
        Phase(
            level=level.index,
            warmup=warmup,
            items=[(i, items[i]) for i in share],
            concurrency=slots[w],
            duration_ns=duration_ns,
            index_stride=len(items),
        )
        for w, share in enumerate(shares)
    ]


def _session_phases(
    level: LevelSpec, sessions: Sequence[Conversation], workers: int
) -> list[Phase]:
    """Sessions dealt to the slots as items are; a session stays on one worker."""
    concurrency = int(level.value)
    duration = None if level.duration_s is None else int(level.duration_s * NS_PER_S)
    shares = _deal(len(sessions), concurrency, workers)
    slots = _split(concurrency, workers)
    return [
        Phase(
            level=level.index,
            warmup=False,
            items=[],
            concurrency=slots[w],
            duration_ns=duration,
            index_stride=len(sessions),
            conversations=[(i, sessions[i]) for i in share],
        )
        for w, share in enumerate(shares)
    ]


class _Collector:
    """Receives records from the workers, counts them, and forwards them."""

    def __init__(
        self,
        level: LevelSpec,
        on_records: Callable[[list[RequestRecord]], None],
        on_event: Callable[[BenchEvent], None],
    ) -> None:
        self.level = level
        self.on_records = on_records
        self.on_event = on_event
        self.records: list[RequestRecord] = []
        self.warmup = False
        self.interrupted = False
        self.stop_when: Callable[[], str | None] | None = None
        self.stopped: str | None = None
        self.completed = self.failed = self.tokens = 0
        self.t_start_ns = now_ns()
        self.t_progress_ns = 0
        self.t_polled_ns = 0

    def take(self, payload: bytes) -> None:
        batch = [RequestRecord.from_json(row) for row in orjson.loads(payload)]
        self.records.extend(batch)
        self.on_records(batch)
        if self.warmup:
            return
        for record in batch:
            if record.ok:
                self.completed += 1
                self.tokens += record.output_tokens
            else:
                self.failed += 1
        self.progress()

    def progress(self, *, force: bool = False) -> None:
        t = now_ns()
        if self.warmup or not (force or t - self.t_progress_ns >= _PROGRESS_EVERY_NS):
            return
        self.t_progress_ns = t
        elapsed = (t - self.t_start_ns) / NS_PER_S
        self.on_event(LevelProgress(self.level, self.completed, self.failed, self.tokens, elapsed))

    def outcome(self, stats: list[WorkerStats]) -> LevelOutcome:
        return LevelOutcome(self.records, stats, self.interrupted, self.stopped)

    def should_stop(self) -> str | None:
        """The first reason `stop_when` gives, polled at most every 100 ms."""
        t = now_ns()
        if self.stop_when is None or self.stopped or t - self.t_polled_ns < _POLL_STOP_NS:
            return None
        self.t_polled_ns = t
        self.stopped = self.stop_when()
        return self.stopped


class _Pool:
    def __init__(self, processes: list[Any], pipes: list[Any], inbox: Any) -> None:
        self.processes = processes
        self.pipes = pipes
        self.inbox = inbox

    def run(self, phases: list[Phase], collector: _Collector) -> list[WorkerStats]:
        """Send one phase per worker, start them all once each has it, collect until done."""
        for pipe, phase in zip(self.pipes, phases, strict=True):
            pipe.send(phase)
        acknowledged: set[int] = set()
        stats: dict[int, WorkerStats] = {}
        deadline: float | None = None
        while len(stats) < len(self.processes):
            try:
                if collector.should_stop():
                    self.stop()
                    deadline = now_ns() + int(_STOP_GRACE_S * NS_PER_S)
                try:
                    message = self.inbox.get(timeout=0.1)
                except queue.Empty:
                    collector.progress()
                    self._check_alive(stats)
                    if deadline is not None and now_ns() > deadline:
                        break
                    continue
                if message[0] == "ack":
                    acknowledged.add(message[1])
                    started = not (collector.interrupted or collector.stopped)
                    if len(acknowledged) == len(self.pipes) and started:
                        collector.t_start_ns = self._start()
                elif message[0] == "records":
                    collector.take(message[2])
                elif message[0] == "done":
                    stats[message[1]] = message[2]
            except KeyboardInterrupt:
                if collector.interrupted:
                    break
                collector.interrupted = True
                self.stop()
                deadline = now_ns() + int(_STOP_GRACE_S * NS_PER_S)
        collector.progress(force=True)
        return [stats[w] for w in sorted(stats)]

    def _start(self) -> int:
        """Tell every worker to begin at one moment just ahead; returns that moment."""
        start_ns = now_ns() + _START_MARGIN_NS
        for pipe in self.pipes:
            pipe.send(Start(start_ns))
        return start_ns

    def stop(self) -> None:
        for pipe in self.pipes:
            with suppress(OSError):
                pipe.send(STOP)

    def _check_alive(self, finished: dict[int, WorkerStats]) -> None:
        for w, process in enumerate(self.processes):
            if w not in finished and not process.is_alive():
                raise ServelabError(
                    f"client worker {w} exited unexpectedly (exit code {process.exitcode})"
                )


@contextmanager
def _pool(count: int, endpoint: EndpointConfig):
    ctx = mp.get_context("spawn")
    inbox = ctx.Queue()
    processes, pipes = [], []
    try:
        for w in range(count):
            parent_end, child_end = ctx.Pipe()
            process = ctx.Process(
                target=worker_main,
                args=(w, endpoint, child_end, inbox, os.getpid()),
                daemon=True,
                name=f"servelab-worker-{w}",
            )
            process.start()
            child_end.close()
            processes.append(process)
            pipes.append(parent_end)
        _wait_ready(inbox, processes)
        yield _Pool(processes, pipes, inbox)
    finally:
        for pipe in pipes:
            with suppress(OSError):
                pipe.send(EXIT)
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
        inbox.close()
        inbox.join_thread()


def _wait_ready(inbox: Any, processes: list[Any]) -> None:
    ready: set[int] = set()
    deadline = now_ns() + int(_READY_TIMEOUT_S * NS_PER_S)
    while len(ready) < len(processes):
        try:
            message = inbox.get(timeout=0.1)
        except queue.Empty:
            dead = [p for p in processes if not p.is_alive()]
            if dead or now_ns() > deadline:
                raise ServelabError("client workers failed to start") from None
            continue
        if message[0] == "ready":
            ready.add(message[1])
