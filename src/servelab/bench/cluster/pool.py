"""One level on the cluster's workers: the same protocol as the process pool's.

Each worker gets its phase; once every one has acknowledged it, each is told the start
on its own node's clock. Records come back through long-polled drains (a batch every
~100 ms, each worker's memory bounded by what one poll holds) until every worker has
said it is done. A worker whose actor dies, or that answers no drain for 20 s, is lost
with its node: what it had in flight at its last drain is recorded `client_lost`, and in
an open loop so is every arrival it was due to send from then until the loss was seen
(sent or not, its fate is unknown); the rest of the level runs without it, and its node
is used no more. A closed loop's requests that both began and ended after the last
drain are the one thing lost unrecorded (at most one drain, ~100 ms, of the node's load).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import orjson
import ray
from ray.exceptions import ActorUnavailableError, RayActorError

from servelab.bench.cluster.actor import Drained, InFlight
from servelab.bench.cluster.clock import ClockOffset
from servelab.bench.cluster.errors import first_line
from servelab.bench.cluster.nodes import Node
from servelab.bench.cluster.signals import deferred_signals
from servelab.bench.endpoint import RequestItem
from servelab.bench.metrics import NodeClock, WorkerStats
from servelab.bench.records import ErrorKind, RequestRecord
from servelab.bench.worker import Phase
from servelab.core.clock import NS_PER_S, now_ns

__all__ = ["Collector", "Member", "RayPool"]

_DRAIN_WAIT_S = 0.1
_START_MARGIN_NS = 100_000_000
"""From the last acknowledgement to the start: a call to every node, with room to spare."""
_STOP_GRACE_S = 15.0
_SILENT_NS = 20 * NS_PER_S
"""A drain unanswered this long (or a worker unavailable this long): the worker is lost."""
_RETRY_NS = 200_000_000


class Collector(Protocol):
    """What the runner's collector offers a pool (bench.runner._Collector)."""

    interrupted: bool
    stopped: str | None
    t_start_ns: int

    def take(self, payload: bytes) -> None: ...

    def progress(self, *, force: bool = False) -> None: ...

    def should_stop(self) -> str | None: ...


@dataclass(frozen=True, eq=False, slots=True)
class Member:
    """One worker of the run: its number, its actor, its node."""

    worker: int
    actor: Any
    node: Node


@dataclass(eq=False, slots=True)
class _Seat:
    """A worker's state during one level."""

    member: Member
    clock: ClockOffset
    phase: Phase | None = None
    dispatched: int = 0
    """Open loop: the phase's items the worker had sent as of its last drain."""
    acked: bool = False
    stats: WorkerStats | None = None
    lost: bool = False
    in_flight: list[InFlight] = field(default_factory=list)
    heard_ns: int = field(default_factory=now_ns)
    asked_ns: int = 0
    retry_ns: int | None = None
    """When to ask again after the worker was unavailable; None: as soon as it answers."""
    unavailable_ns: int | None = None

    @property
    def active(self) -> bool:
        return self.stats is None and not self.lost


class RayPool:
    def __init__(self, members: list[Member], clocks: dict[str, ClockOffset]) -> None:
        self.members = members
        self.clocks = clocks
        self.lost_nodes: set[str] = set()

    def run(self, phases: list[Phase], collector: Collector) -> list[WorkerStats]:
        """Send one phase per worker, start them all once each has it, collect until done."""
        seats = [_Seat(m, self.clocks[m.node.node_id]) for m in self.members]
        for seat, phase in zip(seats, phases, strict=True):
            seat.phase = phase
            seat.member.actor.phase.remote(phase)
        asked = {self._ask(seat): seat for seat in seats}
        started = False
        deadline: int | None = None
        with deferred_signals() as deliver:
            while any(seat.active for seat in seats):
                try:
                    deliver()
                    if collector.should_stop():
                        self._stop(seats)
                        deadline = now_ns() + int(_STOP_GRACE_S * NS_PER_S)
                    for ref in _answers(asked):
                        self._take(ref, asked.pop(ref), collector)
                    self._ask_again(seats, asked, collector)
                    live = [seat for seat in seats if not seat.lost]
                    ready = live and all(seat.acked for seat in live)
                    held = collector.interrupted or collector.stopped
                    if ready and not (started or held):
                        collector.t_start_ns = self._start(live)
                        started = True
                    collector.progress()
                    if deadline is not None and now_ns() > deadline:
                        break
                except KeyboardInterrupt:
                    if collector.interrupted:
                        break
                    collector.interrupted = True
                    self._stop(seats)
                    deadline = now_ns() + int(_STOP_GRACE_S * NS_PER_S)
        collector.progress(force=True)
        return [stats for seat in seats if (stats := self._stats(seat)) is not None]

    def _ask(self, seat: _Seat) -> Any:
        seat.asked_ns = now_ns()
        return seat.member.actor.drain.remote(_DRAIN_WAIT_S)

    def _take(self, ref: Any, seat: _Seat, collector: Collector) -> None:
        try:
            drained: Drained = ray.get(ref)
        except ActorUnavailableError as exc:
            seat.unavailable_ns = seat.unavailable_ns or now_ns()
            if now_ns() - seat.unavailable_ns > _SILENT_NS:
                self._lose(seat, collector, first_line(exc))
            else:
                seat.retry_ns = now_ns() + _RETRY_NS
            return
        except RayActorError as exc:
            self._lose(seat, collector, first_line(exc))
            return
        seat.heard_ns = now_ns()
        seat.unavailable_ns = None
        seat.in_flight = drained.in_flight
        if drained.dispatched is not None:
            seat.dispatched = drained.dispatched
        for message in drained.messages:
            if message[0] == "ack":
                seat.acked = True
            elif message[0] == "records":
                collector.take(message[2])
            elif message[0] == "done":
                seat.stats = message[2]

    def _ask_again(self, seats: list[_Seat], asked: dict[Any, _Seat], collector: Collector) -> None:
        """A new drain for each active worker whose last one came back; a worker whose
        drain has gone unanswered too long is lost."""
        t = now_ns()
        waiting = set(asked.values())
        for seat in seats:
            if not seat.active:
                continue
            if seat in waiting:
                if t - seat.asked_ns > _SILENT_NS:
                    ray.kill(seat.member.actor, no_restart=True)
                    self._lose(seat, collector, f"no answer for {_SILENT_NS // NS_PER_S} s")
                continue
            if seat.retry_ns is None or t >= seat.retry_ns:
                seat.retry_ns = None
                asked[self._ask(seat)] = seat
        for ref in [ref for ref, seat in asked.items() if seat.lost]:
            del asked[ref]

    def _start(self, live: list[_Seat]) -> int:
        """Tell every worker to begin at one moment just ahead, on its node's clock."""
        start_ns = now_ns() + _START_MARGIN_NS
        for seat in live:
            seat.member.actor.start.remote(start_ns, seat.clock.offset_ns)
        return start_ns

    def _stop(self, seats: list[_Seat]) -> None:
        for seat in seats:
            if seat.active:
                seat.member.actor.stop.remote()

    def _lose(self, seat: _Seat, collector: Collector, why: str) -> None:
        """The worker is gone with its node: its in-flight requests become records, and
        so do the open-loop arrivals it was due to send before the loss was seen."""
        seat.lost = True
        node = seat.member.node
        self.lost_nodes.add(node.node_id)
        error = f"client worker {seat.member.worker} on node {node.label} was lost: {why}"
        records = [
            _lost_record(seat, f.index, f.t_scheduled_ns, f.max_tokens, f.input_tokens, error)
            for f in seat.in_flight
        ]
        unreported = f"{error}; due after its last report, sent or not"
        for index, t_due_ns, item in _due_unsent(seat, collector.t_start_ns, now_ns()):
            records.append(
                _lost_record(seat, index, t_due_ns, item.max_tokens, item.input_tokens, unreported)
            )
        if records:
            collector.take(orjson.dumps([r.to_json() for r in records]))

    def _stats(self, seat: _Seat) -> WorkerStats | None:
        node = seat.member.node
        clock = NodeClock(
            node=node.short_id,
            address=node.address,
            offset_ns=seat.clock.offset_ns,
            error_ns=seat.clock.error_ns,
            lost=seat.lost,
        )
        if seat.stats is not None:
            return replace(seat.stats, node=clock)
        if seat.lost:
            return WorkerStats(seat.member.worker, 0, 0, 0.0, 0.0, node=clock)
        return None


def _lost_record(
    seat: _Seat,
    index: int,
    t_scheduled_ns: int,
    max_tokens: int,
    input_tokens: int | None,
    error: str,
) -> RequestRecord:
    assert seat.phase is not None
    return RequestRecord(
        index=index,
        level=seat.phase.level,
        warmup=seat.phase.warmup,
        worker=seat.member.worker,
        t_send_ns=t_scheduled_ns,
        t_scheduled_ns=t_scheduled_ns,
        t_end_ns=max(seat.heard_ns, t_scheduled_ns),
        ok=False,
        max_tokens=max_tokens,
        input_tokens_target=input_tokens,
        error_kind=ErrorKind.CLIENT_LOST,
        error=error,
    )


def _due_unsent(seat: _Seat, t_start_ns: int, t_seen_ns: int) -> list[tuple[int, int, RequestItem]]:
    """The open-loop arrivals the worker had not sent by its last drain and was due to
    send before `t_seen_ns` (and before the level's end): (index, due, request)."""
    phase = seat.phase
    if phase is None or phase.offsets_ns is None or not t_start_ns:
        return []
    end_ns = t_seen_ns
    if phase.duration_ns is not None:
        end_ns = min(end_ns, t_start_ns + phase.duration_ns - 1)
    due = []
    for (index, item), offset in zip(
        phase.items[seat.dispatched :], phase.offsets_ns[seat.dispatched :], strict=True
    ):
        t_due_ns = t_start_ns + offset
        if t_due_ns > end_ns:
            break
        due.append((index, t_due_ns, item))
    return due


def _answers(asked: dict[Any, _Seat]) -> list[Any]:
    """The drains that came back within one poll."""
    if not asked:
        time.sleep(_DRAIN_WAIT_S)
        return []
    ready, _ = ray.wait(list(asked), num_returns=len(asked), timeout=2 * _DRAIN_WAIT_S)
    return list(ready)
