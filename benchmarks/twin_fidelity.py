"""How faithful the twin is: every kept real-engine run fitted and replayed, level by level.

For each run directory kept in the repository (the H200 runs under benchmarks/gpu/results,
the suite's vLLM CPU runs under benchmarks/results/twin, their requests.jsonl gzipped), it
fits the run's engine as `servelab diagnose` does, replays every level, and prints the
replayed against the measured median TPOT, median TTFT and median E2E as ratios, with the
explained share. A level outside ±25% on TPOT and median TTFT (on median E2E where the
answers came whole, without a stream) is marked; docs/TWIN.md says why each one misses.

    python benchmarks/twin_fidelity.py [RUN_DIR ...]
"""

from __future__ import annotations

import gzip
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from servelab.diagnose import DiagnoseOptions, diagnose_run
from servelab.store import SUMMARY_FILE, TWIN_FILE, RunDir
from servelab.twin import TwinResult
from servelab.twin.compare import REPRODUCED as BAR
from servelab.twin.result import MetricPair

HERE = Path(__file__).resolve().parent
KEPT = (HERE / "gpu" / "results", HERE / "results" / "twin")
COPIED = ("summary.json", "engine_events.json", "probe.json", "engine.log")
PACKED = ("requests.jsonl", "metrics.jsonl")
"""Kept gzipped (NAME.gz) or plain."""


def kept_runs() -> Iterator[Path]:
    """Every kept run directory with a summary of a launched engine."""
    for root in KEPT:
        for summary in sorted(root.rglob(SUMMARY_FILE)):
            yield summary.parent


def _staged(run: Path, into: Path) -> Path:
    """A scratch copy of the run (diagnose writes into it), its JSON Lines unzipped."""
    into.mkdir(parents=True)
    for name in COPIED:
        if (run / name).is_file():
            shutil.copy(run / name, into / name)
    for name in PACKED:
        packed = run / f"{name}.gz"
        if packed.is_file():
            with gzip.open(packed, "rb") as src, (into / name).open("wb") as dst:
                shutil.copyfileobj(src, dst)
        elif (run / name).is_file():
            shutil.copy(run / name, into / name)
    return into


def _ratio(pair: MetricPair) -> float | None:
    if pair.replayed is None or not pair.measured:
        return None
    return pair.replayed / pair.measured


def main(argv: list[str]) -> int:
    runs = [Path(a) for a in argv] or list(kept_runs())
    print(f"{'run':42} {'level':18} {'TPOT':>6} {'TTFT':>6} {'E2E':>6} {'explained':>9}")
    within = total = 0
    with tempfile.TemporaryDirectory() as scratch:
        for number, run in enumerate(runs):
            staged = _staged(run, Path(scratch) / str(number))
            diagnosis = diagnose_run(staged, DiagnoseOptions(), write=True)
            twin = RunDir(staged).load(TWIN_FILE, TwinResult)
            name = str(run.relative_to(HERE)) if run.is_relative_to(HERE) else str(run)
            if twin is None:
                print(f"{name:42} {diagnosis.sources['twin'].detail}")
                continue
            for level in twin.levels:
                ratios = [
                    _ratio(level.metrics[m])
                    for m in ("median_tpot_ms", "median_ttft_ms", "median_e2e_latency_ms")
                ]
                judged = ratios[:2] if ratios[0] is not None else ratios[2:]
                ok = all(r is not None and abs(r - 1) <= BAR for r in judged)
                within += ok
                total += 1
                cells = [f"{r:6.2f}" if r is not None else f"{'-':>6}" for r in ratios]
                share = level.explained_share
                mark = "" if ok else "  outside ±25%"
                print(
                    f"{name:42} {level.load:18} {cells[0]} {cells[1]} {cells[2]} "
                    f"{share if share is None else format(share, '9.2f')}{mark}"
                )
            print(f"{'':42} fitted from {twin.fit.source}, {twin.fit.rounds} rounds")
    print(f"\nlevels within ±25% (TPOT and median TTFT, else median E2E): {within} of {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
