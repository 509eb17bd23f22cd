"""The twin on the real vLLM runs the suite already makes (no launch of its own): every
streamed run is fitted from its requests and replayed under the limits diagnose read.

`SERVELAB_KEEP_RUNS=DIR` copies each run directory there (benchmarks/twin_fidelity.py
reads the copies committed under benchmarks/results).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from servelab.diagnose import DiagnoseOptions, diagnose_run
from servelab.store import TWIN_FILE, RunDir
from servelab.twin import TwinResult

RUNS: dict[str, Callable[[pytest.FixtureRequest], Path]] = {
    "kv-limited": lambda r: r.getfixturevalue("vllm_kv_limited_sweep").run_dir,
    "kv-applied": lambda r: r.getfixturevalue("vllm_kv_rerun").applied.run_dir,
    "budget-planted": lambda r: r.getfixturevalue("vllm_budget_rerun").planted.run_dir,
    "budget-applied": lambda r: r.getfixturevalue("vllm_budget_rerun").applied.run_dir,
    "conversations": lambda r: r.getfixturevalue("vllm_budget_rerun").uncached.run_dir,
}
TOLERANCE = 0.25
"""The issue's bar for a replayed level's TPOT and median TTFT."""


def _keep(run_dir: Path, name: str) -> None:
    keep = os.environ.get("SERVELAB_KEEP_RUNS")
    if keep:
        shutil.copytree(run_dir, Path(keep) / name, dirs_exist_ok=True)


@pytest.mark.parametrize("name", RUNS)
def test_each_streamed_vllm_run_is_fitted_from_its_requests_and_replayed(
    name: str, request: pytest.FixtureRequest
) -> None:
    run_dir = RUNS[name](request)
    diagnosis = diagnose_run(run_dir, DiagnoseOptions(engine="vllm"), write=True)
    _keep(run_dir, name)
    assert diagnosis.sources["twin"].available, diagnosis.sources["twin"].detail
    twin = RunDir(run_dir).load(TWIN_FILE, TwinResult)
    assert twin is not None
    assert twin.fit.source == "requests"
    assert twin.policy.name == "vllm" and twin.policy.decodes_in_budget
    assert twin.term("base") > 0
    for level in twin.levels:
        for metric in ("median_tpot_ms", "median_ttft_ms"):
            pair = level.metrics[metric]
            assert pair.error is not None, (level.load, metric)
            print(f"{name} {level.load} {metric}: {pair.measured:.1f} -> {pair.replayed:.1f}")
    errors = {
        (level.load, metric): level.metrics[metric].error
        for level in twin.levels
        for metric in ("median_tpot_ms", "median_ttft_ms")
    }
    missed = {k: e for k, e in errors.items() if e is not None and abs(e) > TOLERANCE}
    assert not missed, f"{name}: replayed outside ±25%: {missed}"
