"""The demo (`servelab run`) under a memory limit: does it pass, and how close to the limit.

A newcomer's laptop may have 8 GiB with half of it in use. The demo runs here inside a
cgroup (v1 memory controller, written as root; nothing else is needed) whose limit is
`--limit-gib`, with the engine, the load generator and servelab itself all in it: every
process the demo starts inherits the cgroup. Printed: the exit code, the cgroup's peak
(`memory.max_usage_in_bytes`, page cache included: the kernel reclaims that cache before it
fails anything) and the peak resident memory (`memory.stat` total_rss + total_shmem,
sampled at 5 Hz), each against the limit, how often the limit was hit (`memory.failcnt`)
and whether the kernel's OOM killer ran.

    sudo python benchmarks/demo_memory.py --limit-gib 3 [-- servelab run options]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup/memory")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-gib", type=float, default=3.0)
    parser.add_argument("--runs-dir", default="servelab-runs")
    parser.add_argument("rest", nargs="*", help="more `servelab run` options, after --")
    args = parser.parse_args()
    if not (CGROUP_ROOT / "memory.limit_in_bytes").exists():
        print(f"no cgroup v1 memory controller at {CGROUP_ROOT}", file=sys.stderr)
        return 2
    group = CGROUP_ROOT / f"servelab-demo-{os.getpid()}"
    group.mkdir()
    limit = int(args.limit_gib * 2**30)
    try:
        (group / "memory.limit_in_bytes").write_text(str(limit))
        swap_limit = group / "memory.memsw.limit_in_bytes"
        if swap_limit.exists():  # no swap to hide in either
            swap_limit.write_text(str(limit))
        servelab = shutil.which("servelab") or f"{Path(sys.executable).parent}/servelab"
        argv = [servelab, "run", "--runs-dir", args.runs_dir, *args.rest]
        started = time.monotonic()

        def enter_the_group() -> None:
            (group / "cgroup.procs").write_text(str(os.getpid()))

        child = subprocess.Popen(argv, preexec_fn=enter_the_group)
        peak_rss = 0
        while child.poll() is None:
            peak_rss = max(peak_rss, _rss(group))
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        peak = int((group / "memory.max_usage_in_bytes").read_text())
        hits = int((group / "memory.failcnt").read_text())
        oom = (group / "memory.oom_control").read_text()
        killed = next((line.split()[1] for line in oom.splitlines() if "oom_kill " in line), "0")
    finally:
        _remove(group)
    print(f"command: {' '.join(argv)}")
    print(f"exit code: {child.returncode} after {elapsed:.0f} s")
    print(f"limit: {limit / 2**30:.2f} GiB")
    print(f"peak, page cache included: {peak / 2**30:.2f} GiB ({peak / limit:.2f} of the limit)")
    print(f"peak RSS (sampled at 5 Hz): {peak_rss / 2**30:.2f} GiB ({peak_rss / limit:.2f})")
    print(f"times the limit was hit: {hits}; OOM kills: {killed}")
    return child.returncode


def _rss(group: Path) -> int:
    """Resident anonymous and shared memory of the group's processes (memory.stat)."""
    stat = dict(line.split() for line in (group / "memory.stat").read_text().splitlines())
    return int(stat.get("total_rss", 0)) + int(stat.get("total_shmem", 0))


def _remove(group: Path) -> None:
    """Move any process left in the group out, then remove it."""
    for pid in (group / "cgroup.procs").read_text().split():
        (CGROUP_ROOT / "cgroup.procs").write_text(pid)
    for _ in range(50):
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.1)


if __name__ == "__main__":
    raise SystemExit(main())
