"""The simulator as a process, the way the launcher runs it: serve until a signal.

With `workers > 1`, the process supervises that many worker processes that each listen
on the same port through SO_REUSEPORT (the kernel spreads connections across them), so
the simulator can use more than one core. Each worker writes its own truth log next to
`record_path` while running (`truth.jsonl` -> `truth.worker0.jsonl`, ...); at shutdown
the supervisor concatenates them into `record_path` and removes them. Fault decisions are
seeded per worker (seed + worker index), so they repeat only as far as the kernel hands
connections to workers in the same order.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path

from servelab.core.errors import EngineLaunchError
from servelab.core.processes import die_with_parent
from servelab.sim.config import SimConfig
from servelab.sim.server import start

__all__ = ["serve", "worker_record_path"]

logger = logging.getLogger(__name__)

WORKER_START_TIMEOUT_S = 30.0
WORKER_STOP_TIMEOUT_S = 10.0
FULL_GC_INTERVAL_S = 60.0
_NEVER = 1 << 30
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def serve(config: SimConfig, *, on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until SIGTERM or SIGINT, then flush the truth log and return.

    `on_ready` gets the base URL once every worker is listening.
    """
    if config.workers == 1:
        _serve_one(config, worker=0, record_path=config.record_path, on_ready=on_ready)
    else:
        _supervise(config, on_ready)


def worker_record_path(record_path: Path, worker: int) -> Path:
    """Where worker `worker` writes its truth log while running."""
    return record_path.with_name(f"{record_path.stem}.worker{worker}{record_path.suffix}")


def _serve_one(
    config: SimConfig,
    *,
    worker: int,
    record_path: Path | None,
    on_ready: Callable[[str], None] | None,
) -> None:
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(_serve_until_signalled(config, worker, record_path, on_ready))


async def _serve_until_signalled(
    config: SimConfig,
    worker: int,
    record_path: Path | None,
    on_ready: Callable[[str], None] | None,
) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in _STOP_SIGNALS:
        loop.add_signal_handler(signum, stop.set)
    sim = await start(config, worker=worker, record_path=record_path)
    _quiet_gc(loop)
    logger.info("simulator worker %d listening on %s", worker, sim.url)
    if on_ready is not None:
        on_ready(sim.url)
    try:
        await stop.wait()
    finally:
        await sim.stop()


def _quiet_gc(loop: asyncio.AbstractEventLoop) -> None:
    """Keep the cyclic garbage collector from pausing the chunk scheduler.

    A full collection walks every live object (some 50 per open stream) and took 50 to
    100 ms with a thousand streams, delaying every chunk due meanwhile; yet in steady
    serving it finds no garbage, since requests free their objects by reference count.
    So: freeze what exists at start (modules, the app), keep the cheap young-generation
    passes, and run the older ones only every FULL_GC_INTERVAL_S.
    """
    gc.freeze()
    young, _, _ = gc.get_threshold()
    gc.set_threshold(young, _NEVER, _NEVER)

    def collect() -> None:
        gc.collect()
        loop.call_later(FULL_GC_INTERVAL_S, collect)

    loop.call_later(FULL_GC_INTERVAL_S, collect)


def _supervise(config: SimConfig, on_ready: Callable[[str], None] | None) -> None:
    stop = threading.Event()
    previous = {signum: signal.signal(signum, lambda *_: stop.set()) for signum in _STOP_SIGNALS}
    context = multiprocessing.get_context("spawn")
    workers: list[BaseProcess] = []
    try:
        with _reserved_port(config.host, config.port) as port:
            worker_config = config.model_copy(update={"port": port})
            readers: list[Connection] = []
            for index in range(config.workers):
                reader, writer = context.Pipe(duplex=False)
                record_path = _record_path(config, index)
                process = context.Process(
                    target=_worker_main,
                    args=(worker_config, index, record_path, writer, os.getpid()),
                    name=f"servelab-sim-worker{index}",
                )
                process.start()
                workers.append(process)
                readers.append(reader)
            url = _wait_ready(workers, readers, stop)
        if url is not None and on_ready is not None:
            on_ready(url)
        sentinels = [process.sentinel for process in workers]
        while not stop.is_set():
            if wait(sentinels, timeout=0.2):
                dead = next(process for process in workers if not process.is_alive())
                raise EngineLaunchError(f"{dead.name} exited with code {dead.exitcode}")
    finally:
        _stop_workers(workers)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if config.record_path is not None:
            _merge_truth(config.record_path, config.workers)


def _worker_main(
    config: SimConfig, worker: int, record_path: Path | None, ready: Connection, parent_pid: int
) -> None:
    die_with_parent(parent_pid)
    _serve_one(config, worker=worker, record_path=record_path, on_ready=ready.send)


def _wait_ready(
    workers: list[BaseProcess], readers: list[Connection], stop: threading.Event
) -> str | None:
    """The URL once every worker listens; None if a stop signal came first."""
    deadline = time.monotonic() + WORKER_START_TIMEOUT_S
    waiting = list(readers)
    url: str | None = None
    while waiting:
        if stop.is_set():
            return None
        if time.monotonic() > deadline:
            raise EngineLaunchError(
                f"simulator workers not listening after {WORKER_START_TIMEOUT_S:g} s"
            )
        for reader in wait(waiting, timeout=0.2):
            assert isinstance(reader, Connection)
            try:
                url = reader.recv()
            except EOFError:
                raise EngineLaunchError("a simulator worker exited while starting") from None
            waiting.remove(reader)
    return url


def _stop_workers(workers: list[BaseProcess]) -> None:
    for process in workers:
        if process.is_alive():
            process.terminate()  # SIGTERM: each worker flushes its truth log
    for process in workers:
        process.join(WORKER_STOP_TIMEOUT_S)
        if process.is_alive():
            process.kill()
            process.join()


def _record_path(config: SimConfig, worker: int) -> Path | None:
    return None if config.record_path is None else worker_record_path(config.record_path, worker)


def _merge_truth(record_path: Path, workers: int) -> None:
    with record_path.open("wb") as merged:
        for index in range(workers):
            part = worker_record_path(record_path, index)
            if part.exists():
                merged.write(part.read_bytes())
                part.unlink()


@contextlib.contextmanager
def _reserved_port(host: str, port: int) -> Iterator[int]:
    """Hold the port (a free one for 0) with SO_REUSEPORT until the workers have bound it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind((host, port))
        yield int(holder.getsockname()[1])


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when it is installed: its transports write with less overhead."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
