"""Does `servelab run`'s default sweep find the same knee every time?

Runs the demo (`servelab run`, the embedded engine on this machine's CPU, the adaptive
sweep) several times in a row and prints, per run, the levels with their total tok/s, the
knee and why the sweep ended; then how many runs found a knee and how far apart the knees
were, in levels. The claim is that ratio: on the 2-core machine every run finds a knee, all
at the same level or one apart, although single levels differ by several percent run to run.

    python benchmarks/knee_stability.py [--runs 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

from servelab.bench.knee import find_knee
from servelab.bench.results import BenchSummary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="Keep the run directories here.")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="servelab-knee-"))
    knees: list[int | None] = []
    by_level: dict[int, list[float]] = {}
    for i in range(args.runs):
        out = root / f"run-{i}"
        done = subprocess.run(
            [sys.executable, "-m", "servelab", "run", "--out", str(out)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            print(f"run {i}: exit {done.returncode}\n{done.stderr[-2000:]}")
            return 1
        summary = BenchSummary.model_validate(json.loads((out / "summary.json").read_text()))
        knee = find_knee(summary.levels)
        knees.append(knee.concurrency)
        for s in summary.levels:
            by_level.setdefault(s.max_concurrency or 0, []).append(s.total_throughput)
        levels = ", ".join(
            f"{s.max_concurrency}: {s.total_throughput:,.0f}" for s in summary.levels
        )
        stop = summary.sweep_stop.explanation if summary.sweep_stop else "?"
        print(f"run {i}: {levels} tok/s total | knee {knee.concurrency} | ended: {stop}")
    found = [k for k in knees if k is not None]
    spread = max(math.log2(k) for k in found) - min(math.log2(k) for k in found) if found else None
    print(f"knee found in {len(found)} of {len(knees)} runs: {knees}")
    if spread is not None:
        print(f"knees apart by at most {spread:g} level(s) (doublings)")
    for level, values in sorted(by_level.items()):
        if len(values) > 1:
            print(f"level {level}: total tok/s max/min across runs {max(values) / min(values):.3f}")
    return 0 if len(found) == len(knees) else 1


if __name__ == "__main__":
    sys.exit(main())
