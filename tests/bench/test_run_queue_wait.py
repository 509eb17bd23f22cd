"""A worker's demand for a core: its CPU time plus its wait in the run queue. On a shared
core a saturated worker gets half the CPU but still wants all of it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from servelab.bench.metrics import CLIENT_BOUND_CPU_PCT, WorkerStats

MEASURE = """
import os, sys, time
from servelab.bench.worker import RunQueueWait
os.sched_setaffinity(0, {int(sys.argv[1])})
waits = RunQueueWait()
busy_s, period_s = float(sys.argv[2]), 0.01
w0, c0, t0 = waits.read_s(), time.process_time(), time.monotonic()
while time.monotonic() - t0 < 1.5:
    start = time.monotonic()
    while time.monotonic() - start < busy_s * period_s:
        pass
    if busy_s < 1:
        time.sleep((1 - busy_s) * period_s)
wall = time.monotonic() - t0
print(time.process_time() - c0, waits.read_s() - w0, wall)
"""


def _measure(core: int, busy_share: float) -> WorkerStats:
    """A process on `core` that computes `busy_share` of each 10 ms for 1.5 s: what it
    measured of itself."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(core), str(busy_share)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    cpu_s, wait_s, wall_s = map(float, done.stdout.split())
    return WorkerStats(0, 0, 0, cpu_s, wall_s, wait_s=wait_s)


@pytest.fixture
def hog_on_core() -> int:
    """A busy loop at the caller's priority pinned to one of the usable cores, for the test."""
    core = min(os.sched_getaffinity(0))
    hog = subprocess.Popen(
        [sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"]
    )
    yield core
    hog.kill()
    hog.wait()


@pytest.mark.timing
def test_a_saturated_worker_sharing_its_core_wants_all_of_it_and_gets_about_half(
    hog_on_core: int,
):
    """A busy loop beside it on the same core takes about half the core (CFS shares a core
    between two runnable threads of one priority): CPU time alone reads it as a worker
    with room to spare, its wait for the core says it had none."""
    stats = _measure(hog_on_core, busy_share=1.0)
    assert 100.0 * stats.cpu_s / stats.wall_s < 75.0 < CLIENT_BOUND_CPU_PCT
    assert stats.demand_pct > CLIENT_BOUND_CPU_PCT


@pytest.mark.timing
def test_a_worker_with_room_to_spare_wants_little_even_beside_a_busy_loop(hog_on_core: int):
    """The negative control: computing a fifth of each 10 ms, it waits for the core only
    when it wakes, and wants far less than a core."""
    stats = _measure(hog_on_core, busy_share=0.2)
    assert stats.demand_pct < CLIENT_BOUND_CPU_PCT
