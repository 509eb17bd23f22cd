"""A worker's demand for a core: its CPU time plus its wait in the run queue. On a shared
core a saturated worker gets half the CPU but still wants all of it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from servelab.bench.metrics import CLIENT_BOUND_CPU_PCT, PREEMPTED_MOSTLY, WorkerStats

MEASURE = """
import os, sys, time
from servelab.bench.worker import RunQueueWait, context_switches
os.sched_setaffinity(0, {int(sys.argv[1])})
waits = RunQueueWait()
busy_s, period_s = float(sys.argv[2]), float(sys.argv[3])
w0, c0, t0, s0 = waits.read_s(), time.process_time(), time.monotonic(), context_switches()
while time.monotonic() - t0 < 1.5:
    start = time.monotonic()
    while time.monotonic() - start < busy_s * period_s:
        pass
    if busy_s < 1:
        time.sleep((1 - busy_s) * period_s)
wall, s1 = time.monotonic() - t0, context_switches()
voluntary, involuntary = s1[0] - s0[0], s1[1] - s0[1]
print(time.process_time() - c0, waits.read_s() - w0, wall, involuntary / (voluntary + involuntary))
"""


def _measure(core: int, busy_share: float, period_s: float = 0.01) -> WorkerStats:
    """A process on `core` that computes `busy_share` of each `period_s` for 1.5 s: what
    it measured of itself."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(core), str(busy_share), str(period_s)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    cpu_s, wait_s, wall_s, preempted = map(float, done.stdout.split())
    return WorkerStats(0, 0, 0, cpu_s, wall_s, wait_s=wait_s, preempted_share=preempted)


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
    assert stats.preempted_share is not None and stats.preempted_share > PREEMPTED_MOSTLY
    assert stats.demand_pct > CLIENT_BOUND_CPU_PCT


@pytest.mark.timing
def test_a_worker_with_room_to_spare_wants_little_even_beside_a_busy_loop(hog_on_core: int):
    """The negative control: computing a fifth of each 10 ms, it waits for the core only
    when it wakes, and wants far less than a core."""
    stats = _measure(hog_on_core, busy_share=0.2)
    assert stats.demand_pct < CLIENT_BOUND_CPU_PCT


@pytest.mark.timing
def test_a_worker_woken_thousands_of_times_a_second_wants_only_its_cpu(hog_on_core: int):
    """A loop that wakes for every chunk (here 2,000 times a second, 1% of each 0.5 ms
    busy) blocks for I/O at each switch: whatever it waited for the core at each wake-up
    is latency, not work, and what it wanted is its CPU time."""
    stats = _measure(hog_on_core, busy_share=0.01, period_s=0.0005)
    assert stats.preempted_share is not None and stats.preempted_share < PREEMPTED_MOSTLY
    assert stats.demand_pct == pytest.approx(100.0 * stats.cpu_s / stats.wall_s)
    assert stats.demand_pct < CLIENT_BOUND_CPU_PCT


def test_the_wait_counts_as_wanted_only_for_a_thread_mostly_preempted():
    """A thread that ran 2% and waited 93% of a level (the vLLM step-budget level that
    read as a saturated client): mostly blocking for I/O, it wanted 2%; mostly
    preempted, 95%."""
    blocking = WorkerStats(0, 0, 0, 0.2, 10.0, wait_s=9.3, preempted_share=0.01)
    preempted = WorkerStats(0, 0, 0, 0.2, 10.0, wait_s=9.3, preempted_share=0.9)
    unknown = WorkerStats(0, 0, 0, 0.2, 10.0, wait_s=9.3)
    assert blocking.demand_pct == pytest.approx(2.0) == unknown.demand_pct
    assert preempted.demand_pct == pytest.approx(95.0)
