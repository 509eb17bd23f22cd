"""diagnose's predictions against what a second run measured, for every kept real-engine case.

Each case is a run with one planted limit and its rerun with diagnose's first action
applied, both kept under benchmarks/gpu/results/ (one H200, h200-ref under transformers
serve: one pass of these cases takes most of the GPU time a change gets, so calibration
and its tests work from the saved runs). For each: the first finding of the planted run
(it must be the planted kind), its expected gain as a point and an interval, the factor
the rerun measured at the same operating point, the point's error and whether the
measured factor lies in the interval.

    python benchmarks/diagnose_accuracy.py [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from servelab.diagnose import DiagnoseOptions, diagnose_run
from servelab.diagnose.check import check_prediction, parse_applies

RESULTS = Path(__file__).resolve().parent / "gpu" / "results"
CASES = [
    ("h200-diagnose", "default", "launch_overhead", "graphs", "CUDA graphs off (defaults)"),
    ("h200-planted", "default", "launch_overhead", "graphs", "CUDA graphs off (defaults)"),
    ("h200-planted", "kv", "kv_capacity", "kv-applied", "mem_fraction 0.004"),
    ("h200-planted", "batch", "batch_token_budget", "batch-applied", "max_batch_tokens 128"),
]
"""(recording, planted run, planted kind, rerun with the action applied, what was planted)."""
FILES = ("summary.json", "engine_events.json", "probe.json")


@dataclass(frozen=True)
class Row:
    case: str
    planted: str
    first_finding: str
    predicted: float | None
    low: float | None
    high: float | None
    measured: float | None
    error: float | None
    verdict: str


def _copy(source: Path, into: Path) -> Path:
    into.mkdir(parents=True)
    for name in FILES:
        shutil.copy(source / name, into / name)
    return into


def measure(work: Path) -> list[Row]:
    rows = []
    for recording, planted, kind, applied, what in CASES:
        a = _copy(RESULTS / recording / planted, work / recording / planted)
        b = _copy(RESULTS / recording / applied, work / recording / applied)
        findings = diagnose_run(a, DiagnoseOptions(), write=False).findings
        check = check_prediction(parse_applies(f"{a}:{kind}"), b)
        error = None
        if check.predicted is not None and check.measured:
            error = check.predicted / check.measured - 1
        rows.append(
            Row(
                case=f"{recording}/{planted} -> {applied}",
                planted=what,
                first_finding=findings[0].kind.value if findings else "none",
                predicted=check.predicted,
                low=check.low,
                high=check.high,
                measured=check.measured,
                error=error,
                verdict=check.verdict,
            )
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        rows = measure(Path(work))
    if args.json:
        print(json.dumps([asdict(row) for row in rows], indent=1))
        return 0
    print(f"{'case':42} {'planted':28} {'first finding':20} predicted (interval)   measured  error")
    for row in rows:
        interval = f"{row.predicted:g}x ({row.low:g}-{row.high:g})" if row.predicted else "-"
        error = f"{row.error:+.0%}" if row.error is not None else "-"
        measured = f"{row.measured:.3g}x" if row.measured else "-"
        print(
            f"{row.case:42} {row.planted:28} {row.first_finding:20} {interval:22} "
            f"{measured:9} {error:6} {row.verdict}"
        )
    inside = sum(row.verdict == "inside" for row in rows)
    print(f"{inside} of {len(rows)} measured factors inside the stated interval")
    return 0 if inside == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
