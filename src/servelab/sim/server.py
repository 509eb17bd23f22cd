"""The simulator in the running event loop: `start` it, get its URL, `stop` it."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from servelab.core.errors import ConfigError, EngineLaunchError
from servelab.sim.app import SimApp
from servelab.sim.config import SimConfig
from servelab.sim.stats import SimStats
from servelab.sim.stepcost import StepCost
from servelab.sim.timing import TimingSource

__all__ = ["RunningSim", "start"]

LISTEN_BACKLOG = 4096
"""A benchmark opens a thousand connections at once; the default 128 would drop SYNs."""
SHUTDOWN_TIMEOUT_S = 2.0
"""Bound on waiting for handlers once every stream has been cut."""


class RunningSim:
    """A simulator listening in this event loop; `stop()` ends it and flushes the truth log."""

    def __init__(self, *, url: str, app: SimApp, runner: web.AppRunner, site: web.TCPSite) -> None:
        self.url = url
        self._app = app
        self._runner = runner
        self._site = site

    def stats(self) -> SimStats:
        """What the simulator has done so far."""
        return self._app.stats()

    async def stop(self) -> None:
        """Stop listening, cut connections still being answered, flush the truth log."""
        await self._site.stop()
        self._app.abort_all()
        await self._runner.cleanup()
        self._app.close()


async def start(
    config: SimConfig,
    *,
    timing: TimingSource | None = None,
    step_cost: StepCost | None = None,
    worker: int = 0,
    record_path: Path | None = None,
) -> RunningSim:
    """Start listening on the running loop; port 0 picks a free port (see `RunningSim.url`).

    `timing` replaces the config's fixed ttft/itl schedule; `step_cost` replaces its
    profile (and makes the engine a batching one); `record_path` overrides
    `config.record_path` (each worker process writes its own). Raises EngineLaunchError
    when the address cannot be bound, ConfigError for a step cost with several workers.
    """
    if step_cost is not None and config.workers > 1:
        raise ConfigError("a batching engine runs in one process: workers must be 1")
    app = SimApp(
        config,
        worker=worker,
        record_path=record_path or config.record_path,
        timing=timing,
        step_cost=step_cost,
    )
    runner = web.AppRunner(
        app.application(),
        access_log=None,
        handler_cancellation=True,
        shutdown_timeout=SHUTDOWN_TIMEOUT_S,
    )
    await runner.setup()
    site = web.TCPSite(
        runner,
        config.host,
        config.port,
        backlog=LISTEN_BACKLOG,
        reuse_port=config.workers > 1,
    )
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        app.close()
        address = f"{config.host}:{config.port}"
        raise EngineLaunchError(f"simulator cannot listen on {address}: {exc}") from exc
    host, port = runner.addresses[0][:2]
    host = f"[{host}]" if ":" in host else host
    return RunningSim(url=f"http://{host}:{port}", app=app, runner=runner, site=site)
