"""Every gain diagnose stated by replay, against its rerun, for the kept vLLM-for-CPUs pairs.

Each pair is a run with one planted limit and the rerun that applied diagnose's first
action (its summary.json names the finding in run.applies). The planted run is diagnosed
afresh, the rerun checks every gain the finding stated, and each check is printed with
its point error (predicted / measured - 1) and its interval's width (high / low).

Where diagnose now asks for another value than the one the kept rerun applied (the step
budget's lift changed after batch2 ran), the finding's gains are replayed at the value the
rerun applied, and the line says so: a prediction is checked at the setting measured.

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
from servelab.diagnose.collect import collect_facts
from servelab.diagnose.document import Diagnosis
from servelab.diagnose.findings import Finding, FindingKind
from servelab.diagnose.inputs import load_run
from servelab.diagnose.twin_rank import expected_gains
from servelab.diagnose.whatif_run import KNOB_LIMITS, fitted_twin
from servelab.store import RunDir
from servelab.twin.lifting import Objective

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
    (CPU_RUNS, "vllm-cpu-cap-default", "vllm-cpu-cap-raised", FindingKind.RUNNING_REQUEST_CAP),
    (GPU_RUNS, "kv2", "kv2-applied", FindingKind.KV_CAPACITY),
    (GPU_RUNS, "batch2", "batch2-applied", FindingKind.BATCH_TOKEN_BUDGET),
    (GPU_RUNS, "graphs2", "graphs2-applied", FindingKind.LAUNCH_OVERHEAD),
    (GPU_RUNS, "kv3", "kv3-applied", FindingKind.KV_CAPACITY),
    (GPU_RUNS, "kv4", "kv4-applied", FindingKind.KV_CAPACITY),
    (GPU_RUNS, "batch3", "batch3-applied", FindingKind.BATCH_TOKEN_BUDGET),
    (GPU_RUNS, "graphs3", "graphs3-applied", FindingKind.LAUNCH_OVERHEAD),
    (GPU_RUNS, "batch4", "batch4-applied", FindingKind.BATCH_TOKEN_BUDGET),
    (GPU_RUNS, "batch5", "batch5-applied", FindingKind.BATCH_TOKEN_BUDGET),
)
"""(folder, planted run, its rerun with the action, the planted kind): the suite's vLLM for
CPUs, and h200-ref under transformers serve on one H100 (graphs3: one H200; each run's
probe names its card) (benchmarks/gpu/run_all.sh, part pairs)."""
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
            said = _at_applied_value(first, kind, planted, applied, options)
            if said:
                print(f"  {said}")
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


_LIMIT_SETTINGS = {
    "running_cap": "running_cap",
    "kv_capacity_tokens": "kv_capacity_tokens",
    "batch_tokens": "max_batch_tokens",
}
"""The twin's limits and the engine configuration's settings that hold them."""


def _at_applied_value(
    diagnosis: Diagnosis, kind: FindingKind, planted: Path, applied: Path, options: DiagnoseOptions
) -> str | None:
    """Where the finding's action asks for another value than the rerun applied, write the
    planted run a diagnosis.json whose finding states its gains at the applied value (the
    check reads it), and say so; None where they agree or no limit is changed."""
    finding = next((f for f in diagnosis.findings if f.kind is kind), None)
    action = next((a for a in finding.actions if a.knob in KNOB_LIMITS), None) if finding else None
    if finding is None or action is None:
        return None
    conf = collect_facts(load_run(applied, engine=options.engine), options).engine
    setting = getattr(conf, _LIMIT_SETTINGS[KNOB_LIMITS[action.knob or ""]])
    if setting is None or setting.value == action.value:
        return None
    twin, _ = fitted_twin(planted, options)
    moved = _with_value(finding, action.knob or "", setting.value)
    gains, _ = expected_gains(twin, moved, Objective.of(twin.levels, None).worst_level)
    restated = moved.model_copy(update={"expected_gains": gains})
    findings = [restated if f is finding else f for f in diagnosis.findings]
    RunDir(planted).write_diagnosis(diagnosis.model_copy(update={"findings": findings}))
    return (
        f"diagnose now asks for {action.knob} {action.value:,}; the kept rerun applied "
        f"{setting.value:,} ({setting.source}), so its gains are replayed at {setting.value:,}"
    )


def _with_value(finding: Finding, knob: str, value: int) -> Finding:
    actions = [
        a.model_copy(update={"value": value}) if a.knob == knob else a for a in finding.actions
    ]
    return finding.model_copy(update={"actions": actions})


if __name__ == "__main__":
    sys.exit(main())
