"""The worker's own lag probe: it reads the event loop's lag, not a timer's granularity."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable

import pytest
import uvloop

from servelab.bench.worker import _watch_loop_lag

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


def reads_no_lag(lags: list[int]) -> None:
    assert statistics.median(lags) < 0.05 * MS


def reads_lag_of(lags: list[int], work_ns: int) -> None:
    assert statistics.median(lags) == pytest.approx(work_ns, rel=0.5)


@pytest.mark.timing
def test_an_idle_loop_reads_no_lag():
    """A 10 ms timer overshoots by up to a millisecond on an idle loop: that is no lag."""
    lags = sample_lags()
    assert len(lags) > 20
    reads_no_lag(lags)


def test_a_probe_reading_75_us_on_an_idle_loop_reads_lag():
    """The negative control of the idle check: a median of 75 µs (1.5x its 0.05 ms bound,
    as a probe counting a share of the timer's overshoot would read) is lag; 25 µs is not."""
    with pytest.raises(AssertionError):
        reads_no_lag([75_000] * 30)
    reads_no_lag([25_000] * 30)


@pytest.mark.timing
def test_a_loop_blocked_by_work_reads_that_work_as_lag():
    lags = sample_lags(busy=lambda: time.sleep(0.004))
    reads_lag_of(lags, 4 * MS)


@pytest.mark.parametrize("read_ms", [1.0, 7.0])
def test_4_ms_of_work_read_as_1_or_7_ms_is_not_that_work(read_ms):
    """The negative control of the blocked check: 3 ms off the 4 ms of work (1.5x its 2 ms
    margin, within twice it) either way is caught; 1 ms off is not."""
    with pytest.raises(AssertionError):
        reads_lag_of([round(read_ms * MS)] * 30, 4 * MS)
    reads_lag_of([round((4 + (read_ms - 4) / 3) * MS)] * 30, 4 * MS)
