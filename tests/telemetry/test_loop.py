"""The background loop's duty cap: a typically slow tick is asked less often, one slow tick
is not, and no tick waits longer than the cap's ceiling.

A /metrics page that once took a second (the server busy with a burst of new requests)
stretched the interval to twenty seconds and left a whole level unscraped.
"""

from __future__ import annotations

import time

import pytest

from servelab.telemetry._loop import ErrorLog, Periodic


def _loop(interval_s: float, *, max_interval_s: float) -> Periodic:
    return Periodic(
        "test-loop",
        interval_s,
        lambda: None,
        ErrorLog(),
        label="test",
        max_duty=0.05,
        max_interval_s=max_interval_s,
    )


def test_a_typically_slow_tick_stretches_the_interval_up_to_the_ceiling():
    loop = _loop(0.1, max_interval_s=1.0)
    assert loop.stretched(0.001) == 0.1
    assert loop.stretched(0.03) == 0.6
    assert loop.stretched(1.07) == 1.0


@pytest.mark.timing
def test_one_slow_tick_among_fast_ones_does_not_stretch_the_interval():
    times = iter([0.2] + [0.0] * 1000)
    ticks: list[float] = []

    def tick() -> None:
        ticks.append(time.perf_counter())
        time.sleep(next(times))

    loop = Periodic(
        "test-loop", 0.02, tick, ErrorLog(), label="test", max_duty=0.05, max_interval_s=10.0
    )
    loop.start()
    time.sleep(1.5)
    loop.signal_stop()
    assert loop.join(5.0)
    # The slow first tick alone would stretch the interval to 4 s (one tick in 1.5 s); the
    # median of the window brings it back to 0.02 s once two fast ticks follow.
    assert len(ticks) >= 10, len(ticks)
