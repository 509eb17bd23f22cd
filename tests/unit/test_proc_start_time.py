"""A process's start time from the one /proc/PID/stat reader, and what rests on it: the
state file's recognition of a recorded process (a recycled pid is someone else), and the
GPU watch's test of which processes are the engine's."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from servelab.core.processes import CLOCK_TICKS, proc_stat
from servelab.engines.gpu import _belongs
from servelab.engines.state import ProcessId

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    """A process started now, in a group of its own; killed after the test."""
    process = subprocess.Popen(SLEEPER, start_new_session=True)
    yield process
    process.kill()
    process.wait()


def test_the_start_time_is_when_the_process_started(child: subprocess.Popen[bytes]):
    uptime_s = float(Path("/proc/uptime").read_text().split()[0])
    stat = proc_stat(child.pid)
    assert stat is not None and stat.start_ticks is not None
    assert abs(stat.start_ticks / CLOCK_TICKS - uptime_s) < 5  # started a moment ago
    mine = proc_stat(os.getpid())
    assert mine is not None and mine.start_ticks is not None
    assert mine.start_ticks <= stat.start_ticks  # this test's process came first


def test_a_line_cut_short_of_the_start_time_has_none(tmp_path: Path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "stat").write_text("7 (x y) S 1 7 7 0 -1 0 0 0 0 0 3 4 0 0\n")
    stat = proc_stat(7, tmp_path)
    assert stat is not None and stat.start_ticks is None and stat.session == 7


def test_a_recorded_process_is_recognised_by_its_start_time(child: subprocess.Popen[bytes]):
    recorded = ProcessId.of(child.pid)
    assert recorded.start_ticks is not None and recorded.alive()
    # the same pid started at another time is another process: never signalled as ours
    assert not ProcessId(pid=child.pid, start_ticks=recorded.start_ticks + 1).alive()
    child.kill()
    child.wait()
    assert not recorded.alive()


def test_the_engines_processes_are_its_group_and_what_descends_from_it(
    child: subprocess.Popen[bytes],
):
    assert _belongs(child.pid, child.pid)  # the leader of its own group
    assert _belongs(os.getpid(), os.getpgid(0))  # a member of the group
    assert _belongs(child.pid, os.getpgid(0))  # left the group, but descends from this one
    assert not _belongs(os.getpid(), child.pid)  # the engine's parent is not the engine's
    assert _belongs(2**22 + 1, child.pid)  # not in this namespace: NVML's host pid, kept
