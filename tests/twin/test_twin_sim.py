"""The twin of a run on the real simulator (a server on 127.0.0.1, driven over HTTP):
replayed within the simulator's own noise, and served back by `servelab sim --twin`.

The noise is measured, not assumed: the same sweep is run twice on the same simulator,
and the replay may differ from the run by no more than the two runs differ from each
other, plus the client's share of a step (a few percent).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from servelab.bench.results import BenchSummary
from servelab.bench.session import BenchConfig, run_bench
from servelab.bench.workload import WorkloadSpec
from servelab.diagnose import DiagnoseOptions, diagnose_run
from servelab.engines.launcher import RunningEngine
from servelab.store import TWIN_FILE, RunDir
from servelab.twin import TwinResult

PLANTED = {
    "step_base_ms": 6.0,
    "step_per_seq_ms": 0.2,
    "prefill_per_token_ms": 0.01,
    "step_per_context_token_ms": 0.002,
    "max_running_requests": 6,
}
LEVELS = [1.0, 4.0, 12.0]
WORKLOAD = WorkloadSpec(input_len=256, output_len=40, range_ratio=0.5)
COMPARED = ("median_tpot_ms", "median_ttft_ms", "output_throughput")
CLIENT_SHARE = 0.05
"""What the client's own timing adds to a level's metric between two runs of one sweep
beyond their measured difference (event-loop wake-ups against 6-10 ms steps)."""


def _sweep(url: str, out: Path) -> BenchSummary:
    config = BenchConfig(
        url=url,
        name=out.name,
        levels=LEVELS,
        num_requests=18,
        warmup=1,
        workload=WORKLOAD,
        out=out,
    )
    return run_bench(config).summary


def _metric(summary: BenchSummary, level: int, name: str) -> float:
    value = getattr(summary.levels[level], name)
    assert value is not None
    return float(value)


@pytest.mark.timing
def test_a_simulated_run_is_replayed_and_served_back_within_its_noise(
    start_sim: Callable[..., RunningEngine], tmp_path: Path
) -> None:
    planted = start_sim(**PLANTED)
    first = _sweep(planted.url, tmp_path / "run")
    repeat = _sweep(planted.url, tmp_path / "repeat")
    diagnosis = diagnose_run(tmp_path / "run", DiagnoseOptions(), write=True)
    assert diagnosis.sources["twin"].available, diagnosis.sources["twin"].detail
    twin = RunDir(tmp_path / "run").load(TWIN_FILE, TwinResult)
    assert twin is not None and twin.fit.source == "requests"
    assert twin.limit("running_cap") == PLANTED["max_running_requests"]
    for index, level in enumerate(twin.levels):
        for name in COMPARED:
            noise = abs(_metric(repeat, index, name) / _metric(first, index, name) - 1)
            error = level.metrics[name].error
            assert error is not None
            assert abs(error) <= noise + CLIENT_SHARE, (level.load, name, error, noise)

    served = start_sim(twin=str(tmp_path / "run"))
    again = _sweep(served.url, tmp_path / "served")
    for index in range(len(LEVELS)):
        for name in COMPARED:
            noise = abs(_metric(repeat, index, name) / _metric(first, index, name) - 1)
            error = _metric(again, index, name) / _metric(first, index, name) - 1
            assert abs(error) <= noise + 2 * CLIENT_SHARE, (index, name, error, noise)


def test_sim_twin_says_in_one_line_when_the_run_has_no_twin(tmp_path: Path) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "servelab", "sim", "--twin", str(tmp_path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "no twin.json" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
