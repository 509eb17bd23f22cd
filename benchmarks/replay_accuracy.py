"""Every gain diagnose stated by replay, against its rerun, for the kept vLLM-for-CPUs pairs.

Each pair is a run with one planted limit and the rerun that applied diagnose's first
action (its summary.json names the finding in run.applies). The planted run is diagnosed
afresh, the rerun checks every gain the finding stated, and each check is printed with
its point error (predicted / measured - 1) and its interval's width (high / low).

    python benchmarks/replay_accuracy.py
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

from servelab.diagnose import DiagnoseOptions, diagnose_run
from servelab.diagnose.findings import FindingKind

HERE = Path(__file__).resolve().parent
CPU_RUNS = HERE / "results" / "twin"
GPU_RUNS = HERE / "gpu" / "results" / "h100-pairs"
PAIRS = (
    (
        CPU_RUNS,
        "vllm-cpu-budget-planted",
        "vllm-cpu-budget-applied",
        FindingKind.BATCH_TOKEN_BUDGET,
    ),
    (CPU_RUNS, "vllm-cpu-kv-limited", "vllm-cpu-kv-applied", FindingKind.KV_CAPACITY),
    (GPU_RUNS, "kv2", "kv2-applied", FindingKind.KV_CAPACITY),
    (GPU_RUNS, "batch2", "batch2-applied", FindingKind.BATCH_TOKEN_BUDGET),
    (GPU_RUNS, "graphs2", "graphs2-applied", FindingKind.LAUNCH_OVERHEAD),
)
"""(folder, planted run, its rerun with the action, the planted kind): the suite's vLLM for
CPUs, and h200-ref under transformers serve on one H100 (benchmarks/gpu/run_all.sh, part
pairs)."""
WITHIN = 0.35


def _unpack(kept: Path, name: str, into: Path) -> Path:
    run = into / name
    run.mkdir()
    for path in (kept / name).iterdir():
        if path.suffix == ".gz":
            (run / path.stem).write_bytes(gzip.decompress(path.read_bytes()))
        else:
            shutil.copy(path, run / path.name)
    return run


def main() -> int:
    rows, inside, near = 0, 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for kept, planted_name, applied_name, kind in PAIRS:
            planted = _unpack(kept, planted_name, Path(tmp))
            applied = _unpack(kept, applied_name, Path(tmp))
            summary = json.loads((applied / "summary.json").read_text())
            summary["run"]["applies"] = f"{planted}:{kind.value}"
            (applied / "summary.json").write_text(json.dumps(summary))
            options = DiagnoseOptions(engine="vllm" if kept == CPU_RUNS else None)
            first = diagnose_run(planted, options, write=False)
            named = first.findings[0].kind.value if first.findings else "-"
            print(f"{planted_name}: planted {kind.value}, named first: {named}")
            checks = diagnose_run(applied, options, write=False).predictions
            for check in checks:
                if check.measured is None or check.predicted is None or not check.low:
                    print(f"  {check.text}")
                    continue
                rows += 1
                inside += check.verdict in ("inside", "within noise")
                error = check.predicted / check.measured - 1
                near += abs(error) <= WITHIN
                width = (check.high or 0) / check.low
                print(
                    f"  {check.metric:<17} at {check.at}: predicted {check.predicted:.2f}x "
                    f"({check.low:.2f}-{check.high:.2f}), measured {check.measured:.2f}x; "
                    f"point error {error:+.0%}, width {width:.1f}x, {check.verdict}"
                )
    print(f"{inside} of {rows} inside their interval; {near} of {rows} within ±{WITHIN:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
