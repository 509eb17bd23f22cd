"""The worker's own lag probe: it reads the event loop's lag, not a timer's granularity."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable

import pytest
import uvloop

from servelab.bench.worker import _watch_loop_lag

pytestmark = pytest.mark.timing

MS = 1_000_000


def sample_lags(busy: Callable[[], None] | None = None, seconds: float = 0.5) -> list[int]:
    """Run the probe for `seconds` on uvloop (as workers do), beside a task calling `busy`."""

    async def main() -> list[int]:
        lags: list[int] = []
        probe = asyncio.create_task(_watch_loop_lag(lags))
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if busy is not None:
                busy()
            await asyncio.sleep(0 if busy is not None else 0.05)
        probe.cancel()
        return lags

    return uvloop.run(main())


def test_an_idle_loop_reads_no_lag():
    """A 10 ms timer overshoots by up to a millisecond on an idle loop: that is no lag."""
    lags = sample_lags()
    assert len(lags) > 20
    assert statistics.median(lags) < 0.05 * MS


def test_a_loop_blocked_by_work_reads_that_work_as_lag():
    lags = sample_lags(busy=lambda: time.sleep(0.004))
    assert statistics.median(lags) == pytest.approx(4 * MS, rel=0.5)
