"""A child that called die_with_parent ends within a second of its parent's SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from servelab.core.processes import die_with_parent, proc_stat

_PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {child!r}])
print(child.pid, flush=True)
time.sleep(120)
"""
_CHILD = """
import os, time
from servelab.core.processes import die_with_parent
die_with_parent(os.getppid())
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = proc_stat(pid)
    return not (stat is not None and stat.state == "Z")


@pytest.mark.timing
def test_child_dies_within_a_second_of_its_parent():
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT.format(child=_CHILD)], stdout=subprocess.PIPE, text=True
    )
    child_pid = int(parent.stdout.readline())
    time.sleep(1.0)  # the child has imported servelab and armed both nets
    assert _alive(child_pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    killed_at = time.monotonic()
    while _alive(child_pid) and time.monotonic() - killed_at < 5:
        time.sleep(0.05)
    assert not _alive(child_pid), "the child outlived its parent"
    # the kernel's SIGKILL at the parent's death, else the 0.25 s poll: well inside 1 s
    assert time.monotonic() - killed_at < 1.0


def test_a_child_whose_parent_is_already_gone_exits_at_once():
    code = subprocess.run(
        [
            sys.executable,
            "-c",
            "from servelab.core.processes import die_with_parent\n"
            "die_with_parent(1 if __import__('os').getppid() != 1 else 2)\n"
            "import time; time.sleep(30)",
        ],
        timeout=10,
    ).returncode
    assert code == 128 + signal.SIGKILL


def test_the_watch_thread_is_a_daemon(monkeypatch):
    started = []
    monkeypatch.setattr("threading.Thread.start", lambda self: started.append(self))
    monkeypatch.setattr("servelab.core.processes.request_parent_death_signal", lambda sig: True)
    die_with_parent(os.getppid())
    assert started and started[0].daemon


def test_proc_stat_reads_this_process():
    stat = proc_stat(os.getpid())
    assert stat is not None and stat.pid == os.getpid()
    assert stat.session == os.getsid(0) and stat.pgrp == os.getpgid(0)
    assert stat.ppid == os.getppid() and stat.state in "RS"
    assert stat.cpu_s == stat.user_s + stat.system_s > 0
    assert proc_stat(2**22 + 1) is None  # past pid_max: no such process
