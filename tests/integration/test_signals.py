"""SIGTERM and SIGHUP end a run like Ctrl-C; a SIGKILLed run leaves no worker behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from servelab.core.processes import all_proc_stats, proc_stat
from tests.conftest import SERVELAB


def _bench(url: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    """`servelab bench`, its output in files: a worker that outlives it must not hang a pipe."""
    return subprocess.Popen(
        [*SERVELAB, "bench", "--url", url, "--warmup", "0", "--out", str(out), *extra],
        stdout=(out.parent / "stdout.txt").open("w"),
        stderr=(out.parent / "stderr.txt").open("w"),
        text=True,
    )


def _stderr(out: Path) -> str:
    return (out.parent / "stderr.txt").read_text()


def _wait_for_records(out: Path, count: int) -> None:
    requests = out / "requests.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if requests.exists() and len(requests.read_text().splitlines()) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} records were written")


def _children(pid: int) -> list[int]:
    return [s.pid for s in all_proc_stats() if s.state != "Z" and s.ppid == pid]


def _alive(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat.state != "Z"


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_stop_signal_keeps_the_summary_and_says_which_signal(start_sim, tmp_path, sig, code):
    sim = start_sim(ttft_ms=5, itl_ms=5)
    out = tmp_path / "run"
    process = _bench(
        sim.url, out, "--concurrency", "4", "--num-requests", "4000", "--output-len", "20"
    )
    try:
        _wait_for_records(out, 8)
    finally:
        process.send_signal(sig)
    process.wait(timeout=60)
    stderr = _stderr(out)
    assert process.returncode == code, stderr
    assert "Traceback" not in stderr and "resource_tracker" not in stderr
    assert f"partial results are in {out}" in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    level = summary["levels"][0]
    assert level["interrupted"] and 8 <= level["completed"] < 4000
    assert level["cancelled"] >= 1  # the in-flight requests, recorded as cancelled


@pytest.mark.timing
def test_sigkill_of_the_parent_takes_its_workers_within_a_second(start_sim, tmp_path):
    # Records flood the shared result queue: once the parent is gone nobody drains it, and a
    # worker's queue feeder blocks on the full pipe (its siblings hold the read end).
    sim = start_sim(ttft_ms=0, itl_ms=0)
    out = tmp_path / "run"
    process = _bench(
        sim.url,
        out,
        "--workers",
        "2",
        "--concurrency",
        "128",
        "--output-len",
        "1",
        "--duration",
        "120s",
    )
    try:
        deadline = time.monotonic() + 60
        while len(_children(process.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)  # two workers and multiprocessing's resource tracker
        time.sleep(2.0)  # the level is under way
        workers = _children(process.pid)
        assert len(workers) >= 3, _stderr(out)
    finally:
        os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    killed_at = time.monotonic()
    while any(_alive(w) for w in workers) and time.monotonic() - killed_at < 10:
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers), "a worker outlived its parent"
    # a worker dies by the kernel's SIGKILL at its parent's death (PR_SET_PDEATHSIG), else
    # by its 0.25 s poll of the parent (core/processes.py): either well inside 1.5 s
    assert time.monotonic() - killed_at < 1.5
