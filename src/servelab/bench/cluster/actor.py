"""A client worker inside a Ray actor: the same `Worker`, fed by calls instead of a pipe.

The worker's event loop runs on a thread of the actor; the driver calls `phase`, `start`
and `stop` to command it and long-polls `drain` for what it sent back, so records travel
in batches and wait on the actor no longer than one poll. Every stamp leaves the actor
on the driver's clock: `start` carries this node's measured offset, and the actor moves
the start onto its own clock and its records' stamps back.

`SERVELAB_CLOCK_SHIFT_NS`, in a node's environment, makes the node's clock read that
much ahead (its readings, the start it is given and the stamps it returns): a stand-in
for a host whose monotonic clock counts from another boot, for the offset's tests.
"""

from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

import orjson

from servelab.bench.endpoint import EndpointConfig, RequestItem
from servelab.bench.worker import EXIT, STOP, Phase, Start, Worker, serve
from servelab.core.clock import now_ns

__all__ = ["CLOCK_SHIFT_ENV", "ClientWorkerHost", "Drained", "InFlight"]

CLOCK_SHIFT_ENV = "SERVELAB_CLOCK_SHIFT_NS"
_CHECKPOINT_TIMEOUT_S = 5.0
_EXIT_JOIN_S = 5.0
_STAMPS = ("t_send_ns", "t_scheduled_ns", "t_end_ns")


@dataclass(frozen=True, slots=True)
class InFlight:
    """A request the worker had sent and not yet recorded, on the driver's clock."""

    index: int
    level: int
    warmup: bool
    t_scheduled_ns: int
    max_tokens: int
    input_tokens: int | None


@dataclass(frozen=True, slots=True)
class Drained:
    """What one `drain` returns: the worker's messages, and what was in flight with them."""

    messages: list[Any]
    in_flight: list[InFlight]
    dispatched: int | None = None
    """Open loop: the phase's items sent as of the messages; None where not read."""


class ClientWorkerHost:
    """The actor's body (wrapped by `ray.remote` in `fleet`)."""

    def __init__(self, worker: int, endpoint: EndpointConfig) -> None:
        self.shift_ns = int(os.environ.get(CLOCK_SHIFT_ENV, "0"))
        self.to_driver_ns = 0
        """Added to a local perf_counter stamp to put it on the driver's clock."""
        self.commands: queue.Queue[Any] = queue.Queue()
        self.outbox = _Outbox()
        self.phase_of: tuple[int, bool] = (0, False)
        self.worker = Worker(worker, endpoint, _QueueCommands(self.commands), self.outbox)
        self.thread = threading.Thread(target=self._serve, daemon=True, name="servelab-worker")
        self.thread.start()

    def _serve(self) -> None:
        serve(self.worker)

    def ready(self) -> bool:
        return True

    def clock(self) -> int:
        """This node's clock."""
        return now_ns() + self.shift_ns

    def phase(self, phase: Phase) -> None:
        self.phase_of = (phase.level, phase.warmup)
        self.commands.put(phase)

    def start(self, start_ns: int, offset_ns: int) -> None:
        """Begin at `start_ns` on the driver's clock; this node's clock is `offset_ns` ahead."""
        self.to_driver_ns = self.shift_ns - offset_ns
        self.commands.put(Start(start_ns - self.to_driver_ns))

    def stop(self) -> None:
        self.commands.put(STOP)

    def exit(self) -> None:
        self.commands.put(EXIT)
        self.thread.join(timeout=_EXIT_JOIN_S)

    def drain(self, wait_s: float) -> Drained:
        """The messages sent since the last drain (waiting up to `wait_s` for one), and
        the requests in flight as of the last of them."""
        self.outbox.wait(wait_s)
        messages, in_flight, dispatched = self._checkpoint()
        return Drained(
            [self._on_driver_clock(message) for message in messages], in_flight, dispatched
        )

    def _checkpoint(self) -> tuple[list[Any], list[InFlight], int | None]:
        """The outbox and the in-flight requests, both read on the worker's loop right
        after a flush, so that each request sent is in exactly one of them; read here
        (in-flight unknown, so none) when the loop is not running or does not answer."""
        loop = self.worker.loop
        future: Future[tuple[list[Any], dict[int, tuple[int, RequestItem]], int]] = Future()

        def read() -> None:
            if future.set_running_or_notify_cancel():
                pending = self.worker.checkpoint()
                future.set_result((self.outbox.take(), pending, self.worker.dispatched))

        try:
            if loop is None:
                raise RuntimeError("not running yet")
            loop.call_soon_threadsafe(read)
            messages, pending, dispatched = future.result(timeout=_CHECKPOINT_TIMEOUT_S)
        except RuntimeError:
            return self.outbox.take(), [], None
        except FutureTimeout:
            if future.cancel():
                return self.outbox.take(), [], None
            messages, pending, dispatched = future.result()  # begun on the loop: done at once
        level, warmup = self.phase_of
        in_flight = [
            InFlight(
                index=index,
                level=level,
                warmup=warmup,
                t_scheduled_ns=t_scheduled + self.to_driver_ns,
                max_tokens=item.max_tokens,
                input_tokens=item.input_tokens,
            )
            for index, (t_scheduled, item) in pending.items()
        ]
        return messages, in_flight, dispatched

    def _on_driver_clock(self, message: Any) -> Any:
        if message[0] != "records" or not self.to_driver_ns:
            return message
        rows = orjson.loads(message[2])
        for row in rows:
            for name in _STAMPS:
                row[name] += self.to_driver_ns
        return (message[0], message[1], orjson.dumps(rows))


class _QueueCommands:
    def __init__(self, commands: queue.Queue[Any]) -> None:
        self.commands = commands

    def recv(self) -> Any:
        return self.commands.get()


class _Outbox:
    """The worker's messages, kept in order until the driver drains them."""

    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.ready = threading.Condition()

    def put(self, message: Any, /) -> None:
        with self.ready:
            self.messages.append(message)
            self.ready.notify_all()

    def wait(self, timeout_s: float) -> None:
        with self.ready:
            self.ready.wait_for(lambda: bool(self.messages), timeout=timeout_s)

    def take(self) -> list[Any]:
        with self.ready:
            messages, self.messages = self.messages, []
        return messages
